"""Progress on stderr for the long commands: a transient bar for an analysis or a conversion
(items done of total, rate, time left), and the pieces the training bar shares with it. Drawn
only on a terminal, silent when stderr is piped or ``--json`` is asked for."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from minigpt_tui.engine.core.printable import escape_controls

REFRESHES_PER_SECOND = 4  # what a reader can follow; more only costs the worker time
DRAW_INTERVAL_S = 1.0 / REFRESHES_PER_SECOND

Advance = Callable[[int, int], None]


def rate_text(per_second: float | None, unit: str) -> str:
    """A rate as a reader compares it: ``'12.3 upd/s'`` at one or more a second, ``'4.2 s/upd'``
    below, ``'– upd/s'`` before there is one."""
    if per_second is None or per_second <= 0:
        return f"– {unit}/s"
    if per_second >= 1:
        return f"{per_second:.1f} {unit}/s"
    return f"{1 / per_second:.1f} s/{unit}"


def evaluation_line(step: int, train_loss: float, validation_loss: float | None, best: bool) -> str:
    """The persistent line a scheduled evaluation leaves above the training bar (as nanoGPT's)."""
    line = f"update {step}: train loss {train_loss:.4f}"
    if validation_loss is not None:
        line += f", val loss {validation_loss:.4f}"
    return line + (" (best so far)" if best else "")


class RateColumn(ProgressColumn):
    """The task's rate in ``unit`` per second (or seconds per ``unit`` when slower)."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        return Text(rate_text(task.speed, self.unit), style="progress.data.speed")


def terminal_console(enabled: bool, console: Any = None) -> Any:
    """Where progress is drawn: ``console`` or stderr, only when enabled and a terminal (None otherwise)."""
    if console is None and enabled and sys.stderr.isatty():
        console = Console(stderr=True)
    if not enabled or console is None or not console.is_terminal:
        return None
    return console


class Throttle:
    """True at most every ``interval`` seconds (and on the first call): keeps drawing off the
    per-item path, one clock read per call."""

    def __init__(self, interval: float = DRAW_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self.last = -float("inf")

    def __call__(self) -> bool:
        now = self.clock()
        if now - self.last < self.interval:
            return False
        self.last = now
        return True


@contextmanager
def task_progress(label: str, enabled: bool, console: Any = None, unit: str = "item") -> Iterator[Advance]:
    """Yields ``advance(done, total)``; the bar shows ``label``, done of total, the rate in
    ``unit`` and the time left, and is removed when the work ends. ``console``: where to draw
    (default: stderr)."""
    console = terminal_console(enabled, console)
    if console is None:
        yield lambda _done, _total: None
        return
    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), RateColumn(unit), TimeRemainingColumn(),
                   console=console, transient=True, refresh_per_second=REFRESHES_PER_SECOND)
    task = bar.add_task(label, total=None)
    with bar:
        yield lambda done, total: bar.update(task, completed=done, total=total)


@contextmanager
def stage_progress(first: str, enabled: bool, console: Any = None) -> Iterator[Callable[[str], None]]:
    """For work that runs as a few stages of unknown length (opening a model, writing a
    folder): a transient line shows the stage (``first``, then what ``stage(description)``
    says) and the time spent in the whole job."""
    console = terminal_console(enabled, console)
    if console is None:
        yield lambda _description: None
        return
    bar = Progress(TextColumn("{task.description}", markup=False), BarColumn(), TimeElapsedColumn(), console=console,
                   transient=True, refresh_per_second=REFRESHES_PER_SECOND)
    task = bar.add_task(escape_controls(first), total=None)
    with bar:
        yield lambda description: bar.update(task, description=escape_controls(description))
