"""Following a run that another process writes (a headless ``train``, a ``torchrun`` job, a
run on another machine over a shared filesystem): its ``metrics.jsonl``, ``live.json`` and
checkpoints become the same typed events a training session sends, and commands go to the
trainer through the run's control file. It has the session's face (``send``,
``run_reporting_failures``), so the Training screen shows an attached run as its own.
No torch.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.config import RunConfig
from minigpt_tui.engine.core.errors import ConfigError, MiniGPTError
from minigpt_tui.engine.formats.bounded_json import JSONRefused, load_json
from minigpt_tui.engine.session.events import (
    Command,
    EvaluationDone,
    EventSink,
    Failed,
    Finished,
    FinishReason,
    Paused,
    Refused,
    Resumed,
    RunStarted,
    RunSummary,
    Saved,
    UpdateDone,
    report_failures,
)
from minigpt_tui.engine.session.history import HistoricEvaluation, HistoricUpdate
from minigpt_tui.engine.session.run_control import (
    LIVE_FILE,
    UNREADABLE,
    LiveState,
    TailReader,
    is_run_folder,
    read_live,
    send_command,
)

ENDED_STATES = ("finished", "stopped", "failed", "ended")
MAX_METRICS_LINE = 1 << 16  # a metrics record is a few hundred bytes


def _metrics_record(line: str) -> dict[str, Any] | None:
    """A metrics line as a record with a valid step; None for a torn, foreign or bad line."""
    try:
        record = load_json(line, 8) if len(line) <= MAX_METRICS_LINE else None
    except JSONRefused:
        return None  # a torn line left by a crash: the lines after it still count
    if not isinstance(record, dict) or not isinstance(record.get("step"), int):
        return None
    step = record["step"]
    if isinstance(step, bool) or not 0 <= step < 1 << 62:
        return None
    return record


def _finite(value: Any) -> float | None:
    """A metric as a number the screen can draw: NaN, infinities and other types are gaps."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value) if abs(value) < 1e308 else math.inf
    return number if math.isfinite(number) else None


