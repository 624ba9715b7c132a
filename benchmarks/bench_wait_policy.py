"""OpenMP's wait policy: whole processes of ``train --preset text --threads 2`` with
``OMP_WAIT_POLICY=PASSIVE`` (the workers sleep while they wait), against the same with no
policy (libgomp's default, what torch gets: spin a while, then sleep), idle and with one
busy loop on the other core. Same updates on
the same 1 MB English text; sides interleaved in rotating order, each round under a fresh
load; medians with the spread and the ratio passive / active.

    .venv/bin/python benchmarks/bench_wait_policy.py [--steps 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_busy import busy_loops, timed  # noqa: E402
from bench_text import english_text  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "english.txt"
        corpus.write_text(english_text(1_000_000), encoding="utf-8")
        base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        sides = {"passive": {**base, "OMP_WAIT_POLICY": "PASSIVE"}, "torch's default (no policy)": base}
        for load in (0, 1):
            times: dict[str, list[float]] = {name: [] for name in sides}
            names = list(sides)
            for r in range(args.rounds + 1):  # the first round warms the caches and is not counted
                for name in names[r % 2:] + names[:r % 2]:
                    loops = busy_loops(load)
                    try:
                        command = [sys.executable, "-m", "minigpt_tui", "train", "--preset", "text", "--corpus",
                                   str(corpus), "--steps", str(args.steps), "--threads", "2", "--json",
                                   "--runs-dir", str(Path(tmp) / f"runs-{name[:3]}-{load}-{r}"), "--no-watch"]
                        seconds, _ = timed(command, sides[name])
                    finally:
                        for loop in loops:
                            loop.kill()
                    if r:
                        times[name].append(seconds)
            print(f"{'idle' if load == 0 else 'one busy loop'}:")
            for name, values in times.items():
                print(f"  {name:<28} median {statistics.median(values):6.2f} s  "
                      f"({min(values):.2f}-{max(values):.2f}, {len(values)} rounds)")
            ratios = [p / a for p, a in zip(*times.values())]
            first, second = names
            print(f"  {first} / {second} = {statistics.median(ratios):.3f}x (rounds {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
