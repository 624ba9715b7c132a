"""The event log of a run followed with ``attach``: it says the app follows the run from the
update it joined at, and how the run ended, never that it was stopped while preparing
(the digest stays with the process that trained it)."""

from __future__ import annotations

from minigpt_tui.app import LaunchSettings, MiniGPTApp
from minigpt_tui.cli import main
from minigpt_tui.widgets.event_log import EventLog
from tests.app_support import run_async
from tests.training_support import wait_until


@run_async
async def test_a_followed_run_that_ended_is_logged_at_its_last_update(tmp_path):
    runs = tmp_path / "runs"
    assert main(["train", "--preset", "tiny", "--until", "2", "--run", "ended", "--runs-dir", str(runs), "--json"]) == 0
    app = MiniGPTApp(LaunchSettings(runs_dir=runs, attach=runs / "ended"), preload_engine=False)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.training_screen
        await wait_until(pilot, lambda: screen.run is not None and screen.run.state in ("stopped", "finished"))
        entries = screen.query_one(EventLog).entries
        assert ("following", "from update 2 of 4") in entries
        assert (screen.run.state, "at update 2") in entries
        assert not [message for _, message in entries if "preparing" in message]
        assert not [kind for kind, _ in entries if kind == "started"]
