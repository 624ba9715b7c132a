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
from pathlib import Path
from typing import Any

from textual.message import Message

from minigpt_tui.engine.formats.integrity import Integrity
from minigpt_tui.engine.session.events import RunSummary
from minigpt_tui.engine.session.generation import StepperView
from minigpt_tui.engine.session.insight import InsightView
from minigpt_tui.engine.session.run_store import RunListing
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


# -- the Checkpoints screen's workers --------------------------------------------------------
class RunsScanned(Message):
    def __init__(self, listings: tuple[RunListing, ...], select: Path | None) -> None:
        super().__init__()
        self.listings = listings
        self.select = select


class Inspected(Message):
    def __init__(self, serial: int, inspection: Any) -> None:
        super().__init__()
        self.serial = serial
        self.inspection = inspection


class InspectionFailed(Message):
    def __init__(self, serial: int, path: Path, reason: str, loud: bool) -> None:
        super().__init__()
        self.serial = serial
        self.path = path
        self.reason = reason
        self.loud = loud


class StatisticsReady(Message):
    def __init__(self, serial: int, entry: Any, stats: dict[str, Any] | None, reason: str | None) -> None:
        super().__init__()
        self.serial = serial
        self.entry = entry
        self.stats = stats
        self.reason = reason


class TokenizerReady(Message):
    def __init__(self, serial: int, tokenizer: Any, note: str) -> None:
        super().__init__()
        self.serial = serial
        self.tokenizer = tokenizer
        self.note = note


class IntegrityReady(Message):
    def __init__(self, serial: int, integrity: Integrity) -> None:
        super().__init__()
        self.serial = serial
        self.integrity = integrity


class ComparisonReady(Message):
    def __init__(self, serial: int, other: Path, result: dict[str, Any]) -> None:
        super().__init__()
        self.serial = serial
        self.other = other
        self.result = result


# -- the Generation screen's worker ---------------------------------------------------------
class GenerationUpdated(Message):
    def __init__(self, view: StepperView | None, note: str | None = None, select: int | None = None) -> None:
        super().__init__()
        self.view = view
        self.note = note
        self.select = select


class GenerationFailed(Message):
    def __init__(self, reason: str, what: str, dropped: int) -> None:
        super().__init__()
        self.reason = reason
        self.what = what
        self.dropped = dropped


class QueueIdle(Message):
    pass


class InsightReady(Message):
    """What one decision looked like inside, computed on the generation worker."""

    def __init__(self, view: "InsightView") -> None:
        super().__init__()
        self.view = view
