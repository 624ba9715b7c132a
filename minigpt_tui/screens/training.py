"""The Training screen: a run's summary, progress, live loss table and plot, and events.

The run's training session works on a thread worker. Its events land in a :class:`RunFeed`; this
screen drains the feed at most ``REFRESHES_PER_SECOND`` times a second, so a run making
hundreds of updates a second costs the UI thread (and the GIL) a few small refreshes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Header
from textual.worker import Worker, WorkerState

from minigpt_tui.engine.core.errors import MiniGPTError
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.attach import attached_config
from minigpt_tui.engine.session.events import Command
from minigpt_tui.engine.session.run_store import RunStore
from minigpt_tui.messages import EngineEventsReady
from minigpt_tui.screens.confirm_quit import ConfirmQuitScreen
from minigpt_tui.screens.confirm_stop import ConfirmStopScreen
from minigpt_tui.screens.help_texts import TRAINING_HELP
from minigpt_tui.screens.new_run import NewRunRequest, NewRunScreen
from minigpt_tui.screens.overlay import OverlayScreen
from minigpt_tui.screens.run_files import RunFilesScreen
from minigpt_tui.screens.run_monitor import (
    ActiveRun,
    RunMonitor,
    RunWidgets,
    run_key_enabled,
)
from minigpt_tui.screens.run_reminders import RunReminders
from minigpt_tui.screens.side_panels import SidePanels
from minigpt_tui.screens.training_plot import PLOT_BINDINGS, PLOT_PALETTE_COMMANDS, PlotControls
from minigpt_tui.widgets.key_bar import KeyBar
from minigpt_tui.widgets.throttle import Throttle

if TYPE_CHECKING:
    from minigpt_tui.app import MiniGPTApp
    from minigpt_tui.engine.session.plans import RunPlan

IDLE_RUN_KEYS = {"s": "save", "e": "evaluate", "x": "stop"}  # dimmed while no run is active; pressed, they say why


class TrainingScreen(SidePanels, PlotControls, RunReminders, RunFilesScreen):
    HELP = TRAINING_HELP
    HELP_TITLE = "Training"
    HORIZONTAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [(0, "-narrow"), (PlotControls.WIDE_FROM, "-wide")]
    # How often a running run's events reach the screen. Every refresh takes the GIL from
    # training for a moment; measured in tmux on mini (benchmarks/bench_app.py), 10 / 4 / 1
    # cost about 15% of the training speed, 5 / 2 / 0.5 about 5%. A pause or the end of
    # the run shows everything at once.
    REFRESHES_PER_SECOND = 5.0  # progress line and event log
    TABLE_REFRESHES_PER_SECOND = 2.0
    PLOT_REDRAWS_PER_SECOND = 0.5

    BINDINGS: ClassVar[list[BindingType]] = [
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
        Binding("h", "toggle_watch", "Watch", show=False),
        *PLOT_BINDINGS,
    ]
    PALETTE_COMMANDS = (
        ("New run", "Configure and start a new training run (n)", "new_run"),
        ("Watch", "Samples and head roles at the latest evaluation; a role's score on the plot (h)", "toggle_watch"),
        ("Overlay a run", "Overlay another run's loss curves on the plot (o)", "overlay"),
        ("Export metrics to CSV", "Write this run's metrics.csv (w)", "export_csv"),
        *PLOT_PALETTE_COMMANDS,
    )

    def __init__(self) -> None:
        super().__init__()
        self.run: ActiveRun | None = None
        self._exit_after_run = False

    @property
    def mini_app(self) -> MiniGPTApp:
        return self.app  # type: ignore[return-value]

    # -- layout --------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        self.widgets = widgets = RunWidgets.build(
            clock=self.mini_app.clock, wall_clock=self.mini_app.wall_clock,
            table_refreshes_per_second=self.TABLE_REFRESHES_PER_SECOND,
            plot_redraws_per_second=self.PLOT_REDRAWS_PER_SECOND)
        self.monitor = RunMonitor(widgets, notify=self.notify, show_state=self._show_state,
                                  display_path=self._display_path, load_history=self._load_history)
        yield Header()
        yield widgets.summary
        yield widgets.progress
        with Horizontal(id="losses"):
            yield widgets.table
            yield widgets.probes
            yield widgets.watch
            yield widgets.plot
        yield widgets.log
        yield KeyBar()

    def on_mount(self) -> None:
        self.sub_title = "Training"
        self.pacer = Throttle(self._drain, clock=self.mini_app.clock, per_second=self.REFRESHES_PER_SECOND,
                              set_timer=self.set_timer)
        self.widgets.summary.show_pending(self.mini_app.next_config)
        self.widgets.progress.show_pending(self.mini_app.next_config.train.steps)
        self._update_view_hint()

    def on_screen_resume(self) -> None:
        self.sub_title = "Training"

    # -- bindings ------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return run_key_enabled(action, self.run.state if self.run else "idle")

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
        paused = self.run.state == "paused"  # a paused run is at a boundary already: at once
        if paused and self.run.saved_step == self.run.step:  # the pause saved it, or `s` did
            self.notify(f"update {self.run.step} is already saved", title="save", timeout=3, markup=False)
            return
        self.run.requested_saves += 1  # a refusal of this save is notified, not only logged
        self._command(Command.SAVE, "saving now" if paused else "saving at the next update boundary")

    def action_evaluate(self) -> None:
        if self._require_active("evaluate"):
            self._command(Command.EVALUATE, None)

    def action_stop(self) -> None:
        if not self._require_active("stop"):
            return
        assert self.run is not None
        if self.run.attached:
            self._confirm_stop_attached(self.run)
            return
        self._stop_now()

    def _confirm_stop_attached(self, run: ActiveRun) -> None:
        """An attached run belongs to another process: stopping it is asked first, naming
        the run and that process (quitting the app only detaches)."""
        folder = run.run_dir or Path(getattr(run.session, "run_dir", "."))
        live = getattr(run.session, "live", None)  # read by the follower's worker: no file I/O here
        process = live.process if live is not None else "another process"

        def decided(stop: bool | None) -> None:
            if stop and self.run is run and run.active:
                self._stop_now()

        self.app.push_screen(ConfirmStopScreen(escape_controls(folder.name), process), decided)

    def _stop_now(self) -> None:
        assert self.run is not None
        paused = self.run.state == "paused"
        self._command(Command.STOP, "stopping now" if paused else "stopping at the next complete update")
        self.run.state = "stopping"
        self._show_state()

    def action_new_run(self) -> None:
        if self.run is not None and self.run.active:
            self.notify("stop the current run first (x)", title="a run is active", severity="warning", markup=False)
            return

        def chosen(request: NewRunRequest | None) -> None:
            if request is not None:
                self.mini_app.next_config = request.config
                self.start_run(request.config, request.name, init_from=request.init_from)

        self.app.push_screen(NewRunScreen(self.mini_app.next_config, self.mini_app.settings.runs_dir), chosen)

    def action_overlay(self) -> None:
        current = self.run.run_dir if self.run else None
        has_overlay = self.widgets.plot.overlay is not None

        def chosen(path: Path | None) -> None:
            if path is None:
                return
            if path == OverlayScreen.REMOVE:
                self.monitor.show_overlay(None)
                return
            self._load_overlay(path)

        self.app.push_screen(OverlayScreen(self.mini_app.settings.runs_dir, current, has_overlay), chosen)

    def action_export_csv(self) -> None:
        run_dir = self.run.run_dir if self.run else None
        if run_dir is None:
            self.notify("no run directory yet: start a run first", title="export", severity="warning", markup=False)
            return
        self._export(run_dir)

    def _require_active(self, action: str) -> bool:
        if self.run is None or not self.run.active:
            self.notify("no run is active: press space to start one", title=action, severity="warning", markup=False)
            return False
        return True

    def _command(self, command: Command, note: str | None) -> None:
        if self.run is None or not self.run.active:
            return
        self.run.session.send(command)
        if note:  # in the events, where what it asked for appears next (a toast would cover them)
            self.widgets.log.record("asked", note)

    # -- starting a run ------------------------------------------------------------------
    def start_run(self, config: Any, name: str | None = None, *, init_from: str | None = None) -> None:
        """Start a new run from a resolved RunConfig (the engine builds it on the worker);
        ``name`` is its folder in the runs directory (default: PRESET-TIMESTAMP);
        ``init_from`` the model it starts from (its architecture and tokenizer too)."""
        if not self._refuse_if_active():
            from minigpt_tui.engine.session.plans import NewRun  # deferred: off the first frame

            start = f" from {init_from}" if init_from else ""
            self._launch(NewRun(config, self.mini_app.settings.runs_dir, name, init_from=init_from), config, "started",
                         f"building preset {config.preset}{start} ({config.train.steps} updates, "
                         f"{config.train.precision})")

    def resume_from_checkpoint(self, checkpoint: Path) -> None:
        """Continue the run saved in ``checkpoint`` (a checkpoint folder) exactly where it
        stopped; the Checkpoints screen calls this after its preflight. The engine restores
        it on the worker and refuses, with its one-line reason, what it cannot continue."""
        from minigpt_tui.engine.session.plans import ResumeRun, saved_run_config  # deferred: off the first frame

        config = self._run_config(saved_run_config, checkpoint, "resume refused")
        if config is None:
            return
        self._launch(ResumeRun(Path(checkpoint), self.mini_app.settings.runs_dir), config, "resumed",
                     f"restoring {self._display_path(checkpoint)}")

    def attach_run(self, run_dir: Path) -> None:
        """Follow a run that another process writes; space, s, e and x act on it through
        its control file."""
        config = self._run_config(attached_config, run_dir, "attach refused")
        if config is None:
            return
        run = ActiveRun.following(Path(run_dir), config, self.post_message, 1.0 / self.REFRESHES_PER_SECOND)
        self._show_new_run(run, "attached", f"following {self._display_path(Path(run_dir))}")

    def _refuse_if_active(self) -> bool:
        if self.run is not None and self.run.active:
            self.notify("a run is already active", severity="warning", markup=False)
            return True
        return False

    def _run_config(self, read_config: Callable[[Path], Any], folder: Path, refusal: str) -> Any | None:
        """The run config ``read_config`` finds in ``folder``; None, said in a notification, when
        a run is already active or the folder cannot be continued or followed."""
        if self._refuse_if_active():
            return None
        try:
            return read_config(folder)
        except MiniGPTError as err:
            self.notify(str(err), title=refusal, severity="error", markup=False)
            return None

    def _launch(self, plan: RunPlan, config: Any, kind: str, note: str) -> None:
        self._show_new_run(ActiveRun.training(plan, config, self.post_message), kind, note)

    def _show_new_run(self, run: ActiveRun, kind: str, note: str) -> None:
        self.run = run
        self.monitor.show_new_run(run.config, kind, note)
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
            self.monitor.show_failure(str(error) if error is not None else "unknown error")
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
        self.pacer.request()

    def _drain(self) -> None:
        if self.run is not None:
            self._apply_events(self.run.feed.drain())

    def _apply_events(self, events: list[Any]) -> None:
        if not events or self.run is None:
            return
        applied = self.monitor.apply(self.run, events)
        self._show_unsaved_in_quit_dialog()
        if applied.state_changed and not self.run.active:
            self._maybe_exit()

    def _show_unsaved_in_quit_dialog(self) -> None:
        """A quit dialog asked over this run shows the count as it is now, not as it was."""
        for screen in self.app.screen_stack:
            if isinstance(screen, ConfirmQuitScreen):
                screen.show_unsaved(self.unsaved_updates, active=self.has_active_run)

    def _show_state(self) -> None:
        state = self.run.state if self.run else "idle"
        self.widgets.progress.set_state(state)
        self.refresh_bindings()

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
        if self.run is None or not self.run.active or self.run.end_for_exit(save=save):
            self.app.exit()
            return
        self._show_state()

    def _maybe_exit(self) -> None:
        if self._exit_after_run and (self.run is None or not self.run.active):
            self.app.exit()
