"""What the Training screen says in its events beyond the run it shows: on launch, the newest
run its trainer left before the end (paused, stopped, or ended by a crash) and how to continue
it; after a run completes, how to train a longer one (a small preset ends in seconds, before
there is time to pause it). A base of :class:`TrainingScreen`; the runs are listed on a worker.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from textual import events, on, work
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.display import counted
from minigpt_tui.engine.session.run_store import RunListing, RunStore
from minigpt_tui.engine.session.worker_failures import attempt

if TYPE_CHECKING:
    from minigpt_tui.app import MiniGPTApp

LONGER_RUN_HINT = "n configures a longer run (more updates); space pauses a run while it trains"


def unfinished_note(listings: tuple[RunListing, ...]) -> str | None:
    """The event line naming the newest run left before its end, or None when there is none."""
    unfinished = sorted((run for run in listings if run.resumable), key=lambda run: run.changed_at, reverse=True)
    if not unfinished:
        return None
    newest = unfinished[0]
    others = len(unfinished) - 1
    more = f" ({counted(others, 'other unfinished run')} there too)" if others else ""
    return (f"{escape_controls(newest.name)} {newest.status}: c opens it in Checkpoints, "
            f"r resumes it exactly where it stopped{more}")


class RunReminders(Screen):
    """Set by TrainingScreen: the run shown (None before one starts) and the event log."""

    run: Any
    widgets: Any

    @on(events.Mount)
    def _look_for_unfinished_runs(self) -> None:
        settings = cast("MiniGPTApp", self.app).settings
        if settings.attach is None:  # following another process's run: that run is the news
            self._list_unfinished(settings.runs_dir)

    @work(thread=True, exclusive=True, exit_on_error=False, group="unfinished-runs")
    def _list_unfinished(self, runs_dir: Path) -> None:
        listings = attempt(RunStore(runs_dir).scan)  # only a reminder: a folder that cannot be read says nothing
        note = unfinished_note(listings) if isinstance(listings, tuple) else None
        if note is not None:
            self.app.call_from_thread(self._remind, note)

    def _remind(self, note: str) -> None:
        if self.run is None:  # a run started meanwhile: its events are what matters now
            self.widgets.log.record("unfinished", note)

    @on(Worker.StateChanged)
    def _hint_after_a_completed_run(self, event: Worker.StateChanged) -> None:
        if (event.worker.name == "training" and event.state == WorkerState.SUCCESS and self.run is not None
                and self.run.state == "finished" and not self.run.attached):
            self.widgets.log.record("next", LONGER_RUN_HINT)
