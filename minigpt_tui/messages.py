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
from typing import TYPE_CHECKING, Any

from textual.message import Message

from minigpt_tui.engine.session.events import RunSummary
from minigpt_tui.engine.session.history import LoadedCurve, RunHistory

if TYPE_CHECKING:  # what the Generation and Checkpoints screens' workers carry, imported with them
    from minigpt_tui.engine.session.checkpoint_views import Integrity
    from minigpt_tui.engine.session.generation import StepperView
    from minigpt_tui.engine.session.head_role_view import HeadRolesView
    from minigpt_tui.engine.session.insight import InsightView
    from minigpt_tui.engine.session.patching import PatchDefaults, PatchingView
    from minigpt_tui.engine.session.run_store import RunListing
    from minigpt_tui.engine.session.text_scores import TextScoresView

__all__ = ["CurveLoaded", "EngineEventsReady", "EngineImported", "HistoryLoaded", "LoadedCurve", "RunFeed",
           "RunHistory", "RunSummary"]


@dataclass
class EngineEventsReady(Message):
    """Events wait in ``feed``; drain it (at most a few times a second)."""

    feed: "RunFeed"


@dataclass
class CurveLoaded(Message):
    curve: LoadedCurve


@dataclass
class HistoryLoaded(Message):
    feed: "RunFeed"
    history: RunHistory


@dataclass
class EngineImported(Message):
    """torch and the engine finished importing on a worker thread."""

    seconds: float


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
@dataclass
class RunsScanned(Message):
    listings: tuple[RunListing, ...]
    select: Path | None


@dataclass
class Inspected(Message):
    serial: int
    inspection: Any


@dataclass
class InspectionFailed(Message):
    serial: int
    path: Path
    reason: str
    loud: bool


@dataclass
class StatisticsReady(Message):
    serial: int
    entry: Any
    stats: dict[str, Any] | None
    reason: str | None


@dataclass
class StatisticsProgress(Message):
    """How much of a large tensor's two passes the statistics worker has read."""

    serial: int
    fraction: float


@dataclass
class TokenizerReady(Message):
    serial: int
    tokenizer: Any
    note: str


@dataclass
class IntegrityReady(Message):
    serial: int
    integrity: Integrity


@dataclass
class ComparisonReady(Message):
    serial: int
    other: Path
    result: dict[str, Any]


# -- the Generation screen's worker ---------------------------------------------------------
@dataclass
class GenerationUpdated(Message):
    view: StepperView | None
    note: str | None = None
    select: int | None = None
    partial: bool = False  # a run still going shows what it has decided so far


@dataclass
class GenerationFailed(Message):
    reason: str
    what: str
    dropped: int


@dataclass
class QueueIdle(Message):
    """The generation worker has nothing left to do."""


@dataclass
class InsightReady(Message):
    """What one decision looked like inside, computed on the generation worker."""

    view: InsightView


@dataclass
class HeadRolesReady(Message):
    """Every head's role scores for the loaded model, computed on the generation worker."""

    view: HeadRolesView


@dataclass
class TextScored(Message):
    """A text's per-token loss, scored on the generation worker for the Text view."""

    view: TextScoresView


@dataclass
class PatchDefaultsReady(Message):
    """What the patching dialog starts from, read on the generation worker."""

    defaults: PatchDefaults


@dataclass
class PatchProgress(Message):
    """Patched runs done of the sweep's total (from the generation worker)."""

    done: int
    total: int


@dataclass
class PatchReady(Message):
    """A patching sweep's effects as plain numbers."""

    view: PatchingView


@dataclass
class PatchAttributionReady(Message):
    """The attribution grid (gradient estimates of every cell), before the exact sweep."""

    view: PatchingView


@dataclass
class PatchHeadsReady(Message):
    """Every head of one block patched at every position."""

    layer: int
    effects: tuple[Any, ...]


@dataclass
class PatchRefused(Message):
    """The engine refused the patching request (the queue notifies the reason)."""

    reason: str


# -- one screen asking the app for another ---------------------------------------------------
@dataclass
class OpenInGeneration(Message):
    """Show the Generation screen with this model file opened."""

    model: Path


@dataclass
class ResumeOnTraining(Message):
    """Show the Training screen resuming this checkpoint folder, bit for bit."""

    checkpoint: Path
