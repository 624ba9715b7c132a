"""The event log: one line per run event (started, saved, paused, best changed, refused…)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual import events
from textual.widgets import RichLog

KIND_STYLES = {
    "started": "bold",
    "following": "bold",
    "resumed": "green",
    "paused": "yellow",
    "saved": "cyan",
    "best": "bold green",
    "extra": "italic",
    "refused": "bold red",
    "note": "yellow",
    "threads": "magenta",
    "failed": "bold red",
    "finished": "bold",
    "stopped": "yellow",
    "exported": "cyan",
    "overlay": "magenta",
    "asked": "dim",
    "unfinished": "bold yellow",
    "next": "italic",
}


class EventLog(RichLog):
    """Keeps to its newest line, also across a resize (a narrower box rewraps every line),
    unless the reader scrolled up to read older ones."""

    DEFAULT_CSS = """
    EventLog { height: 6; overflow-x: hidden; }
    """

    def __init__(self, *, wall_clock: Callable[[], float] = time.time, **kwargs: Any) -> None:
        # min_width 1: wrap to the box (RichLog's default of 78 cut two columns off at 80)
        super().__init__(max_lines=500, wrap=True, markup=False, highlight=False, min_width=1, **kwargs)
        self._wall_clock = wall_clock
        self.entries: list[tuple[str, str]] = []
        self._lines: list[Text] = []  # each entry as written, to wrap again at a new width
        self._width = 0
        self.following = True  # showing the newest line: a resize or a new line keeps it shown

    def record(self, kind: str, message: str) -> None:
        stamp = time.strftime("%H:%M:%S", time.localtime(self._wall_clock()))
        self.entries.append((kind, message))
        del self.entries[:-500]
        line = Text(f"{stamp} ", style="dim")
        line.append(f"{kind:<9}" if len(kind) < 9 else f"{kind} ", style=KIND_STYLES.get(kind, ""))
        line.append(message)
        self._lines.append(line)
        del self._lines[:-500]
        self.write(line, scroll_end=self.following)

    def on_resize(self, event: events.Resize) -> None:
        width = self.scrollable_content_region.width
        if self._lines and width != self._width and self._width:
            self.clear()
            for line in self._lines:
                self.write(line, scroll_end=False)
        self._width = width
        if self.following:
            self.call_after_refresh(self.scroll_end, animate=False, x_axis=False)

    # Where the reader left the log: following the newest line only while it shows.
    def on_mouse_scroll_up(self) -> None:
        self.call_after_refresh(self._note_position)

    def on_mouse_scroll_down(self) -> None:
        self.call_after_refresh(self._note_position)

    def on_key(self) -> None:
        self.call_after_refresh(self._note_position)

    def _note_position(self) -> None:
        self.following = self.scroll_y >= self.max_scroll_y
