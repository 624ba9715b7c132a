"""The `text` preset on a busy machine: whole processes of ``train --preset text`` with
automatic threads (the default), the same with the fixed 2 threads it used before, and the
bare nanoGPT-style loop of ``bench_text.py`` (2 threads, torch's defaults), each training the
same number of updates on the same 1 MB English text, under three loads: idle, one busy
loop, two busy loops (``python -c "while True: pass"``, one per busy core). Sides run in
rotating order, each round under a fresh load; results are medians with the spread and
ratios to the bare loop under the same load.

    .venv/bin/python benchmarks/bench_busy.py [--steps 200] [--rounds 2]
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
from bench_text import BARE_LOOP, ROOT, english_text, spread  # noqa: E402

LOADS = {"idle": 0, "one busy loop": 1, "two busy loops": 2}


def busy_loops(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def timed(command: list[str], env: dict[str, str]) -> tuple[float, dict]:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{' '.join(command[:6])}... failed: {done.stderr[-400:]}")
    return seconds, json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--loads", default=",".join(LOADS), help="comma-separated: " + ", ".join(LOADS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        corpus = work / "english.txt"
        corpus.write_text(english_text(1_000_000), "utf-8")
        (work / "bare.py").write_text(BARE_LOOP, "utf-8")
        env = dict(os.environ, PYTHONPATH=str(ROOT), MINIGPT_TUI_RUNS_DIR=str(work / "runs"),
                   MINIGPT_TUI_CACHE_DIR=str(work / "cache"))
        subprocess.run([sys.executable, "-m", "minigpt_tui", "train", "--preset", "text", "--corpus", str(corpus),
                        "--steps", "200", "--until", "1", "--json"], env=env, capture_output=True, check=True)  # the token cache

        def ours(threads: str, r: int, load: str) -> list[str]:
            return [sys.executable, "-m", "minigpt_tui", "train", "--preset", "text", "--corpus", str(corpus),
                    "--steps", str(args.steps), "--threads", threads, "--run", f"{threads}-{load[:3]}-{r}", "--json"]

        sides = {
            "ours (threads auto)": lambda r, load: ours("auto", r, load),
            "ours (2 threads)": lambda r, load: ours("2", r, load),
            "bare loop (2 threads)": lambda r, load: [sys.executable, str(work / "bare.py"), str(corpus),
                                                      str(args.steps), str(ROOT), str(work / f"b-{load[:3]}-{r}.st"), "2"],
        }
        names = list(sides)
        for load in args.loads.split(","):
            times: dict[str, list[float]] = {name: [] for name in names}
            ratios: dict[str, list[float]] = {name: [] for name in names[:-1]}
            for r in range(args.rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                round_times: dict[str, float] = {}
                for name in order:
                    loops = busy_loops(LOADS[load])
                    try:
                        time.sleep(0.5 if loops else 0.0)
                        round_times[name], _ = timed(sides[name](r, load), env)
                    finally:
                        for loop in loops:
                            loop.kill()
                            loop.wait()
                for name, seconds in round_times.items():
                    times[name].append(seconds)
                for name in ratios:
                    ratios[name].append(round_times[name] / round_times[names[-1]])
                print(f"{load}, round {r + 1}: " + ", ".join(f"{n} {round_times[n]:.1f} s" for n in order), flush=True)
            print(f"== {load}, {args.steps} updates, {args.rounds} rounds: " + "; ".join(
                f"{name} median {statistics.median(times[name]):.1f} s" for name in names), flush=True)
            for name, values in ratios.items():
                print(f"   {name} / bare loop: {spread(values)}", flush=True)


if __name__ == "__main__":
    main()
