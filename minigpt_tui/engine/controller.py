"""A training run on its own thread: commands in through a queue, typed events out.

The app starts :meth:`RunController.run` in a thread worker and turns each event into a
Textual message. Commands take effect at the next complete-update boundary, so pausing,
evaluating off schedule and saving never change the trajectory.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from minigpt_tui.engine.errors import MiniGPTError
from minigpt_tui.engine.trainer import (
    EvaluationRecord,
    Trainer,
    UpdateRecord,
    apply_precision,
    scheduled_work,
)


@dataclass(frozen=True)
class RunStarted:
    summary: dict[str, Any]
    step: int
    steps: int


@dataclass(frozen=True)
class UpdateDone:
    record: UpdateRecord
    steps: int


@dataclass(frozen=True)
class EvaluationDone:
    record: EvaluationRecord
    best_step: int | None
    best_changed: bool


@dataclass(frozen=True)
class Paused:
    step: int


@dataclass(frozen=True)
class Resumed:
    step: int


@dataclass(frozen=True)
class Saved:
    step: int
    path: Path
    reason: str


@dataclass(frozen=True)
class Refused:
    action: str
    message: str


@dataclass(frozen=True)
class Finished:
    step: int
    reason: str  # "completed" | "stopped"
    state_digest: str


@dataclass(frozen=True)
class Failed:
    message: str


Event = RunStarted | UpdateDone | EvaluationDone | Paused | Resumed | Saved | Refused | Finished | Failed


class Checkpointer(Protocol):
    def save(self, trainer: Trainer, reason: str) -> Path: ...


@dataclass
class _Command:
    name: str
    done: Any = field(default=None)


class RunController:
    """Drives one trainer. ``build`` runs on the worker thread (it imports and allocates)."""

    def __init__(
        self,
        build: Callable[[], Trainer],
        sink: Callable[[Event], None],
        *,
        checkpointer: Checkpointer | None = None,
        start_paused: bool = False,
        until: int | None = None,
        on_record: Callable[[UpdateRecord | EvaluationRecord], None] | None = None,
    ) -> None:
        self._build = build
        self._sink = sink
        self._checkpointer = checkpointer
        self._commands: queue.Queue[_Command] = queue.Queue()
        self._paused = start_paused
        self._until = until
        self._on_record = on_record
        self.trainer: Trainer | None = None
        self.unsaved_updates = 0

    # -- commands (any thread) -----------------------------------------------------------
    def pause(self) -> None:
        self._commands.put(_Command("pause"))

    def resume(self) -> None:
        self._commands.put(_Command("resume"))

    def stop(self) -> None:
        self._commands.put(_Command("stop"))

    def evaluate_now(self) -> None:
        self._commands.put(_Command("evaluate"))

    def save_now(self) -> None:
        self._commands.put(_Command("save"))

    # -- the worker ----------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._run()
        except MiniGPTError as err:
            self._sink(Failed(str(err)))
        except Exception as err:  # noqa: BLE001 - a worker must report, never die silently
            self._sink(Failed(f"{type(err).__name__}: {err}"))

    def _run(self) -> None:
        trainer = self._build()
        self.trainer = trainer
        apply_precision(trainer.config.train)
        tensors, scalars = trainer.parameter_counts
        self._sink(
            RunStarted(
                summary={"parameter_tensors": tensors, "parameter_scalars": scalars},
                step=trainer.step,
                steps=trainer.config.train.steps,
            )
        )
        if self._paused:
            self._sink(Paused(trainer.step))
        work = scheduled_work(trainer, self._until)
        save_every = trainer.config.train.save_every
        due: list[str] = []
        with torch.no_grad():  # grad mode is per thread; the trainer enables it per update
            while True:
                if self._handle_commands(trainer):
                    self._finish(trainer, "stopped")
                    return
                try:
                    item = next(work)
                except StopIteration:
                    self._finish(trainer, "completed")
                    return
                if self._on_record:
                    self._record(item)
                if isinstance(item, UpdateRecord):
                    self.unsaved_updates += 1
                    self._sink(UpdateDone(item, trainer.config.train.steps))
                    if save_every and trainer.step % save_every == 0:
                        due.append("interval")
                else:
                    best_changed = not item.extra and trainer.best_step == item.step and item.validation_loss is not None
                    self._sink(EvaluationDone(item, trainer.best_step, best_changed))
                    if best_changed and trainer.step > 0:
                        due.append("best")
                # One checkpoint per step, after that step's scheduled evaluation.
                if not trainer.evaluation_due():
                    if due:
                        self._save(trainer, "+".join(due))
                    due = []

    def _record(self, item: UpdateRecord | EvaluationRecord) -> None:
        """Hand a record to ``on_record``; when it cannot be kept (the metrics log cannot be
        written), the run stops at this update boundary and saves what it can."""
        try:
            self._on_record(item)  # type: ignore[misc]
        except MiniGPTError as err:
            self._sink(Refused("metrics", f"{err}: stopping the run"))
            self.stop()

    def _handle_commands(self, trainer: Trainer) -> bool:
        """Apply waiting commands; block while paused. True means stop."""
        while True:
            try:
                command = self._commands.get(block=self._paused, timeout=0.1 if self._paused else None)
            except queue.Empty:
                if self._paused:
                    continue
                return False
            if command.name == "pause" and not self._paused:
                self._paused = True
                self._sink(Paused(trainer.step))
                if self._checkpointer is not None and self.unsaved_updates:
                    self._save(trainer, "pause")
            elif command.name == "resume" and self._paused:
                self._paused = False
                self._sink(Resumed(trainer.step))
                return False
            elif command.name == "stop":
                return True
            elif command.name == "evaluate":
                record = trainer.evaluate(extra=True)
                if self._on_record:
                    self._record(record)
                self._sink(EvaluationDone(record, trainer.best_step, False))
            elif command.name == "save":
                self._save(trainer, "manual")
            if not self._paused and self._commands.empty():
                return False

    def _save(self, trainer: Trainer, reason: str) -> None:
        if self._checkpointer is None:
            self._sink(Refused("save", "this run has no checkpoint directory"))
            return
        try:
            path = self._checkpointer.save(trainer, reason)
        except MiniGPTError as err:
            self._sink(Refused("save", str(err)))
            return
        self.unsaved_updates = 0
        self._sink(Saved(trainer.step, path, reason))

    def _finish(self, trainer: Trainer, reason: str) -> None:
        if self._checkpointer is not None and self.unsaved_updates:
            self._save(trainer, "stop")
        self._sink(Finished(trainer.step, reason, trainer.state_digest()))


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll until ``predicate`` holds (for tests and scripts driving a controller)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()
