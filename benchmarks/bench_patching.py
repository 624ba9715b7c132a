"""Patching a real model in seconds: the `patch` sweep over resid, attn and mlp (what
``patch_prompts`` runs after encoding) on a SmolLM2-135M-shaped model (llama, 30 blocks of
width 576, 9 heads, 3 kv heads, 49,152 ids; a 5-id clean/corrupt pair that differ at one
position, like "The capital of France is" / "... Italy is") and a GPT-2-small-shaped one
(124M, 12 blocks of width 768; 16 ids, as bench_watch), random weights, float32, 2 threads,
``OMP_WAIT_POLICY=PASSIVE`` as the `patch` command starts torch.

Two sides, interleaved in rounds (benchmarks/timing.py), each constructing its patcher and
sweeping:

- one at a time: ``Patcher(rows=1)``, each patched run alone (a one-row batch), which is how
  every run was patched before batching;
- batched: rows chosen by the patcher (several runs a batch, same bits whichever runs share
  it).

Under each load of ``--loads`` (idle, one busy loop, two busy loops: ``python -c "while
True: pass"`` processes started here), medians with best/worst and the per-round ratio of
batched to one at a time. It prints how far the two sides' differences lie apart (last bits:
a run is a row of a wider batch) and checks patching's exact ends on the batched side. (Before batching, the sweep on the SmolLM2 shape took 41.9 s
loaded; the code of that time cannot run on today's model, so it is no longer a side here.)

    .venv/bin/python benchmarks/bench_patching.py [--rounds 2] [--loads idle,one] [--shapes smollm2,gpt2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the `patch` command, before torch starts

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_models import make_models  # noqa: E402
from timing import Timing, interleaved, ratio  # noqa: E402

THREADS = 2
SITES = ("resid", "attn", "mlp")
LOADS = {"idle": 0, "one": 1, "two": 2}
SHAPES = {  # name: (folder made by make_models, clean ids, corrupt ids, answer, against)
    "smollm2": ("smollm2-135M", [504, 3575, 282, 4649, 314], [504, 3575, 282, 8801, 314], 1100, 1200),
    "gpt2": ("gpt2-124M", list(range(1000, 1016)), [*range(1000, 1007), 2000, *range(1008, 1016)], 1100, 1200),
}
TARGET_S = 20.0


def busy_loops(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def check_ends(patcher: object, patching: object) -> str:
    """Patching's exact ends on ``patcher``: the embeddings where the prompts differ and the
    last residual at the last position give the clean difference bit for bit."""
    clean, corrupt = patcher.clean_ids, patcher.corrupt_ids  # type: ignore[attr-defined]
    differ = tuple(i for i, (a, b) in enumerate(zip(clean, corrupt)) if a != b)
    layers = patcher.model.config.layers  # type: ignore[attr-defined]
    first = patcher.difference([patching.Patch("resid", 0, differ)])  # type: ignore[attr-defined]
    last = patcher.difference([patching.Patch("resid", layers, (len(clean) - 1,))])  # type: ignore[attr-defined]
    held = first == last == patcher.clean_difference  # type: ignore[attr-defined]
    return "exact ends held" if held else "EXACT ENDS BROKEN"


def bench_shape(name: str, model: object, loads: list[str], rounds: int) -> None:
    from minigpt_tui.engine.analysis import patching

    _, clean, corrupt, answer, against = SHAPES[name]
    results: dict[str, list[float]] = {}

    def side(rows: int | None, key: str):
        def run() -> None:
            patcher = patching.Patcher(model, clean, corrupt, answer, against) if rows is None else \
                patching.Patcher(model, clean, corrupt, answer, against, rows=rows)
            effects = patching.sweep(patcher, SITES)
            results[key] = [e.difference for e in effects]
        return run

    sides = {"one at a time": side(1, "one"), "batched": side(None, "batched")}
    batched = patching.Patcher(model, clean, corrupt, answer, against)
    runs = len(patching.plan(batched, SITES))
    print(f"{name}: {len(clean)} ids, {runs} patched runs, batched {batched.rows} runs a batch; "
          f"{check_ends(batched, patching)}")
    for load in loads:
        loops = busy_loops(LOADS[load])
        try:
            time.sleep(0.5 if loops else 0)
            timings: dict[str, Timing] = interleaved(sides, rounds=rounds)
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()
        print(f"  load: {load} ({LOADS[load]} busy loop(s)), load average {os.getloadavg()[0]:.2f}")
        for timing in timings.values():
            print("   ", timing.line(1.0, "s"), f" {timing.median / runs * 1e3:.1f} ms a run")
        print("   ", ratio(timings["batched"], timings["one at a time"]))
        if name == "smollm2":
            median = timings["batched"].median
            print(f"    batched target <= {TARGET_S:.0f} s: {'met' if median <= TARGET_S else 'MISSED'}")
    worst = max(abs(a - b) for a, b in zip(results["batched"], results["one"]))
    scale = max(abs(b) for b in results["one"])
    print(f"  batched vs one at a time: largest difference {worst:.3g} (largest |difference| {scale:.3g}; "
          "a run is a row of a wider batch, so its last bits may differ)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--loads", default="idle,one,two", help="comma-separated: " + ", ".join(LOADS))
    parser.add_argument("--shapes", default="smollm2,gpt2", help="comma-separated: " + ", ".join(SHAPES))
    args = parser.parse_args()
    loads = [load.strip() for load in args.loads.split(",") if load.strip()]
    shapes = [shape.strip() for shape in args.shapes.split(",") if shape.strip()]
    torch.set_num_threads(THREADS)
    from minigpt_tui.engine.models.hf_models import open_hf_model

    with tempfile.TemporaryDirectory() as tmp:
        folders = make_models(Path(tmp), tuple(SHAPES[s][0] for s in shapes))
        for shape in shapes:
            model = open_hf_model(folders[SHAPES[shape][0]], dtype="float32").model
            torch.set_num_threads(THREADS)
            print(f"{torch.get_num_threads()} threads, float32, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}, "
                  f"{args.rounds} round(s) after a warm-up")
            bench_shape(shape, model, loads, args.rounds)


if __name__ == "__main__":
    main()
