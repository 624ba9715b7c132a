"""The run monitor: what the UI knows of the run on the Training screen, and how each typed
session event shows on the screen's widgets (summary, progress, loss table, loss plot, probes
table and event log).

The screen drains the run's feed (paced by a :class:`~minigpt_tui.widgets.throttle.Throttle`) and hands the events to a
:class:`RunMonitor`; one handler per event type changes the run's state and the widgets. The
monitor runs no worker: reading history and notifying go through callbacks the screen gives it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.message import Message

from minigpt_tui.engine.core.threads import ThreadChange, thread_hint
from minigpt_tui.engine.session import events as engine
from minigpt_tui.engine.session.attach import RunFollower
from minigpt_tui.engine.session.events import HeadsScored, SamplesTaken
from minigpt_tui.engine.session.history import LoadedCurve, RunHistory
from minigpt_tui.messages import RunFeed, RunSummary
from minigpt_tui.widgets.event_log import EventLog
from minigpt_tui.widgets.loss_plot import LossPlot
from minigpt_tui.widgets.loss_table import LossTable
from minigpt_tui.widgets.probes_table import ProbesTable
from minigpt_tui.widgets.run_progress import RunProgress
from minigpt_tui.widgets.run_summary import RunSummaryView
from minigpt_tui.widgets.watch_panel import WatchPanel

if TYPE_CHECKING:
    from minigpt_tui.engine.session.plans import RunPlan
    from minigpt_tui.engine.session.training import TrainingSession

ACTIVE_STATES = ("starting", "running", "paused", "stopping")


def run_key_enabled(action: str, state: str) -> bool | None:
    """Whether a Training screen key acts on a run in ``state`` ("idle" without a run):
    True, False (hidden), or None (save, evaluate and stop, shown dimmed while no run is
    active). Keys that are not about the run are always enabled."""
    if action == "start":
        return state not in ACTIVE_STATES
    if action == "pause":
        return state in ("starting", "running")
    if action == "resume":
        return state == "paused"
    if action in ("save", "evaluate", "stop"):
        return True if state in ("starting", "running", "paused") else None
    return True


@dataclass
class AppliedEvents:
    """What one drain of the feed changed: rows for the table, and whether the state did."""

    rows: list[tuple[Any, int | None]] = field(default_factory=list)
    state_changed: bool = False


@dataclass
class ActiveRun:
    """The run on screen and what the UI knows of it."""

    session: TrainingSession | RunFollower  # a run this process trains, or one it follows
    feed: RunFeed
    config: Any
    state: str = "starting"
    summary: RunSummary | None = None
    step: int = 0
    steps: int = 0
    final_digest: str | None = None
    events_seen: dict[str, int] = field(default_factory=dict)
    # Saves the user asked for with `s` whose outcome is still to come: their refusal is
    # notified; automatic saves (interval, best, pause, stop) are refused only in the log.
    requested_saves: int = 0
    saved_step: int | None = None  # the update of the newest checkpoint (a resumed run's: the one it left)
    refusals_logged: set[str] = field(default_factory=set)
    probe_matches: int | None = None  # the event log notes when the number of matching probes changes
    induction_shown: tuple[int, int, int] | None = None  # the strongest induction head last noted
    sample_shown: str | None = None  # the first prompt's greedy continuation last noted

    @classmethod
    def training(cls, plan: RunPlan, config: Any, post: Callable[[Message], Any]) -> ActiveRun:
        """A run this process trains (a new one or a resumed one, as ``plan`` says)."""
        from minigpt_tui.engine.session.training import TrainingSession  # deferred: off the first frame

        feed = RunFeed(post)
        return cls(TrainingSession(plan, feed), feed, config, steps=config.train.steps)

    @classmethod
    def following(cls, run_dir: Path, config: Any, post: Callable[[Message], Any], interval: float) -> ActiveRun:
        """A run another process writes, read every ``interval`` seconds; commands go through
        its control file."""
        feed = RunFeed(post)
        follower = RunFollower(Path(run_dir), feed, interval=interval)
        return cls(follower, feed, config, steps=config.train.steps)

    @property
    def attached(self) -> bool:
        """Another process trains it: this one joined it on the way, and never knows its digest."""
        return isinstance(self.session, RunFollower)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def run_dir(self) -> Path | None:
        return self.summary.run_dir if self.summary else None

    def end_for_exit(self, *, save: bool) -> bool:
        """Ask the session to stop (without its stop save unless ``save``); an attached run is
        detached from instead and goes on. True when there is nothing to wait for."""
        if isinstance(self.session, RunFollower):
            self.session.detach()
            return True
        if not save:
            self.session.discard_saves()
        self.session.send(engine.Command.STOP)
        self.state = "stopping"
        return False


# Refused events that report a condition rather than a refused action.
NOTICES = frozenset({"live status", "metrics", "token cache", engine.KEPT_FILES})


@dataclass(frozen=True)
class RunWidgets:
    """The widgets a run shows on."""

    summary: RunSummaryView
    progress: RunProgress
    table: LossTable
    probes: ProbesTable
    plot: LossPlot
    log: EventLog
    watch: WatchPanel

    @classmethod
    def build(cls, *, clock: Callable[[], float], wall_clock: Callable[[], float], table_refreshes_per_second: float,
              plot_redraws_per_second: float) -> RunWidgets:
        """The widgets, with the ids and border titles the Training screen's styles know them by."""
        summary, progress = RunSummaryView(id="summary"), RunProgress(clock=clock, id="progress")
        table = LossTable(clock=clock, max_refreshes_per_second=table_refreshes_per_second, id="loss-table")
        table.border_title = "Losses"
        probes = ProbesTable(id="probes-table")
        probes.border_title = "Probes"
        plot = LossPlot(clock=clock, max_redraws_per_second=plot_redraws_per_second, id="loss-plot")  # titled by its mode
        log = EventLog(wall_clock=wall_clock, id="events")
        log.border_title = "Events"
        return cls(summary, progress, table, probes, plot, log, WatchPanel(id="watch-panel"))


