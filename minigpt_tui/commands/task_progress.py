"""A transient progress bar on stderr for a long analysis (patching, head scores): drawn only
on a terminal, silent when stderr is piped or ``--json`` is asked for."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)


@contextmanager
def task_progress(label: str, enabled: bool, console: Any = None) -> Iterator[Callable[[int, int], None]]:
    """Yields ``advance(done, total)``; the bar shows ``label``, done of total and the time left,
    and is removed when the work ends. ``console``: where to draw (default: stderr)."""

    if console is None and enabled and sys.stderr.isatty():
        console = Console(stderr=True)
    if not enabled or console is None or not console.is_terminal:
        yield lambda _done, _total: None
        return
    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=console, transient=True)
    task = bar.add_task(label, total=None)
    with bar:
        yield lambda done, total: bar.update(task, completed=done, total=total)
