"""``export-tensorboard``: a run's ``metrics.jsonl`` as TensorBoard event files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from minigpt_tui.commands.common import emit_json, runs_dir_from_args
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.display import counted
from minigpt_tui.engine.session.tensorboard import (
    RUN_SUBFOLDER,
    export_tensorboard,
    run_folder,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    export = subparsers.add_parser(
        "export-tensorboard",
        help="write a run's metrics as TensorBoard event files (needs the tensorboard extra)",
    )
    export.add_argument("run", help="run name, run folder or its metrics.jsonl")
    export.add_argument(
        "--out",
        metavar="DIR",
        help=f"TensorBoard folder: the events go in DIR/RUN (default: the run folder's {RUN_SUBFOLDER}/); "
        "earlier event files there are replaced",
    )
    export.add_argument("--json", action="store_true", help="print one JSON object")
    export.add_argument(
        "--runs-dir", dest="runs_dir_sub", metavar="DIR", help="runs directory"
    )
    export.set_defaults(handler=run_export_tensorboard)


def run_export_tensorboard(args: argparse.Namespace) -> int:
    run_dir = run_folder(args.run, runs_dir_from_args(args))
    folder = Path(args.out).expanduser() / run_dir.name if args.out else None
    exported = export_tensorboard(run_dir, folder)
    if exported.skipped_lines:  # said on stderr, so that --json output stays one object
        print(escape_controls(f"note: skipped {counted(exported.skipped_lines, 'damaged line')} of "
                              f"{run_dir / 'metrics.jsonl'}; exported the rest"), file=sys.stderr)
    if args.json:
        emit_json({"run": str(run_dir), **exported.to_json()})
        return 0
    logdir = exported.folder.parent if args.out else exported.folder
    print(
        escape_controls(
            f"wrote {exported.scalars:,} scalars ({len(exported.tags)} series, steps "
            f"{exported.first_step} to {exported.last_step}) to {exported.folder}"
        )
    )
    print(escape_controls(f"view them: tensorboard --logdir {logdir}"))
    return 0
