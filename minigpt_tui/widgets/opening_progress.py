"""One line under the Generation screen's form while a model opens: how much of its weights
the worker has read, of how much. The worker calls :meth:`OpeningProgress.report` (it posts a
message, so the UI thread only draws); the line hides once the load has ended, however it ended.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

from rich.text import Text
from textual.message import Message
from textual.widgets import Static

BAR_CELLS = 20
HISTORY = 64  # the latest reads shown, kept for a look afterwards (tests read them)


def byte_size(count: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


def opening_line(spec: str, done: int, total: int) -> Text:
    """``opening NAME ━━━━──── 120.3 MB / 540.0 MB · 22%``."""
    name = Path(spec).name or spec
    line = Text(f"opening {name} ", style="bold")
    if total <= 0:
        return line.append("…")
    cells = round(BAR_CELLS * done / total)
    line.append("━" * cells, style="green").append("─" * (BAR_CELLS - cells), style="dim")
    return line.append(f" {byte_size(done)} / {byte_size(total)} · {100 * done / total:.0f}%")


class OpeningProgress(Static):
    """The weights read of the model being opened (hidden while none is)."""

    DEFAULT_CSS = """
    OpeningProgress { height: 1; display: none; padding: 0 1; }
    OpeningProgress.-opening { display: block; }
    """

    class Read(Message):
        def __init__(self, spec: str, done: int, total: int, finished: bool) -> None:
            super().__init__()
            self.spec, self.done, self.total, self.finished = spec, done, total, finished

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self.reads: deque[tuple[int, int]] = deque(maxlen=HISTORY)  # (done, total) as shown
        self._posted: tuple[str, int] | None = None  # the worker's last (spec, per mille) posted

    def report(self, spec: str, done: int, total: int, finished: bool) -> None:
        """On the worker thread: post a read when it moves the line by a thousandth or more."""
        mille = 1000 * done // total if total > 0 else -1
        if not finished and self._posted == (spec, mille):
            return
        self._posted = None if finished else (spec, mille)
        self.post_message(self.Read(spec, done, total, finished))

    def on_opening_progress_read(self, message: Read) -> None:
        message.stop()
        if message.finished:
            self.remove_class("-opening")
            return
        self.reads.append((message.done, message.total))
        self.update(opening_line(message.spec, message.done, message.total))
        self.add_class("-opening")
