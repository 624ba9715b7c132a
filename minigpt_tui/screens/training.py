"""The Training screen: a run's summary, progress, live loss table and plot, and events.

The run's training session works on a thread worker. Its events land in a :class:`RunFeed`; this
screen drains the feed at most ``REFRESHES_PER_SECOND`` times a second, so a run making
hundreds of updates a second costs the UI thread (and the GIL) a few small refreshes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Header
from textual.worker import Worker, WorkerState

from minigpt_tui.messages import CurveLoaded, EngineEventsReady, HistoryLoaded, RunFeed, RunSummary
from minigpt_tui.engine.session import events as engine
from minigpt_tui.engine.session.events import Command
from minigpt_tui.engine.session.plans import NewRun, ResumeRun, RunPlan
from minigpt_tui.engine.session.run_store import RunStore
from minigpt_tui.engine.session.training import TrainingSession
from minigpt_tui.widgets.event_log import EventLog
from minigpt_tui.screens.help_texts import TRAINING_HELP
from minigpt_tui.widgets.key_bar import KeyBar
from minigpt_tui.widgets.loss_plot import LossPlot
from minigpt_tui.widgets.loss_table import LossTable
from minigpt_tui.widgets.probes_table import ProbesTable
from minigpt_tui.widgets.run_progress import RunProgress
from minigpt_tui.widgets.run_summary import RunSummaryView

if TYPE_CHECKING:
    from minigpt_tui.app import MiniGPTApp

ACTIVE_STATES = ("starting", "running", "paused", "stopping")
IDLE_RUN_KEYS = {"s": "save", "e": "evaluate", "x": "stop"}  # dimmed while no run is active; pressed, they say why


@dataclass
class _AppliedEvents:
    """What one drain of the feed changed: rows for the table, and whether the state did."""

    rows: list[tuple[Any, int | None]] = field(default_factory=list)
    state_changed: bool = False


@dataclass
class ActiveRun:
    """The run on screen and what the UI knows of it."""

    session: TrainingSession
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
    refusals_logged: set[str] = field(default_factory=set)
    probe_matches: int | None = None  # the event log notes when the number of matching probes changes

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def run_dir(self) -> Path | None:
        return self.summary.run_dir if self.summary else None


class TrainingScreen(Screen):
    HELP = TRAINING_HELP
    HELP_TITLE = "Training"
    WIDE_FROM = 120
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (WIDE_FROM, "-wide")]
    # How often a running run's events reach the screen. Every refresh takes the GIL from
    # training for a moment; measured in tmux on mini (benchmarks/bench_app.py), 10 / 4 / 1
    # cost about 15% of the training speed, 5 / 2 / 0.5 about 5%. A pause or the end of
    # the run shows everything at once.
    REFRESHES_PER_SECOND = 5.0  # progress line and event log
    TABLE_REFRESHES_PER_SECOND = 2.0
    PLOT_REDRAWS_PER_SECOND = 0.5

    BINDINGS = [
        Binding("space", "start", "Start"),
        Binding("space", "pause", "Pause"),
        Binding("space", "resume", "Resume"),
        Binding("s", "save", "Save"),
        Binding("e", "evaluate", "Eval"),
        Binding("x", "stop", "Stop"),
        Binding("n", "new_run", "New run", show=False),
        Binding("o", "overlay", "Overlay", show=False),
        Binding("w", "export_csv", "Export CSV", show=False),
        Binding("v", "toggle_view", "Table/Plot", show=False),
        Binding("p", "toggle_probes", "Probes", show=False),
    ]
    PALETTE_COMMANDS = (
        ("New run", "Configure and start a new training run (n)", "new_run"),
        ("Overlay a run", "Overlay another run's loss curves on the plot (o)", "overlay"),
        ("Export metrics to CSV", "Write this run's metrics.csv (w)", "export_csv"),
    )

    def __init__(self) -> None:
        super().__init__()
        self.run: ActiveRun | None = None
        self._last_drain = -1e9
        self._drain_timer: Timer | None = None
        self._exit_after_run = False

    @property
    def mini_app(self) -> "MiniGPTApp":
        return self.app  # type: ignore[return-value]

    # -- layout --------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        clock = self.mini_app.clock
        yield Header()
        yield RunSummaryView(id="summary")
        yield RunProgress(clock=clock, id="progress")
        with Horizontal(id="losses"):
            table = LossTable(clock=clock, max_refreshes_per_second=self.TABLE_REFRESHES_PER_SECOND,
                              id="loss-table")
            table.border_title = "Losses"
            yield table
            probes = ProbesTable(id="probes-table")
            probes.border_title = "Probes"
            yield probes
            plot = LossPlot(clock=clock, max_redraws_per_second=self.PLOT_REDRAWS_PER_SECOND, id="loss-plot")
            plot.border_title = "Loss"
            yield plot
        log = EventLog(wall_clock=self.mini_app.wall_clock, id="events")
        log.border_title = "Events"
        yield log
        yield KeyBar()

    def on_mount(self) -> None:
        self.sub_title = "Training"
        self.query_one(RunSummaryView).show_pending(self.mini_app.next_config)
        self.query_one(RunProgress).show_pending(self.mini_app.next_config.train.steps)
        self._update_view_hint()

    def on_screen_resume(self) -> None:
        self.sub_title = "Training"

    # -- bindings ------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        run = self.run
        state = run.state if run else "idle"
        if action == "start":
            return state not in ACTIVE_STATES
        if action == "pause":
            return state in ("starting", "running")
        if action == "resume":
            return state == "paused"
        if action in ("save", "evaluate", "stop"):
            # None: shown dimmed in the key bar while no run is active.
            return True if state in ("starting", "running", "paused") else None
        return True

    def on_key(self, event: events.Key) -> None:
        """A dimmed run key (save, evaluate, stop) pressed while no run is active says why
        nothing happens instead of doing nothing silently."""
        action = IDLE_RUN_KEYS.get(event.key)
        if action is not None and self.check_action(action, ()) is None:
            event.stop()
            self._require_active(action)

    def action_start(self) -> None:
        self.start_run(self.mini_app.next_config)

    def action_pause(self) -> None:
        self._command(Command.PAUSE, "pausing at the next complete update")

    def action_resume(self) -> None:
        self._command(Command.RESUME, None)

    def action_save(self) -> None:
        if not self._require_active("save"):
            return
        assert self.run is not None
        self.run.requested_saves += 1  # a refusal of this save is notified, not only logged
        self._command(Command.SAVE, "saving at the next update boundary")

    def action_evaluate(self) -> None:
        if self._require_active("evaluate"):
            self._command(Command.EVALUATE, None)

    def action_stop(self) -> None:
        if not self._require_active("stop"):
            return
        assert self.run is not None
        self._command(Command.STOP, "stopping at the next complete update")
        self.run.state = "stopping"
        self._show_state()

    def action_new_run(self) -> None:
        from minigpt_tui.screens.new_run import NewRunRequest, NewRunScreen

        if self.run is not None and self.run.active:
            self.notify("stop the current run first (x)", title="a run is active", severity="warning", markup=False)
            return

        def chosen(request: NewRunRequest | None) -> None:
            if request is not None:
                self.mini_app.next_config = request.config
                self.start_run(request.config, request.name)

        self.app.push_screen(NewRunScreen(self.mini_app.next_config, self.mini_app.settings.runs_dir), chosen)

    def action_overlay(self) -> None:
        from minigpt_tui.screens.overlay import OverlayScreen

        current = self.run.run_dir if self.run else None
        has_overlay = self.query_one(LossPlot).overlay is not None

        def chosen(path: Path | None) -> None:
            if path is None:
                return
            if path == OverlayScreen.REMOVE:
                self.query_one(LossPlot).set_overlay(None)
                self.query_one(EventLog).record("overlay", "removed")
                return
            self._load_overlay(path)

        self.app.push_screen(OverlayScreen(self.mini_app.settings.runs_dir, current, has_overlay), chosen)

    def action_export_csv(self) -> None:
        run_dir = self.run.run_dir if self.run else None
        if run_dir is None:
            self.notify("no run directory yet: start a run first", title="export", severity="warning", markup=False)
            return
        self._export(run_dir)

    def action_toggle_view(self) -> None:
        self.toggle_class("-show-plot")
        self._update_view_hint()

    def action_toggle_probes(self) -> None:
        self.toggle_class("-show-probes")
        probes = self.query_one(ProbesTable)
        if self.has_class("-show-probes"):
            probes.focus()
            self._plot_probe(probes.highlighted_probe, probes)
        else:
            self.query_one(LossPlot).set_probe(None)

    @on(ProbesTable.ProbeHighlighted)
    def _probe_highlighted(self, message: ProbesTable.ProbeHighlighted) -> None:
        if self.has_class("-show-probes"):
            self.query_one(LossPlot).set_probe(message.name, message.points)

    def _plot_probe(self, name: str | None, probes: ProbesTable) -> None:
        points = [(p.step, p.probability) for p in probes.history.get(name, ())] if name else []
        self.query_one(LossPlot).set_probe(name, points)

    def on_resize(self, event: events.Resize) -> None:
        self._update_view_hint(event.size.width)

    def _update_view_hint(self, width: int | None = None) -> None:
        """Below the wide breakpoint the table and the plot take turns (``v``): say so."""
        narrow = (width if width is not None else self.size.width) < self.WIDE_FROM
        showing_plot = self.has_class("-show-plot")
        self.query_one(LossTable).border_subtitle = "v: plot" if narrow and not showing_plot else ""
        self.query_one(LossPlot).border_subtitle = "v: table" if narrow and showing_plot else ""

    def _require_active(self, action: str) -> bool:
        if self.run is None or not self.run.active:
            self.notify("no run is active: press space to start one", title=action, severity="warning", markup=False)
            return False
        return True

    def _command(self, command: Command, note: str | None) -> None:
        if self.run is None or not self.run.active:
            return
        self.run.session.send(command)
        if note:
            self.notify(note, timeout=2, markup=False)

    # -- starting a run ------------------------------------------------------------------
    def start_run(self, config: Any, name: str | None = None) -> None:
        """Start a new run from a resolved RunConfig (the engine builds it on the worker);
        ``name`` is its folder in the runs directory (default: PRESET-TIMESTAMP)."""
        if self.run is not None and self.run.active:
            self.notify("a run is already active", severity="warning", markup=False)
            return
        self._launch(NewRun(config, self.mini_app.settings.runs_dir, name), config, "started",
                     f"building preset {config.preset} ({config.train.steps} updates, {config.train.precision})")

    def resume_from_checkpoint(self, checkpoint: Path) -> None:
        """Continue the run saved in ``checkpoint`` (a checkpoint folder) exactly where it
        stopped; the Checkpoints screen calls this after its preflight. The engine restores
        it on the worker and refuses, with its one-line reason, what it cannot continue."""
        from minigpt_tui.engine.errors import MiniGPTError
        from minigpt_tui.engine.session.plans import saved_run_config

        if self.run is not None and self.run.active:
            self.notify("a run is already active", severity="warning", markup=False)
            return
        try:
            config = saved_run_config(checkpoint)
        except MiniGPTError as err:
            self.notify(str(err), title="resume refused", severity="error", markup=False)
            return
        self._launch(ResumeRun(Path(checkpoint), self.mini_app.settings.runs_dir), config, "resumed",
                     f"restoring {self._display_path(checkpoint)}")

    def attach_run(self, run_dir: Path) -> None:
        """Follow a run that another process writes; space, s, e and x act on it through
        its control file."""
        from minigpt_tui.engine.errors import MiniGPTError
        from minigpt_tui.engine.session.attach import RunFollower, attached_config

        if self.run is not None and self.run.active:
            self.notify("a run is already active", severity="warning", markup=False)
            return
        try:
            config = attached_config(run_dir)
        except MiniGPTError as err:
            self.notify(str(err), title="attach refused", severity="error", markup=False)
            return
        feed = RunFeed(self.post_message)
        follower = RunFollower(Path(run_dir), feed, interval=1.0 / self.REFRESHES_PER_SECOND)
        self._show_new_run(ActiveRun(follower, feed, config, steps=config.train.steps),  # type: ignore[arg-type]
                           config, "attached", f"following {self._display_path(Path(run_dir))}")

    def _launch(self, plan: RunPlan, config: Any, kind: str, note: str) -> None:
        feed = RunFeed(self.post_message)
        self._show_new_run(ActiveRun(TrainingSession(plan, feed), feed, config, steps=config.train.steps),
                           config, kind, note)

    def _show_new_run(self, run: ActiveRun, config: Any, kind: str, note: str) -> None:
        self.run = run
        self.query_one(LossTable).reset()
        self.query_one(LossPlot).reset()
        self.query_one(LossPlot).set_probe(None)
        self.query_one(ProbesTable).reset()
        self.query_one(RunSummaryView).show_pending(config)
        self.query_one(RunProgress).show_pending(config.train.steps)
        self.query_one(EventLog).record(kind, note)
        self._show_state()
        self._train(run)

    @work(thread=True, exclusive=True, exit_on_error=False, group="training", name="training")
    def _train(self, run: ActiveRun) -> None:
        run.session.run_reporting_failures()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.name != "training":
            return
        if event.state == WorkerState.ERROR:
            # The session reports its failures as events; this is anything else.
            error = event.worker.error
            self._apply_events(self.run.feed.drain() if self.run else [])
            if self.run is not None:
                self.run.state = "failed"
                self._show_state()
            message = str(error) if error is not None else "unknown error"
            self.query_one(EventLog).record("failed", message)
            self.notify(message, title="training failed", severity="error", markup=False)
            self._maybe_exit()
        elif event.state in (WorkerState.SUCCESS, WorkerState.CANCELLED):
            if self.run is not None:
                self._apply_events(self.run.feed.drain())
            self._maybe_exit()

    # -- events from the worker ----------------------------------------------------------
    @on(EngineEventsReady)
    def _events_ready(self, message: EngineEventsReady) -> None:
        if self.run is None or message.feed is not self.run.feed:
            message.feed.drain()  # a previous run's leftovers
            return
        if self._drain_timer is not None:
            return
        wait = self._last_drain + 1.0 / self.REFRESHES_PER_SECOND - self.mini_app.clock()
        if wait <= 0:
            self._drain()
        else:
            self._drain_timer = self.set_timer(wait, self._drain)

    def _drain(self) -> None:
        self._drain_timer = None
        self._last_drain = self.mini_app.clock()
        if self.run is not None:
            self._apply_events(self.run.feed.drain())

    def _apply_events(self, events: list[Any]) -> None:
        if not events or self.run is None:
            return
        run = self.run
        applied = _AppliedEvents()
        handlers = self._event_handlers()
        for event in events:
            kind = type(event).__name__
            run.events_seen[kind] = run.events_seen.get(kind, 0) + 1
            handler = handlers.get(type(event))
            if handler is not None:
                handler(run, event, applied)
        table = self.query_one(LossTable)
        plot = self.query_one(LossPlot)
        progress = self.query_one(RunProgress)
        if applied.rows:
            table.queue_records(applied.rows)
            plot.request_redraw()
        progress.advance(run.step)
        if applied.state_changed:
            self._show_state()
        else:
            progress.refresh_figures()
        if applied.state_changed and run.state != "running":
            # Paused, finished or failed: show everything now rather than at the next tick.
            table.flush()
            plot.redraw()
        if applied.state_changed and not run.active:
            self._maybe_exit()

    def _event_handlers(self) -> dict[type, Callable[[ActiveRun, Any, _AppliedEvents], None]]:
        return {
            engine.UpdateDone: self._on_update_done,
            engine.EvaluationDone: self._on_evaluation_done,
            engine.ProbesScored: self._on_probes_scored,
            RunSummary: self._on_run_summary,
            engine.RunStarted: self._on_run_started,
            engine.Paused: self._on_paused,
            engine.Resumed: self._on_resumed,
            engine.Saved: self._on_saved,
            engine.Refused: self._on_refused,
            engine.Finished: self._on_finished,
            engine.Failed: self._on_failed,
        }

    def _on_update_done(self, run: ActiveRun, event: engine.UpdateDone, applied: _AppliedEvents) -> None:
        record = event.record
        applied.rows.append((record, None))
        self.query_one(LossPlot).add_update(record.step, record.loss)
        run.step = record.step

    def _on_evaluation_done(self, run: ActiveRun, event: engine.EvaluationDone, applied: _AppliedEvents) -> None:
        record = event.record
        applied.rows.append((record, event.best_step))
        self.query_one(LossPlot).add_evaluation(record.step, record.train_loss, record.validation_loss)
        log = self.query_one(EventLog)
        if record.extra:
            log.record("extra", f"evaluation at update {record.step}: train {record.train_loss:.4f}"
                       + _validation_text(record.validation_loss) + " (does not change the best step)")
        elif event.best_changed:
            log.record("best", f"best validation loss {record.validation_loss:.4f} at update {record.step}")

    def _on_probes_scored(self, run: ActiveRun, event: engine.ProbesScored, applied: _AppliedEvents) -> None:
        self.query_one(ProbesTable).add_scores(event.step, event.scores)
        if event.matched != run.probe_matches and (run.probe_matches is not None or event.matched):
            self.query_one(EventLog).record(
                "probes", f"update {event.step}: {event.matched} of {len(event.scores)} match")
        run.probe_matches = event.matched

    def _on_run_summary(self, run: ActiveRun, event: RunSummary, applied: _AppliedEvents) -> None:
        run.summary = event
        run.step = event.start_step
        self.query_one(RunSummaryView).show_run(event)
        if event.resumed_from is not None and event.run_dir is not None:
            self._load_history(run.feed, event.run_dir, event.start_step)

    def _on_run_started(self, run: ActiveRun, event: engine.RunStarted, applied: _AppliedEvents) -> None:
        run.state, applied.state_changed = "running", True
        run.step, run.steps = event.step, event.steps
        self.query_one(RunProgress).begin(event.step, event.steps)
        self.query_one(EventLog).record("started", f"update {event.step} of {event.steps}")

    def _on_paused(self, run: ActiveRun, event: engine.Paused, applied: _AppliedEvents) -> None:
        run.state, applied.state_changed = "paused", True
        self.query_one(RunProgress).run_clock.pause()
        self.query_one(EventLog).record("paused", f"after update {event.step}")

    def _on_resumed(self, run: ActiveRun, event: engine.Resumed, applied: _AppliedEvents) -> None:
        run.state, applied.state_changed = "running", True
        self.query_one(RunProgress).run_clock.resume()
        self.query_one(EventLog).record("resumed", f"at update {event.step}")

    def _on_saved(self, run: ActiveRun, event: engine.Saved, applied: _AppliedEvents) -> None:
        if event.reason == engine.SaveReason.MANUAL and run.requested_saves:
            run.requested_saves -= 1
        self.query_one(EventLog).record("saved", f"update {event.step} ({event.reason}): {self._run_path(event.path)}")

    def _on_refused(self, run: ActiveRun, event: engine.Refused, applied: _AppliedEvents) -> None:
        log = self.query_one(EventLog)
        asked = event.action == "save" and run.requested_saves > 0
        if asked:
            run.requested_saves -= 1
        if asked or event.action != "save":
            log.record("refused", f"{event.action}: {event.message}")
            self.notify(event.message, title=f"{event.action} refused", severity="warning", markup=False)
        elif event.message not in run.refusals_logged:
            run.refusals_logged.add(event.message)
            log.record("refused", f"automatic save: {event.message}")

    def _on_finished(self, run: ActiveRun, event: engine.Finished, applied: _AppliedEvents) -> None:
        run.state = "finished" if event.reason == engine.FinishReason.COMPLETED else "stopped"
        applied.state_changed = True
        run.final_digest = event.state_digest
        self.query_one(RunProgress).run_clock.pause()
        self.query_one(EventLog).record(run.state, f"at update {event.step}; state digest {event.state_digest[:16]}…")

    def _on_failed(self, run: ActiveRun, event: engine.Failed, applied: _AppliedEvents) -> None:
        run.state, applied.state_changed = "failed", True
        self.query_one(RunProgress).run_clock.pause()
        self.query_one(EventLog).record("failed", event.message)
        self.notify(event.message, title="training failed", severity="error", markup=False)

    def _show_state(self) -> None:
        state = self.run.state if self.run else "idle"
        self.query_one(RunProgress).set_state(state)
        self.refresh_bindings()

    def _run_path(self, path: Path) -> str:
        """Paths inside the run's own directory are shown relative to it (the summary names the run)."""
        run_dir = self.run.run_dir if self.run else None
        if run_dir is not None:
            try:
                return str(Path(path).relative_to(run_dir))
            except ValueError:
                pass
        return self._display_path(path)

    def _display_path(self, path: Path) -> str:
        """Paths under the runs directory are shown relative to it."""
        return RunStore(self.mini_app.settings.runs_dir).display(path)

    # -- quitting ------------------------------------------------------------------------
    @property
    def has_active_run(self) -> bool:
        return self.run is not None and self.run.active

    @property
    def unsaved_updates(self) -> int:
        return self.run.session.unsaved_updates if self.run else 0

    def stop_for_exit(self, *, save: bool) -> None:
        """Stop the run and exit the app once its worker has finished."""
        self._exit_after_run = True
        if self.run is None or not self.run.active:
            self.app.exit()
            return
        if getattr(self.run.session, "follows_only", False):
            self.run.session.detach()  # type: ignore[attr-defined]  (the followed run goes on)
            self.app.exit()
            return
        if not save:
            self.run.session.discard_saves()
        self.run.session.send(Command.STOP)
        self.run.state = "stopping"
        self._show_state()

    def _maybe_exit(self) -> None:
        if self._exit_after_run and (self.run is None or not self.run.active):
            self.app.exit()

    # -- overlay and export (file work off the UI thread) --------------------------------
    @work(thread=True, exit_on_error=False, group="files")
    def _load_overlay(self, path: Path) -> None:
        from minigpt_tui.engine.errors import MiniGPTError
        from minigpt_tui.engine.session.history import load_curve

        try:
            curve = load_curve(path)
        except MiniGPTError as err:
            self.app.call_from_thread(self.notify, str(err), title="overlay", severity="error", markup=False)
            return
        self.post_message(CurveLoaded(curve))

    @work(thread=True, exit_on_error=False, group="files")
    def _load_history(self, feed: RunFeed, run_dir: Path, until_step: int) -> None:
        from minigpt_tui.engine.errors import MiniGPTError
        from minigpt_tui.engine.session.history import load_history

        try:
            history = load_history(run_dir, until_step)
        except MiniGPTError:
            return  # no readable metrics: the run shows what it does from here on
        self.post_message(HistoryLoaded(feed, history))

    @on(HistoryLoaded)
    def _history_loaded(self, message: HistoryLoaded) -> None:
        if self.run is None or message.feed is not self.run.feed:
            return
        history = message.history
        records = sorted([(u, None) for u in history.updates] + [(e, history.best_step) for e in history.evaluations],
                         key=lambda item: (item[0].step, hasattr(item[0], "train_loss")))
        self.query_one(LossTable).prepend_records(records)
        self.query_one(LossPlot).prepend_history(
            [(u.step, u.loss) for u in history.updates if u.loss is not None],
            [(e.step, e.train_loss) for e in history.evaluations if e.train_loss is not None],
            [(e.step, e.validation_loss) for e in history.evaluations if e.validation_loss is not None])
        self.query_one(ProbesTable).prepend_history(history.probes)
        self.query_one(EventLog).record(
            "resumed", f"history: {len(history.updates)} updates, {len(history.evaluations)} evaluations before")

    @on(CurveLoaded)
    def _curve_loaded(self, message: CurveLoaded) -> None:
        curve = message.curve
        self.query_one(LossPlot).set_overlay(curve)
        self.query_one(EventLog).record(
            "overlay", f"{curve.name}: {len(curve.updates)} updates, {len(curve.train)} evaluations")

    @work(thread=True, exit_on_error=False, group="files")
    def _export(self, run_dir: Path) -> None:
        from minigpt_tui.engine.errors import MiniGPTError
        from minigpt_tui.engine.session.history import export_csv

        try:
            target = export_csv(run_dir)
        except (MiniGPTError, OSError) as err:
            self.app.call_from_thread(self.notify, str(err), title="export failed", severity="error", markup=False)
            return
        self.app.call_from_thread(self._exported, target)

    def _exported(self, target: Path) -> None:
        self.query_one(EventLog).record("exported", self._display_path(target))
        self.notify(str(target), title="metrics exported", markup=False)


def _validation_text(value: float | None) -> str:
    return f", validation {value:.4f}" if value is not None else ""
