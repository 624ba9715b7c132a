"""Checkpoint save, load, header-only inspection and one-tensor statistics, each against a
named baseline.

1. Save the portable model plus training state of the small preset (after one update, so
   AdamW has its moments) as a checkpoint folder, against ``torch.save`` of the equivalent
   state dicts in one ``.pt`` file, the nanoGPT way (model, optimizer, iteration, config,
   random states). Reports the share of our time spent in fsync and in SHA-256 hashing.
2. Load into a ready model: our verified ``load_checkpoint`` (manifest hashes, identity,
   content digest, constructor-built model) and then weights and state into a ready
   trainer, against ``torch.load(weights_only=True)`` and ``load_state_dict`` into a ready
   model and optimizer. ``safetensors.load_file`` maps lazily, so both sides are timed up
   to the restored trainer / model, never only the call that opens the file.
3. Header-only inspection of a >= 200 MB safetensors file (in process) against the
   safetensors library's own header path (``safe_open``: names, shapes, metadata) and
   ``torch.load(weights_only=True)`` of the same tensors saved as ``.pt`` (whole, and with
   mmap=True), every side the same number of rounds.
4. Statistics of one tensor, reading that tensor alone, against loading the whole file.

Every figure is the best (and median) of several rounds run in alternation with the
baseline (the page cache is warm for both sides). On a shared machine the wall-clock figures
move with other users' load, so the load average is printed, and the CPU time per call (all
threads, kernel included) is reported as well: it measures the work itself.

    .venv/bin/python benchmarks/bench_checkpoint.py
"""

from __future__ import annotations

import hashlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors import safe_open
from timing import interleaved, ratio

from minigpt_tui.engine.training import checkpoints as directory, state_parts, training_state
from minigpt_tui.engine.formats import portable, safetensors_read, safetensors_write
from minigpt_tui.engine.training.checkpoints import load_checkpoint, save_checkpoint
from minigpt_tui.engine.models.model_file import copy_into
from minigpt_tui.engine.formats.inspect import inspect_path, tensor_statistics
from minigpt_tui.engine.formats.safetensors_read import load_file, read_header, read_tensor
from minigpt_tui.engine.formats.safetensors_write import write_safetensors
from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.training.trainer import Trainer, TrainingSetup, apply_precision

ROUNDS = 25
HEADER_ROUNDS = 7


def best_of(rounds: int, action: Callable[[], object]) -> tuple[float, float]:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def interleaved_best(rounds: int, *actions: Callable[[], object]) -> list[tuple[float, float]]:
    """Best and median of each action, run in alternation so that the load of a shared
    machine falls on every side alike."""
    return [(best, median) for best, median, _ in interleaved_with_cpu(rounds, *actions)]


def interleaved_with_cpu(rounds: int, *actions: Callable[[], object]) -> list[tuple[float, float, float]]:
    """As :func:`interleaved_best`, plus the median CPU time of this process (all its threads,
    kernel time included) per call: the work done, which other users of a shared machine
    do not change the way they change the wall-clock figures."""
    times: list[list[float]] = [[] for _ in actions]
    cpu: list[list[float]] = [[] for _ in actions]
    for action in actions:  # warm-up, untimed
        action()
    for r in range(rounds):
        # The order rotates each round: no side always runs first, or after the same neighbour.
        for i in [(r + k) % len(actions) for k in range(len(actions))]:
            action = actions[i]
            start, start_cpu = time.perf_counter(), time.process_time()
            action()
            times[i].append(time.perf_counter() - start)
            cpu[i].append(time.process_time() - start_cpu)
    return [(min(t), statistics.median(t), statistics.median(c)) for t, c in zip(times, cpu)]


class _Timed:
    """Seconds spent inside fsync or SHA-256 calls (summed over threads)."""

    def __init__(self) -> None:
        self.seconds = 0.0


@contextmanager
def measured_fsync_and_hashing(skip: bool = False):
    """Time fsync/fdatasync and SHA-256 inside our code; with ``skip`` do neither (the digests come
    out wrong: only for measuring what the rest costs)."""
    fsync_time, hash_time = _Timed(), _Timed()
    real_fsync = os.fsync
    real_writeback = safetensors_write._sync_file_range
    real_sha256 = hashlib.sha256

    def timed(sync: Callable[[int], None]) -> Callable[[int], None]:
        def timed_sync(fd: int) -> None:
            start = time.perf_counter()
            if not skip:
                sync(fd)
            fsync_time.seconds += time.perf_counter() - start

        return timed_sync

    class TimedHash:
        def __init__(self, data: bytes = b"") -> None:
            start = time.perf_counter()
            self._inner = real_sha256(b"" if skip else data)
            hash_time.seconds += time.perf_counter() - start

        def update(self, data: bytes) -> None:
            start = time.perf_counter()
            if not skip:
                self._inner.update(data)
            hash_time.seconds += time.perf_counter() - start

        def hexdigest(self) -> str:
            return self._inner.hexdigest()

    class HashModule:
        sha256 = TimedHash

    modules = (safetensors_read, safetensors_write, portable, training_state, state_parts, directory)
    saved = {m: getattr(m, "hashlib", None) for m in modules}
    os.fsync = timed(real_fsync)
    if skip:  # nor start writing pages out early (a hint the fsync would follow up)
        safetensors_write._sync_file_range = lambda: None
    for m in modules:
        if saved[m] is not None:
            m.hashlib = HashModule
    try:
        yield fsync_time, hash_time
    finally:
        os.fsync = real_fsync
        safetensors_write._sync_file_range = real_writeback
        for m, original in saved.items():
            if original is not None:
                m.hashlib = original


