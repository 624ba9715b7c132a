"""A run folder that other processes can follow and steer: the trainer that writes a run
keeps ``live.json`` (its state, step and process) and reads ``control.jsonl`` between
updates; anyone who can write to the folder (the app attached to it, on this machine or
over a shared filesystem) appends commands there.

``control.jsonl`` holds one JSON object per line, ``{"command": "pause"}`` (pause, resume,
save, evaluate, stop). A line that is not a command is reported once and skipped; a line
still being written (no newline yet) is waited for. No torch.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minigpt_tui.engine.errors import ConfigError, WriteRefused
from minigpt_tui.engine.session.events import (
    Command,
    Failed,
    Finished,
    Paused,
    Refused,
    Resumed,
    RunStarted,
)

CONTROL_FILE = "control.jsonl"
LIVE_FILE = "live.json"
PARAMETER_KEYS = ("parameter_tensors", "parameter_scalars")  # in live.json, from the writer
COMMANDS = {command.value: command for command in Command}


@dataclass
class TailReader:
    """New complete lines of a file that another process appends to. A last line without
    its newline is left for the next read, never misread."""

    path: Path
    offset: int = 0

    def read_lines(self) -> list[str]:
        try:
            size = self.path.stat().st_size
        except OSError:
            return []
        if size < self.offset:  # replaced or truncated: read it again from the start
            self.offset = 0
        if size == self.offset:
            return []
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read(size - self.offset)
        except OSError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        return data[: end + 1].decode("utf-8", errors="replace").splitlines()


def parse_command(line: str) -> Command:
    """A control line's command, or ConfigError naming what is wrong with it."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        raise ConfigError(f"control file line is not JSON: {line[:40]!r}") from None
    name = value.get("command") if isinstance(value, dict) else None
    if name not in COMMANDS:
        raise ConfigError(f"control file line is not a command (pause, resume, save, evaluate, stop): {line[:40]!r}")
    return COMMANDS[name]


class RunControl:
    """The trainer's side: reads commands from ``control.jsonl`` (only those written after
    it started) and keeps ``live.json`` current. Installed by the training session on the
    process that writes the run."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.control = TailReader(self.run_dir / CONTROL_FILE)
        try:
            self.control.offset = self.control.path.stat().st_size  # earlier commands were for earlier runs
        except OSError:
            self.control.offset = 0
        self.step = 0
        self.steps = 0
        self.parameters: dict[str, int] = {}  # the model's counts, for whoever attaches

    def poll(self, report: Callable[[Any], None]) -> list[Command]:
        """Commands written since the last poll; each garbage line becomes a Refused event."""
        commands = []
        for line in self.control.read_lines():
            if not line.strip():
                continue
            try:
                commands.append(parse_command(line))
            except ConfigError as err:
                report(Refused("control", str(err)))
        return commands

    def watching(self, sink: Callable[[Any], None]) -> Callable[[Any], None]:
        """``sink``, with the run's state written to ``live.json`` as it changes."""

        def observe(event: Any) -> None:
            state = None
            if isinstance(event, RunStarted):
                self.step, self.steps, state = event.step, event.steps, "running"
                self.parameters = {key: value for key, value in event.summary.items()
                                   if key in PARAMETER_KEYS and isinstance(value, int)}
            elif isinstance(event, Paused):
                self.step, state = event.step, "paused"
            elif isinstance(event, Resumed):
                self.step, state = event.step, "running"
            elif isinstance(event, Finished):
                self.step, state = event.step, "finished" if event.reason == "completed" else "stopped"
            elif isinstance(event, Failed):
                state = "failed"
            if state is not None:
                self.write_live(state)
            sink(event)

        return observe

    def write_live(self, state: str) -> None:
        record = {"state": state, "step": self.step, "steps": self.steps, "pid": os.getpid(),
                  "host": socket.gethostname(), "listening": state in ("running", "paused"), "at": time.time(),
                  **self.parameters}
        target = self.run_dir / LIVE_FILE
        tmp = target.with_name(f".{LIVE_FILE}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(record, sort_keys=True) + "\n", "utf-8")
            os.replace(tmp, target)
        except OSError:
            pass  # following is a convenience: training never fails for it


@dataclass(frozen=True)
class LiveState:
    """What ``live.json`` says of a run, and whether its writer is still alive."""

    state: str
    step: int
    steps: int
    listening: bool
    parameter_tensors: int = 0  # 0 when the writer did not say (written before it told)
    parameter_scalars: int = 0

    @property
    def text(self) -> str:
        return f"{self.state} at update {self.step} of {self.steps}"


def read_live(run_dir: Path) -> LiveState | None:
    """The run's live state: None when no trainer ever followed this folder. A writer that
    died without saying so (its lock file names a process that is gone on this host) reads
    as not listening."""
    try:
        data = json.loads((Path(run_dir) / LIVE_FILE).read_text("utf-8"))
        state, step, steps = str(data["state"]), int(data["step"]), int(data["steps"])
        listening = bool(data.get("listening")) and _writer_alive(Path(run_dir), data)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not listening and state in ("running", "paused"):
        state = "ended"
    counts = [data.get(key) for key in PARAMETER_KEYS]
    tensors, scalars = (value if isinstance(value, int) and value >= 0 else 0 for value in counts)
    return LiveState(state, step, steps, listening, tensors, scalars)


def _writer_alive(run_dir: Path, live: dict[str, Any]) -> bool:
    if live.get("host") != socket.gethostname():
        return True  # another machine: trust the file
    from minigpt_tui.engine.runs import process_alive

    pid = live.get("pid")
    return isinstance(pid, int) and process_alive(pid)


def is_run_folder(path: Path) -> bool:
    return (Path(path) / "config.json").is_file()


def send_command(run_dir: Path, command: Command) -> None:
    """Append ``command`` to the run's control file; refused in one line when the folder is
    not a run or no trainer listens to it."""
    run_dir = Path(run_dir)
    if not is_run_folder(run_dir):
        raise ConfigError(f"{run_dir} is not a run folder (it has no config.json)")
    live = read_live(run_dir)
    if live is None or not live.listening:
        raise ConfigError(f"run {run_dir.name} is not listening: no trainer is running it")
    line = json.dumps({"command": command.value, "at": time.time()}) + "\n"
    try:
        fd = os.open(run_dir / CONTROL_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, line.encode())  # one write: a reader sees the whole line or none of it
        finally:
            os.close(fd)
    except OSError as err:
        raise WriteRefused(f"cannot write the control file of {run_dir.name}: {err.strerror or err}") from None
