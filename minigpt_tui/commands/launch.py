"""``--nproc`` and ``--port``: a training command run in several processes on this machine.
The launcher, the processes' link to it and the joined process group are the session's
(:mod:`minigpt_tui.engine.session.launching`); this module reads the options."""

from __future__ import annotations

import argparse
import os

from minigpt_tui.engine.session.launching import joined_world, launch_processes

__all__ = ["add_process_arguments", "joined_world", "launch", "launch_requested", "launched_process"]


def add_process_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nproc", type=int, help="train in N processes on this machine (data parallel)")
    parser.add_argument("--port", type=int, help="with --nproc: the rendezvous port (default: a free one)")


def launch_requested(args: argparse.Namespace) -> bool:
    """Whether this command should start the processes (not when it already is one)."""
    return getattr(args, "nproc", None) is not None and not launched_process()


def launched_process() -> bool:
    """Whether this process is one of those a launch started."""
    return "WORLD_SIZE" in os.environ


def launch(args: argparse.Namespace, device: str) -> int:
    """Run this command in ``--nproc`` processes (on ``device``) and wait; exit 0 when every
    process did."""
    return launch_processes(args.argv, args.nproc, args.port, device)
