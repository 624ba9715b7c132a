"""The Training screen's file work, off the UI thread: loading another run's curve to
overlay, a resumed or attached run's history, and exporting a run's metrics as CSV. Results
come back as messages the screen's run monitor shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import on, work
from textual.screen import Screen

from minigpt_tui.engine.session.history import export_csv, load_curve, load_history
from minigpt_tui.engine.session.worker_failures import WorkFailed, attempt
from minigpt_tui.messages import CurveLoaded, HistoryLoaded, RunFeed
from minigpt_tui.screens.run_monitor import RunMonitor


class RunFilesScreen(Screen):
    """A screen with a ``monitor`` (RunMonitor) and the ``run`` it shows (or None)."""

    monitor: RunMonitor
    run: Any

    @work(thread=True, exit_on_error=False, group="files")
    def _load_overlay(self, path: Path) -> None:
        curve = attempt(lambda: load_curve(path), str(path))
        if isinstance(curve, WorkFailed):
            self.app.call_from_thread(self.notify, curve.line, title="overlay", severity="error", markup=False)
            return
        self.post_message(CurveLoaded(curve))

    @work(thread=True, exit_on_error=False, group="files")
    def _load_history(self, feed: RunFeed, run_dir: Path, until_step: int) -> None:
        history = attempt(lambda: load_history(run_dir, until_step))
        if isinstance(history, WorkFailed):
            if not history.expected:  # no readable metrics is quiet: the run shows what it does from here on
                self.app.call_from_thread(self.notify, f"the run's history could not be read: {history.line}",
                                          title="history", severity="warning", markup=False)
            return
        self.post_message(HistoryLoaded(feed, history))

    @on(HistoryLoaded)
    def _history_loaded(self, message: HistoryLoaded) -> None:
        if self.run is not None and message.feed is self.run.feed:
            self.monitor.show_history(message.history)

    @on(CurveLoaded)
    def _curve_loaded(self, message: CurveLoaded) -> None:
        self.monitor.show_overlay(message.curve)

    @work(thread=True, exit_on_error=False, group="files")
    def _export(self, run_dir: Path) -> None:
        target = attempt(lambda: export_csv(run_dir))
        if isinstance(target, WorkFailed):
            self.app.call_from_thread(self.notify, target.line, title="export failed", severity="error", markup=False)
            return
        self.app.call_from_thread(self.monitor.show_export, target)