class RunMonitor:
    """Applies a run's events to its widgets.

    ``notify`` is the screen's notification; ``show_state`` shows the run's state (and
    refreshes the key bindings); ``display_path`` shortens a path for showing;
    ``load_history`` reads a resumed run's earlier metrics off the UI thread.
    """

    def __init__(self, widgets: RunWidgets, *, notify: Callable[..., Any], show_state: Callable[[], None],
                 display_path: Callable[[Path], str], load_history: Callable[[RunFeed, Path, int], Any]) -> None:
        self.widgets = widgets
        self._notify = notify
        self._show_state = show_state
        self._display_path = display_path
        self._load_history = load_history
        self._handlers: dict[type, Callable[[ActiveRun, Any, AppliedEvents], None]] = {
            engine.Preparing: self._on_preparing,
            engine.UpdateDone: self._on_update_done,
            engine.EvaluationDone: self._on_evaluation_done,
            engine.ProbesScored: self._on_probes_scored,
            SamplesTaken: self._on_samples,
            HeadsScored: self._on_heads,
            RunSummary: self._on_run_summary,
            engine.RunStarted: self._on_run_started,
            engine.Paused: self._on_paused,
            engine.Resumed: self._on_resumed,
            engine.Saved: self._on_saved,
            engine.ThreadsChanged: self._on_threads_changed,
            engine.Refused: self._on_refused,
            engine.Finished: self._on_finished,
            engine.Failed: self._on_failed,
        }

    def show_new_run(self, config: Any, kind: str, note: str) -> None:
        """Clear the last run's figures and show the configuration of the one starting."""
        widgets = self.widgets
        widgets.table.reset()
        widgets.plot.reset()
        widgets.plot.set_probe(None)
        widgets.probes.reset()
        widgets.watch.reset()
        widgets.summary.show_pending(config)
        widgets.progress.show_pending(config.train.steps)
        widgets.log.record(kind, note)

    def apply(self, run: ActiveRun, events: list[Any]) -> AppliedEvents:
        """Apply a drain of ``run``'s feed; a pause or the end of the run shows everything at once."""
        applied = AppliedEvents()
        for event in events:
            kind = type(event).__name__
            run.events_seen[kind] = run.events_seen.get(kind, 0) + 1
            handler = self._handlers.get(type(event))
            if handler is not None:
                handler(run, event, applied)
        widgets = self.widgets
        if applied.rows:
            widgets.table.queue_records(applied.rows)
            widgets.plot.request_redraw()
        widgets.progress.advance(run.step)
        if applied.state_changed:
            self._show_state()
        else:
            widgets.progress.refresh_figures()
        if applied.state_changed and run.state != "running":
            # Paused, finished or failed: show everything now rather than at the next tick.
            widgets.table.flush()
            widgets.plot.redraw()
        return applied

    def show_history(self, history: RunHistory) -> None:
        """A resumed run's metrics from before it was resumed, put ahead of its live ones."""
        records = sorted([(u, None) for u in history.updates] + [(e, history.best_step) for e in history.evaluations],
                         key=lambda item: (item[0].step, hasattr(item[0], "train_loss")))
        self.widgets.table.prepend_records(records)
        updates, evaluations = history.updates, history.evaluations
        self.widgets.plot.prepend_history(
            _points(updates, "loss"), _points(evaluations, "train_loss"), _points(evaluations, "validation_loss"),
            lr=_points(updates, "lr"), grad_norm=_points(updates, "grad_norm"))
        self.widgets.probes.prepend_history(history.probes)
        self.widgets.log.record(
            "resumed", f"history: {len(history.updates)} updates, {len(history.evaluations)} evaluations before")

    def show_probe(self, name: str | None) -> None:
        """Draw probe ``name``'s probability so far on the plot (``None`` draws none)."""
        points = [(p.step, p.probability) for p in self.widgets.probes.history.get(name, ())] if name else []
        self.widgets.plot.set_probe(name, points)

    def show_overlay(self, curve: LoadedCurve | None) -> None:
        """Overlay another run's loss curves on the plot (``None`` removes the overlay)."""
        self.widgets.plot.set_overlay(curve)
        if curve is None:
            self.widgets.log.record("overlay", "removed")
        else:
            self.widgets.log.record(
                "overlay", f"{curve.name}: {len(curve.updates)} updates, {len(curve.train)} evaluations")

    def show_failure(self, message: str) -> None:
        self.widgets.log.record("failed", message)
        self._notify(message, title="training failed", severity="error", markup=False)

    def show_export(self, target: Path) -> None:
        self.widgets.log.record("exported", self._display_path(target))
        self._notify(str(target), title="metrics exported", markup=False)

    def run_path(self, run: ActiveRun, path: Path) -> str:
        """Paths inside the run's own directory are shown relative to it (the summary names the run)."""
        if run.run_dir is not None:
            try:
                return str(Path(path).relative_to(run.run_dir))
            except ValueError:
                pass
        return self._display_path(path)

    # -- one handler per event type ------------------------------------------------------
    def _on_preparing(self, run: ActiveRun, event: engine.Preparing, applied: AppliedEvents) -> None:
        self.widgets.progress.show_preparing(event.label, event.done, event.total)

    def _on_update_done(self, run: ActiveRun, event: engine.UpdateDone, applied: AppliedEvents) -> None:
        record = event.record
        applied.rows.append((record, None))
        self.widgets.plot.add_update(record.step, record.loss, record.lr, record.grad_norm)
        run.step = record.step

    def _on_evaluation_done(self, run: ActiveRun, event: engine.EvaluationDone, applied: AppliedEvents) -> None:
        record = event.record
        applied.rows.append((record, event.best_step))
        self.widgets.plot.add_evaluation(record.step, record.train_loss, record.validation_loss)
        log = self.widgets.log
        if record.extra:
            train = f"{record.train_loss:.4f}" if record.train_loss is not None else "?"
            log.record("extra", f"evaluation at update {record.step}: train {train}"
                       + _validation_text(record.validation_loss) + " (does not change the best step)")
        elif event.best_changed:
            log.record("best", f"best validation loss {record.validation_loss:.4f} at update {record.step}")

    def _on_probes_scored(self, run: ActiveRun, event: engine.ProbesScored, applied: AppliedEvents) -> None:
        self.widgets.probes.add_scores(event.step, event.scores)
        if event.matched != run.probe_matches and (run.probe_matches is not None or event.matched):
            self.widgets.log.record("probes", f"update {event.step}: {event.matched} of {len(event.scores)} match")
        run.probe_matches = event.matched

    def _on_samples(self, run: ActiveRun, event: SamplesTaken, applied: AppliedEvents) -> None:
        """The first prompt's greedy continuation in the event log: output becoming text."""
        self.widgets.watch.add_samples(event)
        greedy = event.samples[0].greedy if event.samples else None
        if greedy is not None and greedy != run.sample_shown:  # noted when what it writes changes
            self.widgets.log.record("sample", f"update {event.step}: {event.samples[0].prompt} → {greedy!r}")
        run.sample_shown = greedy

    def _on_heads(self, run: ActiveRun, event: HeadsScored, applied: AppliedEvents) -> None:
        """The strongest induction head, when it changes or its score moves by 0.05."""
        self.widgets.watch.add_heads(event)
        top = event.top("induction")
        shown = (top.layer, top.head, round(top.induction / 0.05))
        if shown != run.induction_shown:
            self.widgets.log.record("heads", f"update {event.step}: induction strongest in block {top.layer} "
                                    f"head {top.head} ({top.induction:.2f})")
        run.induction_shown = shown

    def _on_run_summary(self, run: ActiveRun, event: RunSummary, applied: AppliedEvents) -> None:
        run.summary = event
        run.step = event.start_step
        if event.resumed_from is not None:
            run.saved_step = event.start_step
        self.widgets.summary.show_run(event)
        if event.resumed_from is not None and event.run_dir is not None:
            self._load_history(run.feed, event.run_dir, event.start_step)

    def _on_run_started(self, run: ActiveRun, event: engine.RunStarted, applied: AppliedEvents) -> None:
        run.state, applied.state_changed = "running", True
        run.step, run.steps = event.step, event.steps
        self.widgets.progress.begin(event.step, event.steps)
        if run.attached:
            self.widgets.log.record("following", f"from update {event.step} of {event.steps}")
        else:
            self.widgets.log.record("started", f"update {event.step} of {event.steps}")

    def _on_paused(self, run: ActiveRun, event: engine.Paused, applied: AppliedEvents) -> None:
        run.state, applied.state_changed = "paused", True
        self.widgets.progress.run_clock.pause()
        self.widgets.log.record("paused", f"after update {event.step}")

    def _on_resumed(self, run: ActiveRun, event: engine.Resumed, applied: AppliedEvents) -> None:
        run.state, applied.state_changed = "running", True
        self.widgets.progress.run_clock.resume()
        self.widgets.log.record("resumed", f"at update {event.step}")

    def _on_saved(self, run: ActiveRun, event: engine.Saved, applied: AppliedEvents) -> None:
        if event.reason == engine.SaveReason.MANUAL and run.requested_saves:
            run.requested_saves -= 1
        run.saved_step = event.step
        self.widgets.log.record("saved", f"update {event.step} ({event.reason}): {self.run_path(run, event.path)}")

    def _on_threads_changed(self, run: ActiveRun, event: engine.ThreadsChanged, applied: AppliedEvents) -> None:
        change = ThreadChange(event.step, event.before, event.after, event.reason)
        self.widgets.log.record("threads", f"at update {event.step}, {thread_hint(change)}")

    def _on_refused(self, run: ActiveRun, event: engine.Refused, applied: AppliedEvents) -> None:
        log = self.widgets.log
        asked = event.action == "save" and run.requested_saves > 0
        if asked:
            run.requested_saves -= 1
        if event.action in NOTICES:  # not a refused action: something the run does without
            log.record("note", f"{event.action}: {event.message}")
            self._notify(event.message, title=event.action, severity="warning", markup=False)
        elif asked or event.action != "save":
            log.record("refused", f"{event.action}: {event.message}")
            self._notify(event.message, title=f"{event.action} refused", severity="warning", markup=False)
        elif event.message not in run.refusals_logged:
            run.refusals_logged.add(event.message)
            log.record("refused", f"automatic save: {event.message}")

    def _on_finished(self, run: ActiveRun, event: engine.Finished, applied: AppliedEvents) -> None:
        run.state = "finished" if event.reason == engine.FinishReason.COMPLETED else "stopped"
        applied.state_changed = True
        run.final_digest = event.state_digest
        self.widgets.progress.end_preparing()
        self.widgets.progress.run_clock.pause()
        if run.attached:  # the digest stays with the process that trained it
            self.widgets.log.record(run.state, f"at update {event.step}")
            return
        if not event.state_digest:  # stopped while preparing: no trainer was built
            self.widgets.log.record(run.state, "while preparing; nothing was written")
            return
        self.widgets.log.record(run.state, f"at update {event.step}; state digest {event.state_digest[:16]}…")

    def _on_failed(self, run: ActiveRun, event: engine.Failed, applied: AppliedEvents) -> None:
        run.state, applied.state_changed = "failed", True
        self.widgets.progress.end_preparing()
        self.widgets.progress.run_clock.pause()
        self.show_failure(event.message)


def _points(records: Any, field: str) -> list[tuple[int, float]]:
    """(step, value) of the records whose ``field`` holds a value."""
    return [(r.step, value) for r in records if (value := getattr(r, field)) is not None]


def _validation_text(value: float | None) -> str:
    return f", validation {value:.4f}" if value is not None else ""
