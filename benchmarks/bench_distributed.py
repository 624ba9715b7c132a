"""Updates per second with 1 and 2 processes (gloo, one thread each) for the `small` preset:
`minigpt-tui train --nproc N` against a bare DistributedDataParallel loop written here (same
model class, corpus windows, padding and AdamW; its own random draws; no dropout masks, evaluation, no checkpoint, no
per-rank streams or records). Interleaved rounds; the median of each is reported, with the
spread, as updates/s and as the ratio ours / bare for each process count.

    .venv/bin/python benchmarks/bench_distributed.py [UPDATES] [ROUNDS]
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PRESET = "small"
WARMUP = 2  # updates left out of each timing (allocation, first all-reduce)


def ours(nproc: int, updates: int, runs_dir: Path) -> float:
    config = runs_dir / "bench.toml"
    config.write_text(f"[train]\nsteps = {updates}\nwarmup = 0\neval_every = 0\nsave_every = 0\nthreads = 1\n")
    env = {**os.environ, "MINIGPT_TUI_RUNS_DIR": str(runs_dir), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "minigpt_tui", "train", "--preset", PRESET, "--config", str(config),
                           "--nproc", str(nproc), "--json"], capture_output=True, text=True, env=env, check=True)
    metrics = Path(json.loads(done.stdout)["run_dir"]) / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    seconds = [r["seconds"] for r in records if r["kind"] == "update"][WARMUP:]
    return len(seconds) / sum(seconds)


BARE = r"""
import os, sys, time, torch, torch.distributed as dist, torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from minigpt_tui.engine.training.batches import make_batch, make_examples
from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.models.model import MiniGPT
from minigpt_tui.engine.training.trainer import TrainingSetup
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
config = load_config(sys.argv[1])
updates, warmup = int(sys.argv[2]), int(sys.argv[3])
setup = TrainingSetup.build(config, load_corpus(config.corpus))
examples = make_examples(setup.corpus.train, setup.tokenizer, config.model.context)
vocab = setup.tokenizer.vocab_size
model = MiniGPT(config.model, vocab, torch.float32)
model.initialize(config.seeds.init)
ddp = DistributedDataParallel(model)
opt = torch.optim.AdamW(model.parameters(), lr=config.train.lr)
gen = torch.Generator().manual_seed(rank)
times = []
for _ in range(updates):
    start = time.perf_counter()
    batch = make_batch([examples[i] for i in torch.randint(len(examples), (config.train.batch_size,), generator=gen).tolist()])
    logits = ddp(batch.inputs).logits
    F.cross_entropy(logits.reshape(-1, vocab), batch.targets.reshape(-1), ignore_index=-1).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    times.append(time.perf_counter() - start)
if rank == 0:
    print(len(times[warmup:]) / sum(times[warmup:]))
dist.destroy_process_group()
"""


def bare(nproc: int, updates: int) -> float:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                           "--master-addr", "127.0.0.1", "--master-port", str(port), "--no-python",
                           sys.executable, "-c", BARE, PRESET, str(updates), str(WARMUP)],
                          capture_output=True, text=True, env=env, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    updates = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for nproc in (1, 2):
                results.setdefault(f"ours {nproc}", []).append(ours(nproc, updates, Path(tmp)))
                results.setdefault(f"bare {nproc}", []).append(bare(nproc, updates))
    print(f"preset {PRESET}, {updates} updates per run ({WARMUP} left out), {rounds} interleaved rounds, "
          f"{os.cpu_count()} cores, one thread per process")
    median = {name: statistics.median(values) for name, values in results.items()}
    for name, values in results.items():
        print(f"  {name} process(es): {median[name]:.2f} updates/s (min {min(values):.2f}, max {max(values):.2f})")
    for nproc in (1, 2):
        ratios = [o / b for o, b in zip(results[f"ours {nproc}"], results[f"bare {nproc}"])]
        print(f"  ours / bare DDP loop, {nproc} process(es): {statistics.median(ratios):.2f} "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
    print(f"  2 / 1 processes: ours {median['ours 2'] / median['ours 1']:.2f}, bare {median['bare 2'] / median['bare 1']:.2f}"
          " (updates/s; each update of 2 processes trains twice the examples)")


if __name__ == "__main__":
    main()
