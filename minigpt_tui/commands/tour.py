"""``tour``: open the app with the tour's panel, or (``--check``) take every lesson's steps
headless on a ``mini`` run in a temporary folder and say what each showed."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from minigpt_tui.app import run_app
from minigpt_tui.commands.common import runs_dir_from_args
from minigpt_tui.engine.session.tour import LESSONS, lesson


def register(subparsers: argparse._SubParsersAction) -> None:
    numbers = ", ".join(str(item.number) for item in LESSONS)
    parser = subparsers.add_parser("tour", help="open the app with short lessons that explain your own numbers")
    parser.add_argument("--lesson", type=int, metavar="N",
                        help=f"the lesson to start at ({numbers}; default: the first)")
    parser.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    parser.add_argument("--check", action="store_true",
                        help="take every lesson's steps headless on a mini run in a temporary folder, print what "
                             "each showed, and exit non-zero when a lesson's claim does not hold")
    parser.set_defaults(handler=run_tour)


def run_tour(args: argparse.Namespace) -> int:
    start = lesson(args.lesson).number if args.lesson is not None else None  # an unknown one: one line
    if args.check:
        return check(start)
    args.tour_lesson = start or LESSONS[0].number
    args.runs_dir = str(runs_dir_from_args(args))
    return run_app(args)


def check(only: int | None = None) -> int:
    """Print every lesson's observations; 1 when a step was not seen done or its claim failed."""
    from minigpt_tui.engine.session.tour_check import check_tour  # deferred: imports torch

    with tempfile.TemporaryDirectory(prefix="minigpt-tui-tour-") as folder:
        checked = check_tour(Path(folder) / "runs", say=lambda line: _print(f"… {line}"))
    failed = 0
    for item in LESSONS:
        if only is not None and item.number != only:
            continue
        _print(f"\nlesson {item.number}. {item.title}")
        for result in (c for c in checked if c.lesson == item.number):
            mark = "✓" if result.passed else "✗"
            said = result.finding.text if result.finding is not None else "nothing to explain: the step was not seen"
            _print(f"  {mark} {result.index} ({result.key}): {said}")
            if not result.passed:
                failed += 1
                _print("    the claim does not hold on this run" if result.done else "    the step was not seen done")
    _print(f"\n{failed} step(s) failed" if failed else "\nevery lesson's claim holds")
    return 1 if failed else 0


def _print(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
