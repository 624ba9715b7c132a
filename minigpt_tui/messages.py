"""Textual messages that carry engine events and worker results to the UI thread.

The run controller reports every update; one Textual message per update would take a
large share of the GIL from training. A :class:`RunFeed` is the controller's sink instead:
the worker thread appends events to a lock-protected list and posts one
:class:`EngineEventsReady` only when the list goes from empty to non-empty. The screen
drains the whole list at its own refresh rate, so a fast run costs the UI a few messages a
second however many updates it makes.

Nothing here imports torch: events are handled by duck type and class, never constructed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textual.message import Message


@dataclass(frozen=True)
class RunSummary:
    """What identifies a run, gathered on the worker thread once the trainer is built."""

    run_name: str
    run_dir: Path | None
    preset: str
    parameter_tensors: int
    parameter_scalars: int
    corpus_source: str
    corpus_identity: str
    train_records: int
    validation_records: int
    tokenizer_identity: str
    vocab_size: int
    merges: int
    precision: str
    dtype: str
    threads: int
    steps: int
    start_step: int = 0
    resumed_from: Path | None = None
    corpus_mode: str = "records"
    train_tokens: int = 0  # stream mode: tokens in each split's array
    validation_tokens: int = 0
    evaluation_rule: str = ""


@dataclass(frozen=True)
class LoadedCurve:
    """Another run's losses, read from its ``metrics.jsonl`` for the plot overlay."""

    name: str
    updates: tuple[tuple[int, float], ...]
    train: tuple[tuple[int, float], ...]
    validation: tuple[tuple[int, float], ...]


class EngineEventsReady(Message):
    """Events wait in ``feed``; drain it (at most a few times a second)."""

    def __init__(self, feed: "RunFeed") -> None:
        super().__init__()
        self.feed = feed


class CurveLoaded(Message):
    def __init__(self, curve: LoadedCurve) -> None:
        super().__init__()
        self.curve = curve


@dataclass(frozen=True)
class RunHistory:
    """A resumed run's records up to the checkpoint it continues from (from metrics.jsonl):
    plain records with the fields the table and plot read."""

    updates: tuple[Any, ...]
    evaluations: tuple[Any, ...]
    best_step: int | None


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
    """The controller's sink: cheap on the worker thread, drained by the UI thread.

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
