"""What following a headless run costs it: `minigpt-tui train --preset mini` alone against the
same run with a follower attached in another process (the app's RunFollower, polling its
metrics, live state and checkpoints at the Training screen's refresh rate, its events
counted). Interleaved rounds; updates/s from the run's own per-update times; the ratio
attached / alone with its spread (target: at least 0.97).

    .venv/bin/python benchmarks/bench_attach.py [UPDATES] [ROUNDS]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FOLLOW = r"""
import sys, threading
from pathlib import Path
from minigpt_tui.engine.session.attach import RunFollower
events = []
follower = RunFollower(Path(sys.argv[1]), events.append, interval=0.2)
follower.run_reporting_failures()
print(len(events))
"""


def updates_per_second(run_dir: Path) -> float:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    seconds = [r["seconds"] for r in records if r.get("kind") == "update"][5:]
    return len(seconds) / sum(seconds)


def one_run(runs: Path, name: str, updates: int, attached: bool) -> float:
    env = {**os.environ, "MINIGPT_TUI_RUNS_DIR": str(runs)}
    trainer = subprocess.Popen([sys.executable, "-m", "minigpt_tui", "train", "--preset", "mini", "--steps",
                                str(updates), "--run", name, "--json"], stdout=subprocess.DEVNULL, env=env)
    follower = None
    if attached:
        run_dir = runs / name
        while not (run_dir / "live.json").is_file() and trainer.poll() is None:
            time.sleep(0.05)
        follower = subprocess.Popen([sys.executable, "-c", FOLLOW, str(run_dir)], stdout=subprocess.PIPE, text=True,
                                    env=env)
    trainer.wait()
    if follower is not None:
        out, _ = follower.communicate(timeout=60)
        assert int(out.strip()) >= updates, "the follower saw every update"
    return updates_per_second(runs / name)


def main() -> None:
    updates = int(sys.argv[1]) if len(sys.argv) > 1 else 600
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    alone, attached = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(rounds):
            alone.append(one_run(Path(tmp), f"alone-{index}", updates, attached=False))
            attached.append(one_run(Path(tmp), f"attached-{index}", updates, attached=True))
    ratios = [a / b for a, b in zip(attached, alone)]
    print(f"mini, {updates} updates per run, {rounds} interleaved rounds")
    print(f"  alone:    {statistics.median(alone):.1f} updates/s (min {min(alone):.1f}, max {max(alone):.1f})")
    print(f"  attached: {statistics.median(attached):.1f} updates/s (min {min(attached):.1f}, max {max(attached):.1f})")
    print(f"  attached / alone: {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")


if __name__ == "__main__":
    main()
