"""The Checkpoints screen's tensor table on a file of many tensors, against ``inspect``.

One safetensors file of ``--tensors`` one-element tensors (10,000 by default) is built in a
temporary folder. In the app (headless, 120x40), three things are timed on it, each after
a warm-up on the same file:

* inspect: the engine's header inspection and its JSON, what ``inspect --json`` does;
* open: ``open_path`` until the table holds every row and has drawn a frame;
* reverse sort: ``S`` on the table until the next frame.

With ``--baseline-tree DIR`` (a checkout of another version, e.g. made with
``git archive``), the same rounds run in subprocesses that import the package from DIR
and from this tree in turn, alternating which goes first, and the report gives each
side's medians and the ratio of this tree's to the baseline's, per round.

    .venv/bin/python benchmarks/bench_tensor_table.py [--tensors 10000] [--rounds 5]
    .venv/bin/python benchmarks/bench_tensor_table.py --baseline-tree /tmp/before --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASURES = ("inspect", "open", "reverse sort")


def write_many_tensors(path: Path, count: int) -> None:
    import numpy as np
    import safetensors.numpy

    tensors = {f"model.layers.{i // 10}.block.{i % 10}.weight": np.full((1,), i, dtype=np.float32)
               for i in range(count)}
    safetensors.numpy.save_file(tensors, str(path))


async def _settle(pilot) -> None:
    for _ in range(6):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()


async def one_round(path: Path, runs: Path) -> dict[str, float]:
    """Warm each measure once on ``path``, then time it once."""
    from minigpt_tui.app import LaunchSettings, MiniGPTApp
    from minigpt_tui.engine.formats.inspect import inspect_path
    from minigpt_tui.widgets.tensor_table import TensorTable

    def inspect_json() -> None:
        inspection = inspect_path(path)
        json.dumps([entry.to_json() for entry in inspection.entries])

    app = MiniGPTApp(LaunchSettings(runs_dir=runs, preset="tiny"), preload_engine=False)
    times: dict[str, float] = {}
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("c")
        await _settle(pilot)
        screen = app.screen
        for timed in (False, True):
            started = time.perf_counter()
            inspect_json()
            if timed:
                times["inspect"] = time.perf_counter() - started
            started = time.perf_counter()
            screen.open_path(path)
            await _settle(pilot)
            table = screen.query_one(TensorTable)
            assert table.row_count == len(table.entries) > 0
            if timed:
                times["open"] = time.perf_counter() - started
            table.focus()
            await pilot.pause()
            started = time.perf_counter()
            table.action_reverse_sort()
            await pilot.pause()
            if timed:
                times["reverse sort"] = time.perf_counter() - started
            table.action_reverse_sort()
            await pilot.pause()
    return times


def in_subprocess(tree: Path, path: Path, runs: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, __file__, "--one-round", str(path), "--runs", str(runs)],
                          env=env, capture_output=True, text=True, cwd=tree, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(name: str, rounds: list[dict[str, float]]) -> None:
    for measure in MEASURES:
        values = [r[measure] for r in rounds]
        print(f"  {name:<9} {measure:<13} median {statistics.median(values) * 1000:8.1f} ms "
              f"(best {min(values) * 1000:.1f}, worst {max(values) * 1000:.1f}, {len(values)} rounds)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tensors", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline-tree", type=Path)
    parser.add_argument("--one-round", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_round is not None:
        print(json.dumps(asyncio.run(one_round(args.one_round, args.runs))))
        return
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        path = work / "many.safetensors"
        write_many_tensors(path, args.tensors)
        print(f"tensor table, {args.tensors} tensors in one file, 120x40, {args.rounds} rounds")
        if args.baseline_tree is None:
            rounds = [asyncio.run(one_round(path, work / "runs")) for _ in range(args.rounds)]
            report("this tree", rounds)
            for measure in ("open", "reverse sort"):
                per_round = [r[measure] / r["inspect"] for r in rounds]
                print(f"  {measure} / inspect = {statistics.median(per_round):.3g}x "
                      f"(rounds {min(per_round):.3g}-{max(per_round):.3g})")
            return
        sides = {"baseline": args.baseline_tree.resolve(), "this tree": ROOT}
        results: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for name in order:
                results[name].append(in_subprocess(sides[name], path, work / f"runs-{name}-{r}"))
        for name in sides:
            report(name, results[name])
        for measure in MEASURES:
            per_round = [a[measure] / b[measure] for a, b in zip(results["this tree"], results["baseline"])]
            print(f"  {measure}: this tree / baseline = {statistics.median(per_round):.3g}x "
                  f"(rounds {min(per_round):.3g}-{max(per_round):.3g})")


if __name__ == "__main__":
    main()
