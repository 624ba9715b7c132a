"""Several training processes: the same command line in N processes on this machine (``--nproc
N``) and the launcher that waits for them. Inside each process the rank and world come from
the environment, as ``torchrun`` sets it, so the same code runs under either launcher.

The launcher holds the rendezvous store (a ``TCPStore`` on a port the system picks, so no
port is raced for) and its processes die with it: they run in its process group, each asks
the kernel to send it SIGTERM when the launcher dies (``prctl(PR_SET_PDEATHSIG)`` on Linux)
and watches its parent once a second elsewhere, so a ``kill -9`` of the launcher ends them
within seconds, each saving at its next update boundary first. SIGINT or SIGTERM to the
launcher is passed to every process: they agree to stop at the next boundary, save, and exit
0, and so does the launcher. When one process fails, the others are stopped.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from minigpt_tui.engine.core.devices import choose_device
from minigpt_tui.engine.core.errors import ConfigError, MiniGPTError, ProcessGroupError

LAUNCHER_ENV = "MINIGPT_TUI_LAUNCHER_PID"  # set for the processes our launcher starts
PEER_GRACE_S = 10.0  # after one process failed, how long the others get before SIGKILL
ORPHAN_GRACE_S = 30.0  # after the launcher died, how long a process may take to save and exit
ERROR_PREFIX = "minigpt-tui:"


def check_launch(nproc: int, port: int | None, device: str) -> None:
    """Bad launch settings, refused before any process starts."""
    from minigpt_tui.engine.training.distributed import (  # deferred: imports torch
        backend_for,
    )

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


def launch_processes(argv: list[str], nproc: int, port: int | None, device: str,
                     say: Callable[[str], None] | None = None) -> int:
    """Run the command line ``argv`` in ``nproc`` processes (on ``device``) and wait. Rank 0's
    lines and the first error line of any process pass through ``say`` (default: stderr);
    0 when every process exited 0."""
    check_launch(nproc, port, device)

    from torch.distributed import TCPStore  # deferred: imports torch

    store = _open_store(TCPStore, port)
    command = [sys.executable, "-m", "minigpt_tui", *forwarded_arguments(argv)]
    env = _process_environment(store.port, nproc)
    ranks = _Ranks(say or _to_stderr)
    with _forwarding_stop_signals(ranks):
        for rank in range(nproc):
            ranks.start(rank, command, {**env, "RANK": str(rank), "LOCAL_RANK": str(rank)})
        codes = ranks.wait()
    del store
    return _launch_exit_code(ranks, codes)


def _to_stderr(line: str) -> None:
    sys.stderr.write(line)
    sys.stderr.flush()


def _open_store(store_class: Any, port: int | None) -> Any:
    """The launcher's rendezvous store, on ``port`` or one the system picks."""
    try:
        return store_class("127.0.0.1", port or 0, is_master=True, wait_for_workers=False,
                           timeout=timedelta(seconds=300))
    except (RuntimeError, OSError) as err:
        raise ProcessGroupError(f"cannot open the rendezvous port: {str(err).splitlines()[0][:120]}") from None


