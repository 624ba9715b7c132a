"""Textual messages that carry engine events and worker results to the UI thread.

A training session reports every update; one Textual message per update would take a
large share of the GIL from training. A :class:`RunFeed` is the session's sink instead:
the worker thread appends events to a lock-protected list and posts one
:class:`EngineEventsReady` only when the list goes from empty to non-empty. The screen
drains the whole list at its own refresh rate, so a fast run costs the UI a few messages a
second however many updates it makes.

Nothing here imports torch: the event records come from the engine's torch-free session layer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from textual.message import Message

from minigpt_tui.engine.session.events import RunSummary
from minigpt_tui.engine.session.history import LoadedCurve, RunHistory

__all__ = ["CurveLoaded", "EngineEventsReady", "EngineImported", "HistoryLoaded", "LoadedCurve", "RunFeed",
           "RunHistory", "RunSummary"]


class EngineEventsReady(Message):
    """Events wait in ``feed``; drain it (at most a few times a second)."""

    def __init__(self, feed: "RunFeed") -> None:
        super().__init__()
        self.feed = feed


class CurveLoaded(Message):
    def __init__(self, curve: LoadedCurve) -> None:
        super().__init__()
        self.curve = curve


class HistoryLoaded(Message):
    def __init__(self, feed: "RunFeed", history: RunHistory) -> None:
        super().__init__()
        self.feed = feed
        self.history = history


class EngineImported(Message):
    """torch and the engine finished importing on a worker thread."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds


@dataclass
class RunFeed:
    """The session's sink: cheap on the worker thread, drained by the UI thread.

    ``post`` is a widget's ``post_message`` (thread-safe). Only the first event after a
    drain posts a message; later ones just join the pending list.
    """

    post: Callable[[Message], Any]
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _pending: list[Any] = field(default_factory=list, repr=False)
    _announced: bool = field(default=False, repr=False)

    def __call__(self, event: Any) -> None:
        with self._lock:
            self._pending.append(event)
            if self._announced:
                return
            self._announced = True
        self.post(EngineEventsReady(self))

    def drain(self) -> list[Any]:
        with self._lock:
            events, self._pending = self._pending, []
            self._announced = False
        return events