def nanogpt_checkpoint(trainer: Trainer) -> dict:
    """What nanoGPT's train.py saves, for the same run."""
    return {
        "model": trainer.model.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "model_args": trainer.config.to_dict()["model"],
        "iter_num": trainer.step,
        "best_val_loss": trainer.best_validation,
        "config": trainer.config.to_dict(),
        "rng": {"data": trainer.batches.generator.get_state(), "sampling": trainer.sampling.get_state()},
    }


def save_and_load(work: Path) -> None:
    config = load_config("small")
    apply_precision(config.train)
    setup = TrainingSetup.build(config, load_corpus(config.corpus))
    trainer = Trainer(setup)
    trainer.update()
    tensors, scalars = trainer.parameter_counts
    print(f"small preset: {tensors} tensors, {scalars} parameters, {config.train.precision} precision "
          f"({trainer.dtype}), after 1 update")

    ours_dir = work / "ours"
    pt_path = work / "nanogpt.pt"

    def ours_save() -> None:
        save_checkpoint(trainer, ours_dir, "bench")

    def torch_save() -> None:
        torch.save(nanogpt_checkpoint(trainer), pt_path)

    def torch_save_fsync() -> None:
        with open(pt_path, "wb") as fh:
            torch.save(nanogpt_checkpoint(trainer), fh)
            fh.flush()
            os.fsync(fh.fileno())

    ours_save()
    torch_save()
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())} on {os.cpu_count()} cores")
    # Each round replaces the folder of the same step, as torch.save replaces its file:
    # both sides pay for freeing the previous copy.
    (
        (ours_best, ours_median, ours_cpu),
        (base_best, base_median, base_cpu),
        (base_sync_best, base_sync_median, base_sync_cpu),
    ) = interleaved_with_cpu(ROUNDS, ours_save, torch_save, torch_save_fsync)
    with measured_fsync_and_hashing() as (fsync_time, hash_time):
        start = time.perf_counter()
        for _ in range(ROUNDS):
            ours_save()
        total = time.perf_counter() - start
    with measured_fsync_and_hashing(skip=True):
        bare_best, _ = best_of(ROUNDS, ours_save)
    folder = ours_dir / f"step-{trainer.step:06d}"
    ours_save()  # a folder with true digests for the load below
    ours_bytes = sum(p.stat().st_size for p in folder.iterdir())
    print("\n1. save: checkpoint folder (model + training state + manifest) vs torch.save of state dicts")
    print(f"   ours            best {ours_best * 1e3:8.2f} ms  median {ours_median * 1e3:8.2f} ms  ({ours_bytes / 1e6:.2f} MB)")
    print(f"   torch.save      best {base_best * 1e3:8.2f} ms  median {base_median * 1e3:8.2f} ms  "
          f"({pt_path.stat().st_size / 1e6:.2f} MB, no fsync)")
    print(f"   torch.save+fsync best {base_sync_best * 1e3:7.2f} ms  median {base_sync_median * 1e3:8.2f} ms")
    print(f"   ratio ours / torch.save = {ours_best / base_best:.2f}   ours / (torch.save+fsync) = {ours_best / base_sync_best:.2f}"
          f"   (medians: {ours_median / base_median:.2f} and {ours_median / base_sync_median:.2f})")
    print(f"   CPU time per save (median, all threads): ours {ours_cpu * 1e3:.1f} ms, torch.save {base_cpu * 1e3:.1f} ms, "
          f"torch.save+fsync {base_sync_cpu * 1e3:.1f} ms")
    print(f"   ours without fsync and SHA-256 (instrumented, digests wrong) best {bare_best * 1e3:.2f} ms: "
          f"ratio to torch.save = {bare_best / base_best:.2f}")
    print(f"   share of our save time: fsync {100 * fsync_time.seconds / total:.1f}%, "
          f"SHA-256 hashing {100 * hash_time.seconds / total:.1f}% (thread time; the two files overlap)")

    ready = Trainer(setup)
    ready_model = ready.model
    ready_optimizer = ready.optimizer

    def ours_load() -> None:  # the verified load, then weights and state into the ready trainer
        loaded = load_checkpoint(folder)
        copy_into(loaded.model_file, ready.model)
        training_state.apply_training_state(ready, loaded.state)

    def torch_load() -> None:
        checkpoint = torch.load(pt_path, map_location="cpu", weights_only=True)
        ready_model.load_state_dict(checkpoint["model"])
        ready_optimizer.load_state_dict(checkpoint["optimizer"])

    ours_load()
    torch_load()
    (load_best, load_median, load_cpu), (tload_best, tload_median, tload_cpu) = interleaved_with_cpu(
        ROUNDS, ours_load, torch_load
    )
    with measured_fsync_and_hashing() as (_, hash_time):
        start = time.perf_counter()
        for _ in range(ROUNDS):
            ours_load()
        total = time.perf_counter() - start
    assert ready.state_digest() == trainer.state_digest()
    print("\n2. load into a ready model and optimizer")
    print(f"   ours (both files SHA-256-checked against manifest)  best {load_best * 1e3:8.2f} ms  median {load_median * 1e3:8.2f} ms")
    print(f"   torch.load(weights_only=True) + load_state_dict     best {tload_best * 1e3:8.2f} ms  median {tload_median * 1e3:8.2f} ms")
    print(f"   ratio ours / torch.load = {load_best / tload_best:.2f} (medians: {load_median / tload_median:.2f}); "
          f"SHA-256 share of our load: {100 * hash_time.seconds / total:.1f}% (thread time; the two files overlap)")
    print(f"   CPU time per load (median, all threads): ours {load_cpu * 1e3:.1f} ms, torch {tload_cpu * 1e3:.1f} ms")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


