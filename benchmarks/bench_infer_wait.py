"""Inference on a busy machine: how OpenMP's threads wait, for the forward passes that
``generate``, ``score``, ``patch`` and the app's decisions run.

A child process opens a SmolLM2-135M-shaped transformers folder (random weights, made here)
and times a 21-token forward and 16 cached decisions, after a warm-up. The same child runs
under each OpenMP setting: torch's default (libgomp spins a while at every barrier), a
passive wait (``OMP_WAIT_POLICY=PASSIVE``: a waiting thread sleeps at once, so the kernel may
move the thread that shares a busy core onto the core it left), a short spin
(``GOMP_SPINCOUNT``) and one thread. Loads: idle, and one busy loop (``python -c "while
True: pass"``) per busy core. Settings interleave in rotating order, each round a fresh
process under a fresh load; medians with the spread and the ratio to torch's default under
the same load.

    .venv/bin/python benchmarks/bench_infer_wait.py [--rounds 3] [--loads idle,one-busy]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from bench_busy import busy_loops  # noqa: E402
from bench_models import make_models  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LOADS = {"idle": 0, "one-busy": 1}
CHILD = r"""
import json, statistics, sys, time
import torch
from minigpt_tui.engine.analysis.generation import DecisionStepper
from minigpt_tui.engine.analysis.generation_rule import GenerationRule
from minigpt_tui.engine.models.hf_models import open_hf_model

threads = int(sys.argv[2])
torch.set_num_threads(threads)
portable = open_hf_model(sys.argv[1])
ids = torch.tensor([list(range(1000, 1021))])

def forward():
    with torch.no_grad():
        portable.model(ids)

def decisions():
    stepper = DecisionStepper(portable.model, portable.tokenizer, "x", GenerationRule("greedy", max_new_tokens=16),
                              use_kv_cache=True)
    stepper.prompt_ids = tuple(range(1000, 1021))
    for _ in range(16):
        stepper.step()

def timed(work, times):
    work()
    seconds = []
    for _ in range(times):
        start = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)

print(json.dumps({"forward": timed(forward, 5), "decision": timed(decisions, 3) / 16}))
"""

SETTINGS: dict[str, tuple[dict[str, str], int]] = {
    "torch's default, 2 threads": ({}, 2),
    "OMP_WAIT_POLICY=PASSIVE, 2 threads": ({"OMP_WAIT_POLICY": "PASSIVE"}, 2),
    "GOMP_SPINCOUNT=10000, 2 threads": ({"GOMP_SPINCOUNT": "10000"}, 2),
    "1 thread": ({}, 1),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loads", default=",".join(LOADS), help="comma-separated: " + ", ".join(LOADS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        model = make_models(Path(folder), ("smollm2-135M",))["smollm2-135M"]
        (Path(folder) / "child.py").write_text(CHILD, "utf-8")
        base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        base["PYTHONPATH"] = str(ROOT)
        names = list(SETTINGS)
        for load in args.loads.split(","):
            results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
            for r in range(args.rounds):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    extra, threads = SETTINGS[name]
                    loops = busy_loops(LOADS[load])
                    try:
                        time.sleep(0.5 if loops else 0.0)
                        done = subprocess.run([sys.executable, str(Path(folder) / "child.py"), str(model), str(threads)],
                                              env={**base, **extra}, capture_output=True, text=True, check=True)
                    finally:
                        for loop in loops:
                            loop.kill()
                            loop.wait()
                    results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"{load}:")
            baseline = results[names[0]]
            for name in names:
                for measure in ("forward", "decision"):
                    values = [row[measure] for row in results[name]]
                    ratios = [row[measure] / b[measure] for row, b in zip(results[name], baseline)]
                    print(f"  {name:<36} {measure:<9} median {statistics.median(values) * 1e3:8.1f} ms "
                          f"({min(values) * 1e3:.1f}-{max(values) * 1e3:.1f}); "
                          f"{statistics.median(ratios):.2f}x the default ({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
