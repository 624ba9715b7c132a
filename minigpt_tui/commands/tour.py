"""``tour``: open the app with the tour's panel, or (``--check``) take every lesson's steps
headless in a temporary folder (lessons 8-9 on ``--model``) and say what each showed."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from minigpt_tui.app import run_app
from minigpt_tui.commands.common import runs_dir_from_args
from minigpt_tui.engine.core.errors import ConfigError
from minigpt_tui.engine.session.tour import LESSONS, MODEL_LESSONS, lesson


def register(subparsers: argparse._SubParsersAction) -> None:
    numbers = ", ".join(str(item.number) for item in LESSONS)
    parser = subparsers.add_parser("tour", help="open the app with short lessons that explain your own numbers")
    parser.add_argument("--lesson", type=int, metavar="N",
                        help=f"the lesson to start at ({numbers}; default: the first)")
    parser.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    parser.add_argument("--check", action="store_true",
                        help="take every lesson's steps headless on a mini run in a temporary folder, print what "
                             "each showed, and exit non-zero when a lesson's claim does not hold (with --lesson: "
                             "that lesson only)")
    parser.add_argument("--model", metavar="PATH",
                        help="with --check: the GGUF file or transformers folder lessons 8 and 9 read (without it "
                             "they are skipped)")
    parser.set_defaults(handler=run_tour)


def run_tour(args: argparse.Namespace) -> int:
    start = lesson(args.lesson).number if args.lesson is not None else None  # an unknown one: one line
    if args.check:
        return check(start, args.model)
    if args.model is not None:
        raise ConfigError("--model goes with --check; in the app, type the path in the Generation screen's "
                          "model field (lesson 8)")
    args.tour_lesson = start or LESSONS[0].number
    args.runs_dir = str(runs_dir_from_args(args))
    return run_app(args)


def check(only: int | None = None, model: str | None = None) -> int:
    """Print the lessons' observations; 1 when a step was not seen done or its claim failed."""
    from minigpt_tui.engine.session.tour_check import check_tour  # deferred: imports torch

    with tempfile.TemporaryDirectory(prefix="minigpt-tui-tour-") as folder:
        checked = check_tour(Path(folder) / "runs", say=lambda line: _print(f"… {line}"),
                             lessons=None if only is None else (only,), model=model)
    failed = 0
    for item in LESSONS:
        if only is None or item.number == only:
            _print(f"\nlesson {item.number}. {item.title}")
            failed += _print_steps([c for c in checked if c.lesson == item.number],
                                   skipped=model is None and item.number in MODEL_LESSONS)
    _print(f"\n{failed} step(s) failed" if failed else "\nevery lesson's claim holds")
    return 1 if failed else 0


def _print_steps(steps: list, *, skipped: bool = False) -> int:
    """Each step's mark and words; the number that failed."""
    if skipped:
        _print("  skipped: it reads a model from elsewhere; run minigpt-tui tour --check --model PATH "
               "(a GGUF file or a transformers folder)")
        return 0
    failed = 0
    for result in steps:
        mark = "○" if result.needs_longer_run else "✓" if result.passed else "✗"
        said = result.finding.text if result.finding is not None else "nothing to explain: the step was not seen"
        _print(f"  {mark} {result.index} ({result.key}): {said}")
        if result.needs_longer_run:
            _print("    a longer run than the check's shows this claim; not counted as a failure")
        elif not result.passed:
            failed += 1
            _print("    the claim does not hold on this run" if result.done else "    the step was not seen done")
    return failed


def _print(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
