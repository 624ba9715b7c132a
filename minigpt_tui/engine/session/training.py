"""The one training loop: schedule, evaluation, checkpoints and metrics, for a new run, a
resumed run and a warm start alike. ``minigpt-tui train``/``resume`` run it on the main
thread; the app runs it on a thread worker. Both read the same events and send the same
commands.

The rules, in one place:

- A checkpoint is due at an *interval* when an applied update reaches a multiple of
  ``save_every``, and as *best* when a scheduled evaluation after update 1 or later sets a
  new lowest validation loss (an extra evaluation never changes the best step, so it never
  saves as best). Both are saved once per step, after that step's scheduled evaluation, as
  one checkpoint whose reason joins them (``interval+best``).
- Pausing saves when updates were made since the last successful save.
- Stopping (a command, a signal, or the end of the schedule) saves when updates were made
  since the last successful save, so a resumed run stopped before its first update does not
  write its starting checkpoint again.
- A save that fails is reported as :class:`Refused` and counted as not saved; the loop goes on.

Commands take effect at the next update boundary, so pausing, evaluating off schedule and
saving never change the trajectory.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.errors import (
    EvaluationInterrupted,
    MiniGPTError,
    TrainingDiverged,
)
from minigpt_tui.engine.core.threads import (
    MAX_AUTO,
    ThreadTuner,
    initial_threads,
    usable_cores,
)
from minigpt_tui.engine.formats.checkpoint_folder import list_checkpoints
from minigpt_tui.engine.session.events import (
    Command,
    EvaluationDone,
    EventSink,
    Finished,
    FinishReason,
    KEPT_FILES,
    Paused,
    PreparationStopped,
    PreparingReports,
    ProbesScored,
    Refused,
    Resumed,
    RunStarted,
    Saved,
    SaveReason,
    ThreadsChanged,
    UpdateDone,
    report_failures,
)
from minigpt_tui.engine.session.plans import PreparedRun, RunPlan, prepare
from minigpt_tui.engine.session.run_control import RunControl
from minigpt_tui.engine.session.tensorboard import ScalarWriter, open_run_writer
from minigpt_tui.engine.session.watching import Watcher

if TYPE_CHECKING:
    from minigpt_tui.engine.core.threads import ThreadTuner
    from minigpt_tui.engine.session.run_control import RunControl
    from minigpt_tui.engine.training.checkpoints import Checkpointer
    from minigpt_tui.engine.training.trainer import (
        EvaluationRecord,
        Trainer,
        UpdateRecord,
    )

DISCARDED = "not saved: quitting without saving"
NO_RUN_FOLDER = "this run has no checkpoint directory"


class DivergenceWatch:
    """Counts consecutive non-finite updates (a non-finite loss or gradient norm, or an
    update the loss scaler skipped); ``observe`` says when ``patience`` are reached."""

    def __init__(self, patience: int) -> None:
        self.patience = patience
        self.streak = 0
        self.first: UpdateRecord | None = None  # the first update of the current streak

    @property
    def healthy(self) -> bool:
        return self.streak == 0

    def observe(self, record: UpdateRecord) -> bool:
        finite = record.applied and math.isfinite(record.loss) and math.isfinite(record.grad_norm)
        if finite:
            self.streak, self.first = 0, None
            return False
        self.streak += 1
        self.first = self.first or record
        return bool(self.patience) and self.streak >= self.patience


def improved_best(record: EvaluationRecord, best_step: int | None) -> bool:
    """Whether this evaluation set the best step: a scheduled one with a validation loss
    whose step the trainer now holds as best."""
    return not record.extra and record.validation_loss is not None and best_step == record.step


class TrainingSession:
    """One run from preparation to its end. Build it anywhere (importing it loads no torch);
    :meth:`run` prepares the run and trains on the calling thread; :meth:`send` may be called
    from any thread, before or during the run."""

    def __init__(
        self,
        plan: RunPlan | Callable[[], PreparedRun],
        sink: EventSink,
        *,
        start_paused: bool = False,
        stop_requested: Callable[[], bool] | None = None,
        tensorboard: Path | None = None,
    ) -> None:
        self._prepare: Callable[[], PreparedRun] = plan if callable(plan) else (
            lambda: prepare(plan, progress=PreparingReports(self._sink, stopped=self._stop_before_start)))
        self._sink = sink
        self._commands: queue.Queue[Command] = queue.Queue()
        self._paused = start_paused
        self._stop_requested = stop_requested or (lambda: False)
        self._discarding = threading.Event()
        self._stop_sent = threading.Event()  # a stop sent: preparation ends at its next report
        self._control: RunControl | None = None  # the run folder's control file, on its writer
        self.prepared: PreparedRun | None = None
        self.unsaved_updates = 0
        self._threads_now = 1  # the thread count of the updates being made (metrics.jsonl)
        self._record_threads = False  # fast precision records it with each update
        self.write_failure: MiniGPTError | None = None  # the metrics log could not be written
        self._tensorboard = tensorboard  # a TensorBoard folder: the run's scalars go in its RUN folder
        self._scalars: ScalarWriter | None = None
        self._watcher: Watcher | None = None  # samples and head scores, prepared at the first evaluation

    @classmethod
    def for_trainer(cls, build: Callable[[], Trainer], sink: EventSink, *, checkpointer: Checkpointer | None = None,
                    until: int | None = None, start_paused: bool = False) -> TrainingSession:
        """A session over a trainer built by ``build`` with no run folder (no metrics file)."""
        return cls(lambda: PreparedRun(build(), checkpointer=checkpointer, until=until), sink,
                   start_paused=start_paused)

    @property
    def trainer(self) -> Trainer | None:
        return self.prepared.trainer if self.prepared is not None else None

    # -- any thread ---------------------------------------------------------------------
    def send(self, command: Command) -> None:
        if command is Command.STOP:
            self._stop_sent.set()
        self._commands.put(command)

    def _stop_before_start(self) -> bool:
        return self._stop_sent.is_set() or self._stop_requested()

    def discard_saves(self) -> None:
        """Refuse every save from now on (quitting without saving); takes effect at once."""
        self._discarding.set()

    # -- the loop -----------------------------------------------------------------------
    def run_reporting_failures(self) -> None:
        """:meth:`run` for a worker thread: a failure becomes a :class:`Failed` event."""
        report_failures(self.run, self._sink)

    def run(self) -> Finished:
        try:
            prepared = self._prepare()
        except PreparationStopped:  # nothing was written: no run folder, no cache entry
            finished = Finished(0, FinishReason.STOPPED, "")
            self._sink(finished)
            return finished
        self.prepared = prepared
        if prepared.run is not None:  # followed through live.json, steered through control.jsonl

            self._control = RunControl(prepared.run.path)
            self._sink = self._control.watching(self._sink)
        try:
            self._scalars = self._open_scalars(prepared)
            return self._train(prepared)
        except TrainingDiverged:
            if self._control is not None:
                self._control.write_live("failed")
            raise
        finally:
            self._close_scalars()
            prepared.release()  # the run's lock: another process may write to it now

    def _train(self, prepared: PreparedRun) -> Finished:
        import torch  # deferred: imports torch

        from minigpt_tui.engine.training.trainer import (  # deferred: imports torch
            UpdateRecord,
            apply_precision,
            scheduled_work,
        )

        trainer = prepared.trainer
        apply_precision(trainer.config.train)
        self._announce_start(prepared, trainer)
        trainer.interrupted = self._stop_before_start  # a stop ends even a long evaluation at once
        tuner = self._thread_tuner(trainer)
        work = scheduled_work(trainer, prepared.until)
        watch = DivergenceWatch(trainer.config.train.divergence_patience)
        due: list[str] = []
        with torch.no_grad():  # grad mode is per thread; the trainer enables it per update
            while True:
                if self._apply_commands(trainer):
                    return self._finish(trainer, FinishReason.STOPPED)
                try:
                    item = next(work, None)
                except EvaluationInterrupted:  # at the boundary before it: resuming evaluates again
                    return self._finish(trainer, FinishReason.STOPPED)
                if item is None:
                    return self._finish(trainer, FinishReason.COMPLETED)
                self._write_metric(item)
                if isinstance(item, UpdateRecord):
                    due += self._after_update(item, trainer, watch, tuner)
                else:
                    due += self._after_evaluation(item, trainer, watch)
                # One checkpoint per step, after that step's scheduled evaluation.
                if not trainer.evaluation_due():
                    if due:
                        self._save(trainer, "+".join(due))
                    due = []

    def _announce_start(self, prepared: PreparedRun, trainer: Trainer) -> None:
        """The run's summary (when prepared), its start, and its pause when it starts paused."""
        if prepared.summary is not None:
            self._sink(prepared.summary)
        tensors, scalars = trainer.parameter_counts
        steps = trainer.config.train.steps
        self._sink(RunStarted({"parameter_tensors": tensors, "parameter_scalars": scalars}, trainer.step, steps))
        if self._paused:
            self._sink(Paused(trainer.step))

    def _after_update(self, item: Any, trainer: Trainer, watch: DivergenceWatch,
                      tuner: ThreadTuner | None) -> list[str]:
        """Report an update, watch it for divergence, tune threads; the save it makes due."""
        self.unsaved_updates += 1
        self._sink(UpdateDone(item, trainer.config.train.steps))
        if watch.observe(item):
            raise self._diverged(watch)
        if tuner is not None:
            self._tune_threads(tuner, item)
        save_every = trainer.config.train.save_every
        if save_every and item.applied and trainer.step % save_every == 0 and watch.healthy:
            return [SaveReason.INTERVAL]
        return []

    def _after_evaluation(self, item: Any, trainer: Trainer, watch: DivergenceWatch) -> list[str]:
        """Report a scheduled evaluation, score probes, watch; the save it makes due."""
        best_changed = improved_best(item, trainer.best_step)
        self._sink(EvaluationDone(item, trainer.best_step, best_changed))
        self._score_probes(trainer)
        self._watch(trainer)
        if best_changed and trainer.step > 0 and watch.healthy:
            return [SaveReason.BEST]
        return []

    def _apply_commands(self, trainer: Trainer) -> bool:
        """Apply waiting commands; block while paused. True means stop."""
        if self.prepared is not None and self.prepared.agreement is not None:
            return self._apply_agreed_commands(trainer)
        while True:
            outcome = self._apply_next_command(trainer)
            if outcome is not None:
                return outcome

    def _apply_next_command(self, trainer: Trainer) -> bool | None:
        """Take one command (waiting for one while paused) and apply it: True means stop,
        False means train on, None means look for the next command."""
        self._read_control_file()
        if self._stop_requested():
            return True
        try:
            command = self._commands.get(block=self._paused, timeout=0.1 if self._paused else None)
        except queue.Empty:
            return None if self._paused else False
        if command is Command.STOP:
            return True
        self._apply(command, trainer)
        if not self._paused and self._commands.empty():
            return False
        return None

    def _apply_agreed_commands(self, trainer: Trainer) -> bool:
        """Several processes: every rank applies the same commands at the same boundary (rank
        0's, a stop requested anywhere stops all); while paused the ranks agree every 0.1 s."""
        assert self.prepared is not None and self.prepared.agreement is not None
        while True:
            self._read_control_file()
            waiting: list[str] = []
            while not self._commands.empty():
                waiting.append(self._commands.get_nowait().value)
            stop, agreed = self.prepared.agreement.agree(self._stop_requested(), waiting)
            commands = [Command(value) for value in agreed]
            if stop or Command.STOP in commands:
                return True
            for command in commands:
                self._apply(command, trainer)
            if not self._paused:
                return False
            time.sleep(0.1)

    def _read_control_file(self) -> None:
        if self._control is not None:
            for command in self._control.poll(self._sink):
                self._commands.put(command)

    def _apply(self, command: Command, trainer: Trainer) -> None:
        if command is Command.PAUSE and not self._paused:
            self._paused = True
            # Save first: whoever sees "paused" (the app, live.json) may rely on the checkpoint.
            if self._checkpointer is not None and self.unsaved_updates:
                self._save(trainer, SaveReason.PAUSE)
            self._sink(Paused(trainer.step))
        elif command is Command.RESUME and self._paused:
            self._paused = False
            self._sink(Resumed(trainer.step))
        elif command is Command.EVALUATE:
            try:
                record = trainer.evaluate(extra=True)
            except EvaluationInterrupted:
                return  # the stop that interrupted it is seen at this boundary

            self._write_metric(record)
            self._sink(EvaluationDone(record, trainer.best_step, False))
        elif command is Command.SAVE:
            self._save(trainer, SaveReason.MANUAL)

    @property
    def _checkpointer(self) -> Checkpointer | None:
        return self.prepared.checkpointer if self.prepared is not None else None

    def _save(self, trainer: Trainer, reason: str) -> None:
        if self._discarding.is_set():
            self._sink(Refused("save", DISCARDED))
            return
        if self._checkpointer is None:
            self._sink(Refused("save", NO_RUN_FOLDER))
            return
        try:
            path = self._checkpointer.save(trainer, str(reason))
        except MiniGPTError as err:
            self._sink(Refused("save", str(err)))
            return
        self.unsaved_updates = 0
        self._sink(Saved(trainer.step, path, str(reason)))
        for note in self._checkpointer.take_notes():  # folders kept for a user's files
            self._sink(Refused(KEPT_FILES, note))

    def _score_probes(self, trainer: Trainer) -> None:
        """Score the run's probes after a scheduled evaluation. Scoring reads the model in
        evaluation mode and draws from no random stream, so it never changes the trajectory."""
        from minigpt_tui.engine.analysis.probe_scores import (  # deferred: imports torch
            score_probes,
        )

        probes = self.prepared.probes if self.prepared is not None else None
        if probes is None:
            return
        scores = score_probes(trainer.model, trainer.tokenizer, probes)
        event = ProbesScored(trainer.step, probes.source, scores)
        self._write_metric(event)
        self._sink(event)

    def _watch(self, trainer: Trainer) -> None:
        """Samples and head roles after a scheduled evaluation, on the process that writes
        (see session.watching: neither changes the trajectory)."""
        prepared = self.prepared
        if prepared is None or prepared.sample_prompts is None or not trainer.parallel.world.is_writer:
            return
        from minigpt_tui.engine.models.model import (  # deferred: imports torch
            evaluating,
        )

        if self._watcher is None:
            self._watcher = Watcher(trainer.model, trainer.tokenizer, prepared.sample_prompts)
        with evaluating(trainer.model):  # one switch of modes for both
            if prepared.sample_prompts:
                self._write_metric(samples := self._watcher.samples(trainer.step, trainer.config.seeds.sampling))
                self._sink(samples)
            heads = self._watcher.heads(trainer.step)
        if heads is not None:
            self._write_metric(heads)
            self._sink(heads)

    def _write_metric(self, item: Any) -> None:
        run = self.prepared.run if self.prepared is not None else None
        if run is None:
            return
        record = self._metric_record(item)
        try:
            run.append_metric(record)
            self._write_scalars(record)
        except MiniGPTError as err:  # stop at this boundary; the stop saves what it can
            if self.write_failure is None:
                self.write_failure = err
                self._sink(Refused("metrics", f"{err}: stopping the run"))
                self.send(Command.STOP)

    # -- TensorBoard event files: the records above, queued for a thread of their own --------
    def _open_scalars(self, prepared: PreparedRun) -> ScalarWriter | None:
        if self._tensorboard is None or prepared.run is None:  # rank 0 alone writes
            return None
        try:
            return open_run_writer(self._tensorboard, prepared.run.path, prepared.trainer.step,
                                   resumed=prepared.resumed_from is not None)
        except MiniGPTError as err:  # a side output: the run goes on without it
            self._sink(Refused("tensorboard", f"{err}; the run goes on without them"))
            return None

    def _write_scalars(self, record: dict[str, Any]) -> None:
        if self._scalars is None:
            return
        if self._scalars.failure is None:
            self._scalars.write(record)
        else:
            self._close_scalars()

    def _close_scalars(self) -> None:
        """Close the event files; a failure to write them is said once (the run goes on)."""
        scalars, self._scalars = self._scalars, None
        failure = scalars.close() if scalars is not None else None
        if failure is not None:
            self._sink(Refused("tensorboard", f"{failure}; the run goes on without them"))

    def _metric_record(self, item: Any) -> dict[str, Any]:
        """The metrics-log record of an update, an evaluation, probe scores, samples or head roles."""
        if hasattr(item, "to_json") and not isinstance(item, ProbesScored):  # samples, head roles
            return item.to_json()
        if isinstance(item, ProbesScored):
            return {"kind": "probes", "step": item.step, "source": item.source,
                    "probes": [score.to_json() for score in item.scores]}
        if hasattr(item, "exact_fields"):
            record = {"kind": "update", **item.exact_fields(), "seconds": item.seconds,
                      "tokens_per_second": item.tokens_per_second}
            if self._record_threads:  # fast precision; exact precision always runs one thread
                record["threads"] = self._threads_now
            return record
        return {"kind": "evaluation", **asdict(item)}

    def _thread_tuner(self, trainer: Trainer) -> ThreadTuner | None:
        """An automatic run's tuner (``train.threads = 0`` outside exact precision); with
        several processes each takes its share of the cores."""
        import torch  # deferred: imports torch


        train = trainer.config.train
        self._record_threads = not train.precision_kind.bitwise
        if not train.effective_threads.auto:
            self._threads_now = torch.get_num_threads()
            return None
        share = max(1, usable_cores() // trainer.parallel.world_size)
        self._threads_now = min(initial_threads(), share)  # the cores idle now, this process's share
        torch.set_num_threads(self._threads_now)
        if self._threads_now < min(share, MAX_AUTO):  # said once: why the run starts with fewer
            self._sink(ThreadsChanged(trainer.step, min(share, MAX_AUTO), self._threads_now,
                                      "another program is using a core"))
        return ThreadTuner(self._threads_now, cores=share)

    def _tune_threads(self, tuner: ThreadTuner, record: UpdateRecord) -> None:
        import torch  # deferred: imports torch

        change = tuner.observe(record.step, record.seconds)
        if change is None:
            return
        torch.set_num_threads(change.after)
        self._threads_now = change.after
        if change.reason not in ("trying", "back"):  # trials are not news; a kept change is
            self._sink(ThreadsChanged(change.step, change.before, change.after, change.reason))

    def _diverged(self, watch: DivergenceWatch) -> TrainingDiverged:
        """The stop of a diverged run: nothing is saved (the weights may be lost already)."""
        first = watch.first
        assert first is not None
        attempted = first.step if first.applied else first.step + 1
        run = self.prepared.run if self.prepared is not None else None
        folder = run.path / "checkpoints" if run is not None else getattr(self._checkpointer, "checkpoints_dir", None)
        good = [info.step for info in list_checkpoints(folder) if info.step < attempted] if folder else []
        last_good = f"the last good checkpoint is step {good[-1]}" if good else "no checkpoint was saved before it"
        self.unsaved_updates = 0
        return TrainingDiverged(
            f"training diverged at update {attempted} (loss {first.loss:.4g}, lr {first.lr:.3g}; "
            f"{watch.streak} non-finite updates in a row); {last_good}"
        )

    def _finish(self, trainer: Trainer, reason: FinishReason) -> Finished:
        if self.unsaved_updates and self._checkpointer is not None:
            self._save(trainer, SaveReason.STOP)
        self._close_scalars()
        finished = Finished(trainer.step, str(reason), trainer.state_digest())
        self._sink(finished)
        return finished
