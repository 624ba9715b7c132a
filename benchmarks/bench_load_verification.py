"""What verifying the content identity costs when a checkpoint is loaded.

Every load for training or inference recomputes the model identity of ``model.safetensors``
and the content digest of ``training.safetensors`` from their tensors (so weights edited
under a re-signed manifest are refused). The baseline is the same load trusting the
manifest's SHA-256 alone (``load_checkpoint(recompute_digests=False)``, what loading did
before). Both sides read and hash every file against the manifest; the files are in the
page cache for both. The two loads run in alternation, after a warm-up, for ROUNDS rounds;
the figure is the median of the per-round ratios (verified / baseline) with the
interquartile range, for the small preset (1.64M scalars, float32) and the mini preset.

    .venv/bin/python benchmarks/bench_load_verification.py
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from minigpt_tui.engine.checkpoint.directory import load_checkpoint, save_checkpoint
from minigpt_tui.engine.checkpoint.portable import read_portable
from minigpt_tui.engine.config import load_config
from minigpt_tui.engine.corpus import load_corpus
from minigpt_tui.engine.trainer import Trainer, TrainingSetup, apply_precision

ROUNDS = 41
WARMUP = 3


def saved_checkpoint(preset: str, folder: Path) -> Path:
    config = load_config(preset)
    apply_precision(config.train)
    trainer = Trainer(TrainingSetup.build(config, load_corpus(config.corpus)))
    trainer.update()  # AdamW has its moments
    return save_checkpoint(trainer, folder / "checkpoints")


def paired_ratios(rounds: int, measured: Callable[[], object], baseline: Callable[[], object]) -> dict[str, float]:
    for _ in range(WARMUP):
        measured(), baseline()
    ratios, measured_times, baseline_times = [], [], []
    for index in range(rounds):
        order = (measured, baseline) if index % 2 == 0 else (baseline, measured)
        seconds = {}
        for action in order:
            start = time.perf_counter()
            action()
            seconds[action] = time.perf_counter() - start
        measured_times.append(seconds[measured])
        baseline_times.append(seconds[baseline])
        ratios.append(seconds[measured] / seconds[baseline])
    quartiles = statistics.quantiles(ratios, n=4)
    return {
        "ratio": statistics.median(ratios),
        "q1": quartiles[0],
        "q3": quartiles[2],
        "measured_ms": 1000 * statistics.median(measured_times),
        "baseline_ms": 1000 * statistics.median(baseline_times),
    }


def main() -> None:
    print(f"load average {os.getloadavg()[0]:.2f}; {ROUNDS} interleaved rounds after {WARMUP} warm-up rounds")
    with tempfile.TemporaryDirectory(prefix="minigpt-bench-verify-") as tmp:
        for preset in ("small", "mini"):
            folder = saved_checkpoint(preset, Path(tmp) / preset)
            size = sum(p.stat().st_size for p in folder.iterdir())
            whole = paired_ratios(
                ROUNDS,
                lambda: load_checkpoint(folder, recompute_digests=True),
                lambda: load_checkpoint(folder, recompute_digests=False),
            )
            model = paired_ratios(
                ROUNDS,
                lambda: read_portable(folder / "model.safetensors", verify_identity=True),
                lambda: read_portable(folder / "model.safetensors", verify_identity=False),
            )
            print(f"{preset} ({size / 2**20:.1f} MiB checkpoint)")
            for label, r in (("load_checkpoint (both files)", whole), ("model file alone", model)):
                print(
                    f"  {label}: verified {r['measured_ms']:.1f} ms vs manifest only {r['baseline_ms']:.1f} ms: "
                    f"ratio {r['ratio']:.2f}x (IQR {r['q1']:.2f}-{r['q3']:.2f})"
                )


if __name__ == "__main__":
    main()
