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
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.errors import ConfigError, InputRefused, WriteRefused
from minigpt_tui.engine.core.files import process_alive, read_small_file
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.formats.bounded_json import JSONRefused, load_json
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
    its newline is left for the next read, never misread. Memory stays bounded whatever the
    file holds: one read takes at most ``chunk`` bytes and one call at most ``budget``
    (the rest waits for the next call), and a line longer than ``chunk`` is skipped and
    counted in ``skipped``; a file that is not a regular file is never opened."""

    path: Path
    offset: int = 0
    chunk: int = 1 << 20
    budget: int = 64 << 20
    skipped: int = 0

    def read_lines(self) -> list[str]:
        size = self._regular_size()
        if size is None:
            return []
        if size < self.offset:  # replaced or truncated: read it again from the start
            self.offset = 0
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return []
        try:
            return self._read_open(fd, size)
        finally:
            os.close(fd)

    def _regular_size(self) -> int | None:
        """The file's size, or None when it cannot be seen or is not a regular file."""
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        return info.st_size

    def _read_open(self, fd: int, size: int) -> list[str]:
        """The complete lines between the offset and ``size``, within this call's budget (an
        error while reading ends the read with the lines read so far)."""
        lines: list[str] = []
        spent = 0
        try:
            while self.offset < size and spent < self.budget:
                data = os.pread(fd, min(self.chunk, size - self.offset), self.offset)
                if not data:
                    break
                spent += len(data)
                if not self._take(data, lines):
                    break
        except OSError:
            pass
        return lines

    def _take(self, data: bytes, lines: list[str]) -> bool:
        """Add the complete lines of one chunk and move past them; False when the chunk ends
        in a line still being written (read it again next time)."""
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) < self.chunk:
                return False  # the writer's line is not complete yet
            self.offset += len(data)  # one line longer than a chunk: never a record
            self.skipped += 1
            return True
        self.offset += end + 1
        lines.extend(data[: end + 1].decode("utf-8", errors="replace").splitlines())
        return True


MAX_CONTROL_LINE = 4096  # a command is a few dozen bytes


def parse_command(line: str) -> Command:
    """A control line's command, or ConfigError naming what is wrong with it (the line is
    input from anyone who can write to the folder: bounded, parsed with bounded nesting and
    numbers, and type-checked)."""
    shown = escape_controls(line[:40])
    if len(line) > MAX_CONTROL_LINE:
        raise ConfigError(f"control file line of {len(line):,} characters is not a command: {shown}…")
    try:
        value = load_json(line, 4)
    except JSONRefused as err:
        raise ConfigError(f"control file line is not JSON ({err}): {shown}") from None
    name = value.get("command") if isinstance(value, dict) else None
    if not isinstance(name, str) or name not in COMMANDS:
        raise ConfigError(f"control file line is not a command (pause, resume, save, evaluate, stop): {shown}")
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
        skipped = self.control.skipped
        lines = self.control.read_lines()
        if self.control.skipped > skipped:
            report(Refused("control", f"control file: skipped {self.control.skipped - skipped} line(s) longer "
                                      f"than {self.control.chunk:,} bytes"))
        for line in lines:
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


LIVE_LIMIT = 64 << 10  # live.json is a few hundred bytes
LIVE_STATES = ("running", "paused", "finished", "stopped", "failed", "ended")
UNREADABLE = "unreadable"


@dataclass(frozen=True)
class LiveState:
    """What ``live.json`` says of a run, and whether its writer is still alive. A file that
    exists but cannot be read as a live state gives the state ``unreadable`` with the
    reason: the run may still be training, so it is never read as ended."""

    state: str
    step: int
    steps: int
    listening: bool
    parameter_tensors: int = 0  # 0 when the writer did not say (written before it told)
    parameter_scalars: int = 0
    pid: int | None = None
    host: str = ""
    reason: str = ""

    @property
    def text(self) -> str:
        if self.state == UNREADABLE:
            return f"cannot read live status ({self.reason})"
        return f"{self.state} at update {self.step} of {self.steps}"

    @property
    def process(self) -> str:
        """The writer, in words: "process 1234 on host"."""
        if self.pid is None:
            return "another process"
        return f"process {self.pid}" + (f" on {escape_controls(self.host)}" if self.host else "")


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 62 else None


def read_live(run_dir: Path) -> LiveState | None:
    """The run's live state: None when no trainer ever followed this folder. A writer that
    died without saying so (its lock file names a process that is gone on this host) reads
    as not listening. The file is input: a regular file of bounded size (a FIFO or a device
    is never read), bounded JSON, every field type-checked."""
    data = _read_live_object(Path(run_dir) / LIVE_FILE)
    if not isinstance(data, dict):
        return data
    return _live_state(Path(run_dir), data)


def _read_live_object(path: Path) -> dict[str, Any] | LiveState | None:
    """live.json's object; None when there is no such file, an unreadable state when it
    cannot be read or holds no JSON object."""
    try:
        raw = read_small_file(path, LIVE_LIMIT, "live status file")
    except InputRefused as err:
        if not os.path.lexists(path):
            return None
        return LiveState(UNREADABLE, 0, 0, False, reason=_reason(str(err), path))
    try:
        data = load_json(raw.decode("utf-8"), 4)
    except (JSONRefused, UnicodeDecodeError) as err:
        return LiveState(UNREADABLE, 0, 0, False, reason=f"live.json is not JSON: {err}"[:120])
    if not isinstance(data, dict):
        return LiveState(UNREADABLE, 0, 0, False, reason="live.json is not an object")
    return data


def _live_state(run_dir: Path, data: dict[str, Any]) -> LiveState:
    """The live state live.json's object describes, every field type-checked."""
    state, step, steps = data.get("state"), _count(data.get("step")), _count(data.get("steps"))
    if state not in LIVE_STATES or step is None or steps is None:
        return LiveState(UNREADABLE, 0, 0, False, reason="live.json lacks a valid state, step or steps")
    pid = _count(data.get("pid"))
    host = data.get("host") if isinstance(data.get("host"), str) else ""
    listening = data.get("listening") is True and _writer_alive(run_dir, data)
    if not listening and state in ("running", "paused"):
        state = "ended"
    tensors, scalars = (_count(data.get(key)) or 0 for key in PARAMETER_KEYS)
    return LiveState(str(state), step, steps, listening, tensors, scalars, pid, str(host)[:255])


def _reason(message: str, path: Path) -> str:
    """An input refusal's message without the path it names (the run is named already)."""
    return message.replace(str(path), "live.json")[:120]


def _writer_alive(run_dir: Path, live: dict[str, Any]) -> bool:
    if live.get("host") != socket.gethostname():
        return True  # another machine: trust the file

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
