"""Command-line entry: no subcommand opens the app; each subcommand is a headless engine call.

Every :class:`MiniGPTError` becomes one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Each module registers its subcommands with ``register(subparsers)`` and imports the
# engine inside its handlers, so that ``--help`` and the app's first frame stay fast.
COMMAND_MODULES = (
    "minigpt_tui.commands.train",
    "minigpt_tui.commands.interop",
    "minigpt_tui.commands.checkpoints",
    "minigpt_tui.commands.generate",
    "minigpt_tui.commands.cache",
    "minigpt_tui.commands.contrast",
    "minigpt_tui.commands.attach",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minigpt-tui",
        description="Train, save, resume, inspect and interrogate a Mini GPT on the CPU.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument("--runs-dir", metavar="DIR", help="runs directory (default: the user data dir)")
    parser.add_argument("--preset", default="mini", help="preset for a new run in the app (default: mini)")
    parser.add_argument("--corpus", help="corpus file or folder for a new run in the app")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def _version() -> str:
    from minigpt_tui import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:  # torchrun ... -m minigpt_tui -- train ...: the separator may reach us
        argv = argv[1:]
    args = parser.parse_args(argv)
    args.argv = argv  # a launcher re-runs it in each process
    from minigpt_tui.engine.errors import MiniGPTError

    try:
        if args.command is None:
            return _open_app(args)
        return int(args.handler(args) or 0)
    except MiniGPTError as err:
        from minigpt_tui.engine.printable import escape_controls

        print(f"minigpt-tui: error: {escape_controls(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("minigpt-tui: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1


def _open_app(args: argparse.Namespace) -> int:
    from minigpt_tui.app import run_app

    return int(run_app(args) or 0)
