"""The Generation screen's worker and head view on a SmolLM2-135M-shaped model (random
weights, a transformers folder made here, float32), through the app's own session:

1. A decision as the screen makes it (the decision with every head's attention row, then the
   view the screen draws): recomputing the whole prefix (the screen before) against one new
   position over the key/value cache (the default now). A round resets to the prompt and
   takes ``--decisions`` decisions; the time is per decision.
2. A head-view key (``[ ] { }`` or a typed head): what the screen did before (the worker's
   forward pass over the decision's prefix for the lens, contributions and that head's
   pattern) against what it does now (the pattern read from the decisions' records, and
   the lines the head view and the attention picture draw), at the last decision; then the
   key to screen in the app itself (headless Textual): the pattern, the picture and two rows
   of the head-role grid redrawn, nothing laid out again.

Each under no load and with one busy loop (``python -c "while True: pass"``) on the 2 cores;
the sides are interleaved in rotating order (benchmarks/timing.py). Torch starts with
``OMP_WAIT_POLICY=PASSIVE`` as the app's inference does, unless a policy is set.

    .venv/bin/python benchmarks/bench_app_decisions.py [--decisions 8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: the app's inference does the same

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from bench_busy import busy_loops  # noqa: E402
from bench_models import make_models  # noqa: E402
from timing import interleaved, ratio  # noqa: E402

PROMPT = "The capital of France is a city whose name"


def session_in(folder: Path, runs: Path, cached: bool, budget: int):
    from minigpt_tui.engine.analysis.generation_rule import GenerationRule
    from minigpt_tui.engine.session.generation import GenerationSession, GenerationSettings

    session = GenerationSession(runs)
    session.kv_cache = cached
    session.load(str(folder))
    session.configure(GenerationSettings(PROMPT, GenerationRule("greedy", max_new_tokens=budget)))
    return session


def decisions_side(session, count: int):
    def run() -> None:
        session.reset()
        for _ in range(count):
            session.step()
            session.view()  # what the queue builds after each operation

    return run


def head_sides(session) -> dict[str, object]:
    from minigpt_tui.widgets.attention_picture import picture_lines
    from minigpt_tui.widgets.head_pattern_view import pattern_lines

    view = session.view()
    step = len(view.decisions)
    heads = [(layer, head) for layer in range(view.layers) for head in range(view.heads)]
    turn = [0]

    def next_head() -> tuple[int, int]:
        turn[0] += 1
        return heads[turn[0] % len(heads)]

    def before() -> None:
        session.inspect(step, *next_head())

    def now() -> None:
        pattern = view.patterns.pattern(step, *next_head())
        pattern_lines(pattern.layer, pattern.head, pattern.pieces, pattern.weights)  # the head view
        picture_lines(pattern.layer, pattern.head, pattern.pieces, pattern.weights)  # the attention picture

    return {"head key before: forward on the worker": before, "head key now: read from the records": now}


def app_head_keys(folder: Path, runs: Path, decisions: int, presses: int) -> tuple[list[float], list[float]]:
    """Key to screen in the app itself (headless Textual, 120x40): ``]`` / ``[`` pressed in the
    head view at the last of ``decisions`` decisions, timed until the panel names the new
    block (the pattern is drawn by then)."""
    import asyncio
    import time

    from textual.widgets import Input

    from minigpt_tui.app import LaunchSettings, MiniGPTApp
    from minigpt_tui.widgets.insight_panel import InsightPanel

    async def run() -> tuple[list[float], list[float]]:
        app = MiniGPTApp(LaunchSettings(runs_dir=runs, preset="tiny"), preload_engine=False)
        times: list[float] = []
        idle: list[float] = []
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("g")
            await pilot.pause()
            screen = app.screen
            screen.query_one("#prompt", Input).value = PROMPT
            field = screen.query_one("#model", Input)
            field.value = str(folder)
            field.focus()
            await pilot.press("enter")
            await app.workers.wait_for_complete()
            for key in ["n"] * decisions + ["h"]:
                await pilot.press(key)
                await app.workers.wait_for_complete()
                await pilot.pause()
            panel = screen.query_one(InsightPanel)
            for _ in range(presses):  # a key bound to nothing: what any key costs here
                started = time.perf_counter()
                await pilot.press("z")
                await pilot.pause()
                idle.append(time.perf_counter() - started)
            for index in range(presses):
                key, block = ("right_square_bracket", 1) if index % 2 == 0 else ("left_square_bracket", 0)
                started = time.perf_counter()
                await pilot.press(key)
                while f"block {block} head 0" not in str(panel.border_title):
                    await asyncio.sleep(0.001)
                await pilot.pause()  # the screen refreshed
                times.append(time.perf_counter() - started)
        return times, idle

    return asyncio.run(run())


def measure(folder: Path, runs: Path, decisions: int, rounds: int, load: str) -> None:
    whole = session_in(folder, runs, False, decisions)
    cached = session_in(folder, runs, True, decisions)
    timings = interleaved({"decision, whole prefix (before)": decisions_side(whole, decisions),
                           "decision, kv cache (now)": decisions_side(cached, decisions)}, rounds)
    before, now = timings["decision, whole prefix (before)"], timings["decision, kv cache (now)"]
    print(f"[{load}] per decision ({decisions} decisions a round, prompt {len(cached.stepper.prompt_ids)} ids):")
    for timing in (before, now):
        print("  " + timing.line(unit=1e3 / decisions))
    print("  " + ratio(now, before))
    keys = interleaved(head_sides(cached), rounds * 4)
    first, second = keys.values()
    print(f"[{load}] head-view key at decision {decisions}, cycling through every block and head:")
    for timing in keys.values():
        print("  " + timing.line())
    print("  " + ratio(second, first))
    pressed, idle = app_head_keys(folder, runs, decisions, rounds * 4)
    for what, times in (("head-view key ([ ]) to screen", pressed), ("a key bound to nothing (Pilot's own cost)", idle)):
        print(f"[{load}] the app (headless Textual 120x40) at decision {decisions}, {what}: median "
              f"{statistics.median(times) * 1e3:.1f} ms (best {min(times) * 1e3:.1f}, worst {max(times) * 1e3:.1f}, "
              f"{len(times)} presses)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, OMP_WAIT_POLICY="
          f"{os.environ['OMP_WAIT_POLICY']}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="bench-app-decisions-") as tmp:
        folder = make_models(Path(tmp), names=("smollm2-135M",))["smollm2-135M"]
        for load, busy in (("idle", 0), ("one busy loop", 1)):
            loops = busy_loops(busy)
            try:
                measure(folder, Path(tmp) / "runs", args.decisions, args.rounds, load)
            finally:
                for loop in loops:
                    loop.kill()
                    loop.wait()


if __name__ == "__main__":
    main()