def _process_environment(store_port: int, nproc: int) -> dict[str, str]:
    """The environment every process gets (each adds its own RANK and LOCAL_RANK)."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store_port), "WORLD_SIZE": str(nproc),
           "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": "0", "TORCHELASTIC_USE_AGENT_STORE": "True",
           LAUNCHER_ENV: str(os.getpid())}
    env.pop("TORCHELASTIC_ERROR_FILE", None)
    return env


def _launch_exit_code(ranks: _Ranks, codes: list[int]) -> int:
    """The launcher's exit code from its processes' (saying the line a failure needs)."""
    if all(code == 0 for code in codes):
        return 0
    if ranks.signalled and all(code in (0, 130) for code in codes):  # stopped while preparing
        ranks.say(f"{ERROR_PREFIX} interrupted\n")
        return 130
    if not ranks.reported:
        failed = next(code for code in codes if code != 0)
        ranks.say(f"{ERROR_PREFIX} error: a training process failed (exit code {failed}); the whole run ended, "
                  "and its last complete checkpoint resumes\n")
    return 1


class _Ranks:
    """The processes of one launch: their stderr filtered (rank 0's lines, the first error
    of any), the others stopped when one fails."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say  # where the passed lines go
        self.processes: list[subprocess.Popen[str]] = []
        self.readers: list[threading.Thread] = []
        self.reported = False
        self.signalled = False  # the launcher was asked to stop
        self.held: dict[int, str] = {}  # the first error line of each rank but 0
        self._lock = threading.Lock()

    def start(self, rank: int, command: list[str], env: dict[str, str]) -> None:
        process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
        self.processes.append(process)
        reader = threading.Thread(target=self._pass_lines, args=(rank, process), daemon=True)
        reader.start()
        self.readers.append(reader)

    def _pass_lines(self, rank: int, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            if not line.startswith(ERROR_PREFIX):
                continue  # tracebacks and library logs: the error line says what matters
            with self._lock:
                self._pass_line(rank, line)

    def _pass_line(self, rank: int, line: str) -> None:
        """One of our lines from ``rank`` (the lock held): passed on, held, or dropped."""
        is_error = line.startswith(f"{ERROR_PREFIX} error")
        if is_error and rank != 0:  # rank 0 says it best (it knows the run's folder)
            self.held.setdefault(rank, line)
            return
        if (is_error and self.reported) or (not is_error and rank != 0):
            return
        self.reported = self.reported or is_error
        self.say(line)

    def signal(self, signum: int) -> None:
        for process in self.processes:
            if process.poll() is None:
                try:
                    process.send_signal(signum)
                except ProcessLookupError:
                    pass

    def wait(self) -> list[int]:
        """Every exit code; once one process fails, the rest get SIGTERM, then SIGKILL."""
        codes = self._poll_until_all_exit()
        for reader in self.readers:
            reader.join(timeout=5)
        self._report_held_error()
        return codes

    def _poll_until_all_exit(self) -> list[int]:
        """Poll until every process exited, stopping the rest once one fails."""
        failed_at: float | None = None
        while True:
            codes = [process.poll() for process in self.processes]
            if all(code is not None for code in codes):
                return [int(code) for code in codes]  # type: ignore[arg-type]
            failed_at = self._stop_after_failure(codes, failed_at)
            time.sleep(0.05)

    def _stop_after_failure(self, codes: list[int | None], failed_at: float | None) -> float | None:
        """SIGTERM to all at the first failure, SIGKILL after PEER_GRACE_S; when it was first seen."""
        if failed_at is None and any(code not in (None, 0) for code in codes):
            self.signal(signal.SIGTERM)
            return time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > PEER_GRACE_S:
            self.signal(signal.SIGKILL)
        return failed_at

    def _report_held_error(self) -> None:
        """When rank 0 said nothing: another rank's first error line."""
        with self._lock:
            if not self.reported and self.held:
                self.say(self.held[min(self.held)])
                self.reported = True


@contextmanager
def _forwarding_stop_signals(ranks: _Ranks) -> Iterator[None]:
    """SIGINT and SIGTERM to the launcher reach every process (Ctrl+C in a terminal reaches
    them directly as well: a process counts two deliveries close together as one request)."""

    def forward(signum: int, _frame: Any) -> None:
        ranks.signalled = True
        ranks.signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _quiet_stderr() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
    except OSError:
        pass


def die_with_launcher() -> None:
    """In a process our launcher started: ask for SIGTERM when the launcher dies (Linux), and
    watch it from a thread everywhere, so no process outlives its launcher (a process that
    cannot save within ORPHAN_GRACE_S of the launcher's death exits without saving)."""
    text = os.environ.get(LAUNCHER_ENV)
    if not text or not text.isdigit():
        return
    launcher = int(text)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != launcher:  # it died before the request above was in place
        os.kill(os.getpid(), signal.SIGTERM)

    def watch() -> None:
        while os.getppid() == launcher:
            time.sleep(1.0)
        _quiet_stderr()  # the launcher read it: later lines would fail on a broken pipe
        if not sys.platform.startswith("linux"):
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(ORPHAN_GRACE_S)
        os._exit(1)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()


@contextmanager
def joined_world(device: str) -> Iterator[Any]:
    """This process's :class:`DataParallel` (one process, or a rank ``torchrun`` started),
    joined to its process group for the duration. A collective that fails because another
    rank died becomes one line."""
    from minigpt_tui.engine.training.distributed import (  # deferred: imports torch
        DataParallel,
        world_from_environment,
    )

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
