"""``attach``: open the app on a run that another process is writing."""

from __future__ import annotations

import argparse
from pathlib import Path

from minigpt_tui.app import run_app
from minigpt_tui.commands.common import runs_dir_from_args
from minigpt_tui.engine.session.attach import attached_config


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("attach", help="open the app following a run another process is training")
    parser.add_argument("run", metavar="RUN", help="run folder, or a run's name in the runs directory")
    parser.add_argument("--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory")
    parser.set_defaults(handler=run_attach)


def run_attach(args: argparse.Namespace) -> int:
    given = Path(args.run).expanduser()
    run_dir = given if given.is_dir() else runs_dir_from_args(args) / args.run
    attached_config(run_dir)  # not a run: one line, before any frame
    args.attach_run = run_dir.resolve()
    args.runs_dir = str(runs_dir_from_args(args))
    return run_app(args)