def inspection(work: Path) -> None:
    count, elements = 26, 2_048_000  # 26 x 8.2 MB float32 = 213 MB
    generator = torch.Generator().manual_seed(0)
    tensors = [(f"layers.{i:02d}.weight", torch.randn(elements, generator=generator).reshape(1000, 2048)) for i in range(count)]
    big = work / "big.safetensors"
    big_pt = work / "big.pt"
    write_safetensors(big, tensors, {"note": "benchmark"})
    torch.save(dict(tensors), big_pt)
    del tensors
    size = big.stat().st_size
    def safe_open_header() -> None:
        # The safetensors library's own header-only path: names, dtypes, shapes, metadata.
        with safe_open(str(big), framework="pt") as handle:
            handle.metadata()
            for key in handle.keys():
                handle.get_slice(key).get_shape()

    timings = interleaved({
        "read_header": lambda: read_header(big),
        "inspect_path (entries, groups)": lambda: inspect_path(big),
        "safetensors safe_open (header)": safe_open_header,
        "torch.load(weights_only, mmap)": lambda: torch.load(big_pt, weights_only=True, mmap=True),
        "torch.load(weights_only=True)": lambda: torch.load(big_pt, weights_only=True),
    }, HEADER_ROUNDS)
    print(f"\n3. header-only inspection of a {size / 1e6:.0f} MB safetensors file ({count} tensors); "
          f"{HEADER_ROUNDS} rounds each after a warm-up, order rotating")
    for timing in timings.values():
        print("   " + timing.line())
    inspect = timings["inspect_path (entries, groups)"]
    print("   " + ratio(inspect, timings["safetensors safe_open (header)"]))
    for slower in ("torch.load(weights_only, mmap)", "torch.load(weights_only=True)"):
        print("   " + ratio(timings[slower], inspect))

    name = "layers.13.weight"
    stats_best, stats_median = best_of(7, lambda: tensor_statistics(big, name))
    (one_best, _), (whole_best, _) = interleaved_best(7, lambda: read_tensor(big, name),
                                                      lambda: load_file(big).tensor(name))
    stats = tensor_statistics(big, name)
    print(f"\n4. statistics of one tensor ({name}: {stats['bytes_read'] / 1e6:.1f} MB read of a {size / 1e6:.0f} MB file)")
    print(f"   tensor_statistics (read + min/max/mean/std/zeros/histogram) best {stats_best * 1e3:7.1f} ms  "
          f"median {stats_median * 1e3:7.1f} ms")
    print(f"   read that tensor alone                 best {one_best * 1e3:8.1f} ms")
    print(f"   read the whole file to get it          best {whole_best * 1e3:8.1f} ms")
    print(f"   ratio whole / alone = {whole_best / one_best:.1f}x")


def main() -> None:
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="minigpt-bench-"))
    try:
        save_and_load(work)
        inspection(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
