"""Command-line entry: no subcommand opens the app; each subcommand is a headless engine call.

Every :class:`MiniGPTError` becomes one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import sys
import time

from minigpt_tui import __version__
from minigpt_tui.app import run_app
from minigpt_tui.engine.core.errors import MiniGPTError
from minigpt_tui.engine.core.files import os_error_line, shorten_middle
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.core.threads import INFERENCE_COMMANDS, wait_without_spinning
from minigpt_tui.engine.session.launching import die_with_launcher

# Each module registers its subcommands with ``register(subparsers)`` and imports the
# engine inside its handlers, so that ``--help`` and the app's first frame stay fast.
COMMAND_MODULES = (
    "minigpt_tui.commands.train",
    "minigpt_tui.commands.interop",
    "minigpt_tui.commands.checkpoints",
    "minigpt_tui.commands.generate",
    "minigpt_tui.commands.cache",
    "minigpt_tui.commands.contrast",
    "minigpt_tui.commands.sae",
    "minigpt_tui.commands.analysis",
    "minigpt_tui.commands.attach",
    "minigpt_tui.commands.tensorboard_export",
    "minigpt_tui.commands.tour",
)


# The options of the bare command, each with a value: what the app opens on.
APP_OPTIONS: dict[str, dict[str, str]] = {
    "--runs-dir": {"metavar": "DIR", "help": "runs directory (default: the user data dir)"},
    "--preset": {"default": "mini", "help": "preset for a new run in the app (default: mini)"},
    "--corpus": {"help": "corpus file or folder for a new run in the app"},
}


def build_parser(*, commands: bool = True) -> argparse.ArgumentParser:
    """The whole command line; without ``commands``, only the app's own options (the bare
    ``minigpt-tui``, parsed without importing the command modules)."""
    parser = argparse.ArgumentParser(
        prog="minigpt-tui",
        description="Train, save, resume, inspect and interrogate a Mini GPT on the CPU.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    for option, spec in APP_OPTIONS.items():
        parser.add_argument(option, **spec)
    if not commands:
        parser.set_defaults(command=None)
        return parser
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def opens_the_app(argv: list[str]) -> bool:
    """Whether ``argv`` is the bare command with at most the app's options (no command, no
    help): then the first frame need not wait for every command's module to import."""
    expecting_value = False
    for token in argv:
        if expecting_value:
            expecting_value = False
        elif token in APP_OPTIONS:
            expecting_value = True
        elif not any(token.startswith(option + "=") for option in APP_OPTIONS):
            return False
    return True


def _version() -> str:
    return __version__


MAX_ERROR_LINE = 600  # characters of an error message shown; the middle of a longer one is cut


def main(argv: list[str] | None = None) -> int:
    args = _arguments(list(sys.argv[1:] if argv is None else argv))
    if args.command in INFERENCE_COMMANDS:
        wait_without_spinning()
    # A Rust library's panic that our checks did not foresee is refused as one line; its
    # backtrace would only bury that line.
    os.environ["RUST_BACKTRACE"] = "0"
    try:
        if args.command is None:
            return _open_app(args)
        return int(args.handler(args) or 0)
    except MiniGPTError as err:
        # Every echoed value is bounded: a 10 MB string in a config makes a line, not 10 MB.
        return _error_line(f"minigpt-tui: error: {shorten_middle(escape_controls(err), MAX_ERROR_LINE)}")
    except KeyboardInterrupt:
        print("minigpt-tui: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except OSError as err:  # a failure of the operating system no check above named: one line still
        return _error_line(f"minigpt-tui: error: {os_error_line(err)}")


def _arguments(argv: list[str]) -> argparse.Namespace:
    """The parsed command line (a process of a launch first ties its life to the launcher)."""
    if argv[:1] == ["--"]:  # torchrun ... -m minigpt_tui -- train ...: the separator may reach us
        argv = argv[1:]
    if "WORLD_SIZE" in os.environ:  # a process of a launch: it never outlives its launcher
        die_with_launcher()
    args = _parse(build_parser(commands=not opens_the_app(argv)), argv)
    args.argv = argv  # a launcher re-runs it in each process
    return args


def _error_line(line: str) -> int:
    """``line`` on stderr in one write (ranks of a process group share stderr, and print's
    separate write of the newline let two ranks' lines run together), told to a launcher; 1."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    _tell_launcher(line)
    return 1


RANK_ERROR_GRACE_S = 1.0  # how long a rank other than 0 waits before exiting on a usage error


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse ``argv``. In a process group every rank parses the same line, so only rank 0
    prints a usage error; every rank tells the launcher what it was."""
    rank = os.environ.get("RANK")
    if rank is None:
        return parser.parse_args(argv)
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            return parser.parse_args(argv)
    except SystemExit as exit_:
        if exit_.code:
            if rank == "0":
                sys.stderr.write(said.getvalue())
                sys.stderr.flush()
            lines = said.getvalue().strip().splitlines()
            _tell_launcher(lines[-1] if lines else "minigpt-tui: error: bad arguments")
            if rank != "0":
                # The launcher stops every rank when the first one exits: the others wait a
                # moment so that rank 0 has printed the line before that can happen.
                time.sleep(RANK_ERROR_GRACE_S)
        raise


def _tell_launcher(line: str) -> None:
    """Under ``torchrun``, write the error line where its failure report looks
    (``TORCHELASTIC_ERROR_FILE``), so the report names the cause instead of pointing at
    its own documentation."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return

    try:
        with open(path, "w", encoding="utf-8") as out:
            json.dump({"message": line, "timestamp": int(time.time())}, out)
    except OSError:
        pass  # the report is the launcher's; the line above was already printed


def _open_app(args: argparse.Namespace) -> int:
    return int(run_app(args) or 0)
