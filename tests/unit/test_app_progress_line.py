"""The Training screen's progress line: an ETA only while the run can still get there."""

from __future__ import annotations

import pytest

from minigpt_tui.widgets.run_progress import RunProgress


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def progress_after(state: str) -> str:
    clock = FakeClock()
    line = RunProgress(clock=clock)
    line.show_pending(1000)
    line.begin(0, 1000)
    clock.now += 10.0
    line.advance(200)
    line.set_state(state)
    line.run_clock.pause()
    clock.now += 50.0  # time passing after the run ended counts for nothing
    line.refresh_figures()
    return line.figures


def test_a_running_or_paused_run_shows_its_eta():
    assert progress_after("running") == "200/1000 · ETA 0:40 · 20.0 upd/s"
    assert progress_after("paused") == "200/1000 · ETA 0:40 · 20.0 upd/s"


@pytest.mark.parametrize("state", ["stopped", "failed"])
def test_a_run_that_ended_early_shows_the_time_it_ran_not_an_eta(state):
    assert progress_after(state) == "200/1000 · in 0:10 · 20.0 upd/s"
