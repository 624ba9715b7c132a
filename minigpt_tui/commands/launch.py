"""Several training processes: ``--nproc N`` re-runs the same command in N processes through
torch's own elastic launcher (``python -m torch.distributed.run``, the module behind
``torchrun``); inside each process the rank and world come from the environment it sets."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

ERROR_PREFIX = "minigpt-tui:"


def add_process_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nproc", type=int, help="train in N processes on this machine (data parallel)")
    parser.add_argument("--port", type=int, help="with --nproc: the rendezvous port (default: a free one)")


def launch_requested(args: argparse.Namespace) -> bool:
    """Whether this command should start the processes (not when it already is one)."""
    return getattr(args, "nproc", None) is not None and "WORLD_SIZE" not in os.environ


def check_launch(nproc: int, port: int | None, device: str) -> None:
    """Bad launch settings, refused before any process starts."""
    from minigpt_tui.engine.devices import choose_device
    from minigpt_tui.engine.distributed import backend_for
    from minigpt_tui.engine.errors import ConfigError

    if nproc < 1:
        raise ConfigError(f"--nproc must be at least 1, got {nproc}")
    backend_for(choose_device(device).kind)
    if port is not None:
        if not 1 <= port <= 65535:
            raise ConfigError(f"--port must be between 1 and 65535, got {port}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                raise ConfigError(f"port {port} is in use: choose another --port or leave it out") from None


def forwarded_arguments(argv: list[str]) -> list[str]:
    """The command line each process runs: the same, without the launch options."""
    out: list[str] = []
    skip = False
    for item in argv:
        if skip:
            skip = False
            continue
        if item in ("--nproc", "--port"):
            skip = True
            continue
        if item.startswith(("--nproc=", "--port=")):
            continue
        out.append(item)
    return out


def launch(args: argparse.Namespace, device: str) -> int:
    """Run this command in ``--nproc`` processes (on ``device``) and wait. Rank 0's output
    passes through; the launcher's own report of a failed process becomes one line."""
    check_launch(args.nproc, args.port, device)
    rendezvous = (["--master-addr", "127.0.0.1", "--master-port", str(args.port)] if args.port is not None
                  else ["--standalone"])
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(args.nproc),
               *rendezvous, "--max-restarts", "0", "-m", "minigpt_tui", "--", *forwarded_arguments(args.argv)]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    reported = False
    assert process.stderr is not None
    for line in process.stderr:  # the ranks' own lines pass (the first error only); the launcher's log does not
        if not line.startswith(ERROR_PREFIX):
            continue
        is_error = line.startswith(f"{ERROR_PREFIX} error")
        if is_error and reported:
            continue
        reported = reported or is_error
        sys.stderr.write(line)
        sys.stderr.flush()
    code = process.wait()
    if code != 0 and not reported:
        print(f"{ERROR_PREFIX} error: a training process failed (exit code {code}); the whole run ended, "
              "and its last complete checkpoint resumes", file=sys.stderr)
    return 0 if code == 0 else 1


@contextmanager
def joined_world(device: str) -> Iterator[Any]:
    """This process's :class:`DataParallel` (one process, or a rank ``torchrun`` started),
    joined to its process group for the duration. A collective that fails because another
    rank died becomes one line."""
    from minigpt_tui.engine.devices import choose_device
    from minigpt_tui.engine.distributed import DataParallel, world_from_environment
    from minigpt_tui.engine.errors import MiniGPTError, ProcessGroupError

    world = world_from_environment()
    parallel = DataParallel(world)
    parallel.join(choose_device(device, local_rank=world.local_rank).kind)
    together = False
    try:
        yield parallel
        together = True
    except MiniGPTError:
        raise
    except (RuntimeError, OSError) as err:
        if not parallel.distributed:
            raise
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ProcessGroupError(f"rank {world.rank} lost the other processes ({first[:120]}): the run ended; "
                       "its last complete checkpoint resumes") from None
    finally:
        try:
            parallel.leave(together=together)
        except (RuntimeError, OSError):
            pass

