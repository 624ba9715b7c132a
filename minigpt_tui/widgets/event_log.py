"""The event log: one line per run event (started, saved, paused, best changed, refused…)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.text import Text
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
}


class EventLog(RichLog):
    DEFAULT_CSS = """
    EventLog { height: 6; overflow-x: hidden; }
    """

    def __init__(self, *, wall_clock: Callable[[], float] = time.time, **kwargs: Any) -> None:
        super().__init__(max_lines=500, wrap=True, markup=False, highlight=False, **kwargs)
        self._wall_clock = wall_clock
        self.entries: list[tuple[str, str]] = []

    def record(self, kind: str, message: str) -> None:
        stamp = time.strftime("%H:%M:%S", time.localtime(self._wall_clock()))
        self.entries.append((kind, message))
        del self.entries[:-500]
        line = Text(f"{stamp} ", style="dim")
        line.append(f"{kind:<9}" if len(kind) < 9 else f"{kind} ", style=KIND_STYLES.get(kind, ""))
        line.append(message)
        self.write(line)
