"""Patching a real model in seconds: the `patch` sweep over resid, attn and mlp (what
``patch_prompts`` runs after encoding) on a SmolLM2-135M-shaped model (llama, 30 blocks of
width 576, 9 heads, 3 kv heads, 49,152 ids; a 5-id clean/corrupt pair that differ at one
position, like "The capital of France is" / "... Italy is") and a GPT-2-small-shaped one
(124M, 12 blocks of width 768; 16 ids, as bench_watch), random weights, float32, 2 threads,
``OMP_WAIT_POLICY=PASSIVE`` as the `patch` command starts torch.

Three sides, interleaved in rounds (benchmarks/timing.py), each constructing its patcher and
sweeping:

- before: ``engine/analysis/patching.py`` as committed at ``--before`` (default a640c88,
  the last commit before batching), loaded from git into this process;
- one at a time: today's code with ``rows=1`` (each patched run alone, a one-row batch);
- batched: today's code, rows chosen by the patcher (several runs a batch, same bits
  whichever runs share it).

Under each load of ``--loads`` (idle, one busy loop, two busy loops: ``python -c "while
True: pass"`` processes started here), medians with best/worst and the per-round ratio to
``before``. It also prints how far today's figures lie from before's (last bits: a run is a
row of a batch now) and checks patching's exact ends on the batched side.

    .venv/bin/python benchmarks/bench_patching.py [--rounds 2] [--loads idle,one] [--shapes smollm2,gpt2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import types
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


def committed_patching(revision: str) -> types.ModuleType:
    """``engine/analysis/patching.py`` as committed at ``revision``, as a module."""
    source = subprocess.run(["git", "show", f"{revision}:minigpt_tui/engine/analysis/patching.py"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout
    module = types.ModuleType(f"patching_at_{revision}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"patching.py@{revision}", "exec"), module.__dict__)  # noqa: S102 - our own file
    return module


def busy_loops(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def check_ends(patcher: object, patching: types.ModuleType) -> str:
    """Patching's exact ends on ``patcher``: the embeddings where the prompts differ and the
    last residual at the last position give the clean difference bit for bit."""
    clean, corrupt = patcher.clean_ids, patcher.corrupt_ids  # type: ignore[attr-defined]
    differ = tuple(i for i, (a, b) in enumerate(zip(clean, corrupt)) if a != b)
    layers = patcher.model.config.layers  # type: ignore[attr-defined]
    first = patcher.difference([patching.Patch("resid", 0, differ)])  # type: ignore[attr-defined]
    last = patcher.difference([patching.Patch("resid", layers, (len(clean) - 1,))])  # type: ignore[attr-defined]
    held = first == last == patcher.clean_difference  # type: ignore[attr-defined]
    return "exact ends held" if held else "EXACT ENDS BROKEN"


def bench_shape(name: str, model: object, before: types.ModuleType, loads: list[str], rounds: int) -> None:
    from minigpt_tui.engine.analysis import patching

    _, clean, corrupt, answer, against = SHAPES[name]
    results: dict[str, list[float]] = {}

    def side(module: types.ModuleType, rows: int | None, key: str):
        def run() -> None:
            patcher = module.Patcher(model, clean, corrupt, answer, against) if rows is None else \
                module.Patcher(model, clean, corrupt, answer, against, rows=rows)
            effects = module.sweep(patcher, SITES)
            results[key] = [e.difference for e in effects]
        return run

    sides = {"before": side(before, None, "before"), "one at a time": side(patching, 1, "one"),
             "batched": side(patching, None, "batched")}
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
        for key in ("one at a time", "batched"):
            print("   ", ratio(timings[key], timings["before"]))
        if name == "smollm2":
            median = timings["batched"].median
            print(f"    batched target <= {TARGET_S:.0f} s: {'met' if median <= TARGET_S else 'MISSED'}")
    for key in ("one", "batched"):
        worst = max(abs(a - b) for a, b in zip(results[key], results["before"]))
        scale = max(abs(b) for b in results["before"])
        print(f"  {key} vs before: largest difference {worst:.3g} (largest |difference| {scale:.3g})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--loads", default="idle,one,two", help="comma-separated: " + ", ".join(LOADS))
    parser.add_argument("--shapes", default="smollm2,gpt2", help="comma-separated: " + ", ".join(SHAPES))
    parser.add_argument("--before", default="a640c88", help="the commit whose patching.py is 'before'")
    args = parser.parse_args()
    loads = [load.strip() for load in args.loads.split(",") if load.strip()]
    shapes = [shape.strip() for shape in args.shapes.split(",") if shape.strip()]
    torch.set_num_threads(THREADS)
    from minigpt_tui.engine.models.hf_models import open_hf_model

    before = committed_patching(args.before)
    with tempfile.TemporaryDirectory() as tmp:
        folders = make_models(Path(tmp), tuple(SHAPES[s][0] for s in shapes))
        for shape in shapes:
            model = open_hf_model(folders[SHAPES[shape][0]], dtype="float32").model
            torch.set_num_threads(THREADS)
            print(f"{torch.get_num_threads()} threads, float32, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}, "
                  f"{args.rounds} round(s) after a warm-up, before = {args.before}")
            bench_shape(shape, model, before, loads, args.rounds)


if __name__ == "__main__":
    main()