def _count(record: Any, key: str) -> int:
    """A count from the run's identities.json: 0 when missing or not a whole number."""
    value = record.get(key) if isinstance(record, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def live_or_missing(run_dir: Path) -> LiveState:
    """The run's live state; a missing live.json reads as a live state that cannot be read
    (the writer may not have made it yet, or it was removed), never as the run's end."""
    live = read_live(run_dir)
    return live if live is not None else LiveState(UNREADABLE, 0, 0, False, reason=f"{LIVE_FILE} is missing")


def attached_config(run_dir: Path) -> Any:
    """The run config of a run folder (refused in one line when it is not a run)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir() or not is_run_folder(run_dir):
        raise ConfigError(f"{run_dir} is not a run folder (it has no config.json)")
    try:
        return RunConfig.from_dict(json.loads((run_dir / "config.json").read_text("utf-8")))
    except (OSError, ValueError, TypeError) as err:
        raise ConfigError(f"{run_dir}/config.json cannot be read as a run config ({type(err).__name__})") from None


class RunFollower:
    """A run folder followed on a worker thread: every ``interval`` seconds (the screen's
    refresh period, never faster) new complete metrics lines, live-state changes and new
    checkpoints become events. Ends when the writer ends (or is gone) or on :meth:`detach`:
    quitting the app detaches it, never stopping the run."""

    unsaved_updates = 0

    def __init__(self, run_dir: Path, sink: EventSink, *, interval: float = 0.2,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.run_dir = Path(run_dir)
        self._sink = sink
        self.interval = interval
        self._sleep = sleep
        self._detached = threading.Event()
        self._metrics = TailReader(self.run_dir / "metrics.jsonl")
        self._checkpoints: set[str] = set()
        self._best_step: int | None = None
        self._best_validation: float | None = None
        self._last_step = 0  # the last update the metrics file holds
        self._plan: int | None = None  # the run's planned updates: a record beyond them is ignored
        self._outside_noted = False  # a record outside the plan was noted once
        self.live: LiveState | None = None  # as last read by the worker (the screen reads this, not the file)

    # -- the screen's side (any thread) --------------------------------------------------------
    def send(self, command: Command) -> None:
        """Write ``command`` to the run's control file; a run that is not listening says so."""
        try:
            send_command(self.run_dir, command)
        except MiniGPTError as err:
            self._sink(Refused(command.value, str(err)))

    def discard_saves(self) -> None:
        """Nothing to discard: the writer owns its saves."""

    def detach(self) -> None:
        self._detached.set()

    # -- the worker ---------------------------------------------------------------------------
    def run_reporting_failures(self) -> None:
        report_failures(self.follow, self._sink)

    def follow(self) -> None:
        config = attached_config(self.run_dir)
        steps = config.train.steps
        self._sink(self._summary(config))
        self._checkpoints = set(self._checkpoint_names())
        live = self.live = live_or_missing(self.run_dir)
        self._follow_plan(steps, live)
        self._emit_metrics(steps)  # the history so far
        state = self._announce_start(live, steps)
        while True:
            if self._finish_if_ended(state, live):
                return
            if self._detached.wait(self.interval):
                return
            live = self.live = live_or_missing(self.run_dir)
            self._follow_plan(steps, live)
            self._emit_metrics(steps)
            self._emit_saves()
            if live.state != state:
                self._report_change(state, live.state, live)
            state = live.state

    def _follow_plan(self, steps: int, live: LiveState) -> None:
        """The updates the run plans: its config's, or more when its writer says so (a
        resume that extends it)."""
        self._plan = max(steps, live.steps if live.state != UNREADABLE else 0, self._plan or 0)

    def _live_step(self, live: LiveState | None) -> int:
        """The update live.json names, when it lies within the run's plan (else 0)."""
        if live is None or (self._plan is not None and live.step > self._plan):
            return 0
        return live.step

    def _announce_start(self, live: LiveState | None, steps: int) -> str:
        """The run's start (and its pause, or an unreadable live state) as first read; its state."""
        start = max(self._last_step, self._live_step(live))
        self._sink(RunStarted({}, start, steps))
        state = live.state if live is not None else "ended"
        if state == "paused":
            self._sink(Paused(start))
        elif state == UNREADABLE and live is not None:
            self._sink(Refused("live status", f"{live.text}; following {self.run_dir.name} by its metrics"))
        return state

    def _report_change(self, state: str, new_state: str, live: LiveState) -> None:
        """A change of the live state from ``state`` to ``new_state``, as an event."""
        if new_state == UNREADABLE:  # the run may well go on: never read as its end
            self._sink(Refused("live status", f"{live.text}; still following {self.run_dir.name}"))
        elif new_state == "paused":
            self._sink(Paused(max(self._live_step(live), self._last_step)))
        elif new_state == "running" and state == "paused":
            self._sink(Resumed(max(self._live_step(live), self._last_step)))

    def _finish_if_ended(self, state: str, live: LiveState | None) -> bool:
        if state not in ENDED_STATES:
            return False
        self._emit_metrics(0)
        step = max(self._last_step, self._live_step(live))
        reason = FinishReason.COMPLETED if state == "finished" else FinishReason.STOPPED
        if state == "failed":
            self._sink(Failed(f"the run {self.run_dir.name} failed in the process that trained it"))
        else:
            self._sink(Finished(step, str(reason), ""))
        return True

    def _emit_metrics(self, steps: int) -> None:
        for line in self._metrics.read_lines():
            record = _metrics_record(line)
            if record is not None:
                self._emit_record(record, steps)

    def _emit_record(self, record: dict[str, Any], steps: int) -> None:
        """One metrics record with a valid step: an update or an evaluation as its event; a
        step beyond the run's plan is ignored (noted once), never taken as the run's end."""
        step = record["step"]
        if self._plan is not None and step > self._plan:
            if not self._outside_noted:
                self._outside_noted = True
                self._sink(Refused("metrics", f"a metrics.jsonl record at update {step:,} lies outside the run's "
                                              f"plan of {self._plan:,} updates; such records are ignored"))
            return
        if record.get("kind") == "update":
            self._last_step = max(self._last_step, step)
            scale = _finite(record.get("loss_scale"))
            update = HistoricUpdate(
                step=step, loss=_finite(record.get("loss")), lr=_finite(record.get("lr")),
                grad_norm=_finite(record.get("grad_norm")), loss_scale=1.0 if scale is None else scale,
                tokens_per_second=_finite(record.get("tokens_per_second")),
                applied=record.get("applied", True) is not False)
            self._sink(UpdateDone(update, steps))  # type: ignore[arg-type]
        elif record.get("kind") == "evaluation":
            evaluation = HistoricEvaluation(step=step, train_loss=_finite(record.get("train_loss")),
                                            validation_loss=_finite(record.get("validation_loss")),
                                            extra=record.get("extra") is True)
            self._sink(EvaluationDone(evaluation, *self._best_after(evaluation)))  # type: ignore[arg-type]

    def _best_after(self, evaluation: HistoricEvaluation) -> tuple[int | None, bool]:
        value = evaluation.validation_loss
        if evaluation.extra or value is None or evaluation.step == 0:
            return self._best_step, False
        if self._best_validation is None or value < self._best_validation:
            self._best_validation, self._best_step = value, evaluation.step
            return self._best_step, True
        return self._best_step, False

    def _checkpoint_names(self) -> list[str]:
        folder = self.run_dir / "checkpoints"
        try:
            return sorted(p.name for p in folder.iterdir() if p.name.startswith("step-") and (p / "manifest.json").is_file())
        except OSError:
            return []

    def _emit_saves(self) -> None:
        for name in self._checkpoint_names():
            if name in self._checkpoints:
                continue
            self._checkpoints.add(name)
            path = self.run_dir / "checkpoints" / name
            try:
                manifest = json.loads((path / "manifest.json").read_text("utf-8"))
                self._sink(Saved(int(manifest["step"]), path, str(manifest.get("reason", ""))))
            except (OSError, ValueError, KeyError, TypeError):
                continue

    def _summary(self, config: Any) -> RunSummary:
        corpus, tokenizer = self._identities()
        live = read_live(self.run_dir)
        tensors, scalars, start = (
            (live.parameter_tensors, live.parameter_scalars, live.step) if live is not None else (0, 0, 0)
        )
        return RunSummary(
            run_name=self.run_dir.name, run_dir=self.run_dir, preset=config.preset,
            parameter_tensors=tensors, parameter_scalars=scalars,
            corpus_source=str(corpus.get("source", config.corpus.source)), corpus_identity=str(corpus.get("identity", "")),
            train_records=_count(corpus, "train_records"),
            validation_records=_count(corpus, "validation_records"),
            # A stream run is counted in tokens, as the process training it shows it.
            corpus_mode=str(corpus.get("mode", config.corpus.mode)),
            train_tokens=_count(corpus, "train_tokens"),
            validation_tokens=_count(corpus, "validation_tokens"),
            tokenizer_identity=str(tokenizer.get("identity", "")), vocab_size=_count(tokenizer, "vocab_size"),
            merges=_count(tokenizer, "merges"), precision=config.train.precision, dtype=config.dtype_name,
            threads=config.train.effective_threads.count, steps=config.train.steps,
            start_step=start)

    def _identities(self) -> tuple[Any, Any]:
        """The corpus and tokenizer parts of the run's identities.json ({} when unreadable)."""
        try:
            identities = json.loads((self.run_dir / "identities.json").read_text("utf-8"))
        except (OSError, ValueError):
            identities = {}
        parts = [identities.get(part) if isinstance(identities, dict) else None for part in ("corpus", "tokenizer")]
        corpus, tokenizer = (part if isinstance(part, dict) else {} for part in parts)
        return corpus, tokenizer
