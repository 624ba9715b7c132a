"""Snapshots of the Training screen after a real (short) mini run, at 80x24 and 120x40, in
the dark and light themes. Everything that varies between runs is frozen: the trainer's
clock (so tokens/s is fixed), the app's clocks (ETA, rate, event times), the run's name
and the runs directory (paths are shown relative to it).

The run is real, but the numbers a CPU computes (losses, gradient norms, the state digest)
differ in their last bits between CPU vendors, so the events reach the screen with values
derived from the update number instead: the layout is what these snapshots check, and the
same on every machine. Exactness is checked bit for bit by the engine's own tests."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from minigpt_tui.app import LaunchSettings, MiniGPTApp, resolve_next_config
from tests.polling import pause_until

FROZEN_WALL = 1767225600.0
SNAPSHOT_RUN = {"train": {"steps": 60, "eval_every": 50, "save_every": 0}}


@pytest.fixture(autouse=True)
def utc_event_times(monkeypatch):
    """The event log shows local times: pin the zone so the frozen time reads the same anywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def frozen_trainer_clock(monkeypatch):
    """Each update appears to take exactly 5 ms, so its tokens/s is the same every run."""
    import minigpt_tui.engine.training.trainer as trainer_module

    ticks = itertools.count()
    monkeypatch.setattr(trainer_module, "time", SimpleNamespace(perf_counter=lambda: next(ticks) * 0.005))


def step_loss(step: int, offset: float = 0.0) -> float:
    """A falling loss curve with a small wobble, the same on every machine."""
    return round(3.2 - 1.1 * step / 60 + 0.05 * ((step * 7) % 5) / 4 + offset, 4)


def machine_independent(event):  # type: ignore[no-untyped-def]
    from minigpt_tui.engine.session.events import EvaluationDone, Finished, HeadsScored, SamplesTaken, UpdateDone

    if isinstance(event, UpdateDone):
        step = event.record.step
        record = dataclasses.replace(event.record, loss=step_loss(step), grad_norm=round(1.0 + ((step * 3) % 7) / 10, 4),
                                     tokens_per_second=64_000.0)
        return dataclasses.replace(event, record=record)
    if isinstance(event, EvaluationDone):
        step = event.record.step
        validation = None if event.record.validation_loss is None else step_loss(step, 0.9)
        record = dataclasses.replace(event.record, train_loss=step_loss(step, -0.05), validation_loss=validation)
        return dataclasses.replace(event, record=record)
    if isinstance(event, SamplesTaken):
        samples = tuple(dataclasses.replace(s, greedy=f"update {event.step}", sampled="", greedy_ids=(), sampled_ids=())
                        for s in event.samples)
        return dataclasses.replace(event, samples=samples)
    if isinstance(event, HeadsScored):
        roles = tuple(dataclasses.replace(r, induction=0.1 * (r.layer + r.head + 1), previous_token=0.2,
                                          duplicate_token=0.3, first_token=0.4) for r in event.roles)
        return dataclasses.replace(event, roles=roles)
    if isinstance(event, Finished):
        return dataclasses.replace(event, state_digest=hashlib.sha256(f"update {event.step}".encode()).hexdigest())
    return event


@pytest.fixture(autouse=True)
def machine_independent_numbers(monkeypatch):
    from minigpt_tui.messages import RunFeed

    original = RunFeed.__call__
    monkeypatch.setattr(RunFeed, "__call__", lambda feed, event: original(feed, machine_independent(event)))


def finished_run_app(runs_dir: Path, theme: str | None = None) -> tuple[MiniGPTApp, object]:
    settings = LaunchSettings(runs_dir=runs_dir)
    config = resolve_next_config(settings, SNAPSHOT_RUN)
    app = MiniGPTApp(settings, next_config=config, preload_engine=False,
                     clock=lambda: 1000.0, wall_clock=lambda: FROZEN_WALL)

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        if theme:
            app.theme = theme
        screen = app.training_screen
        screen.start_run(config, "snapshot")
        await pause_until(pilot, lambda: not screen.run.active, timeout=60, what="the run to end", interval=0.05)
        assert screen.run.state == "finished"
        await pilot.pause()

    return app, run_before


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_snapshot_training_screen_after_a_run(tmp_path, frozen_trainer_clock, snap_compare, size):
    app, run_before = finished_run_app(tmp_path / "runs")
    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_snapshot_training_screen_plot_at_80x24(tmp_path, frozen_trainer_clock, snap_compare):
    """v shows the plot in the table's place: round y ticks evenly spaced, the legend above it."""
    app, run_before = finished_run_app(tmp_path / "runs")
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before, press=["v"])


def test_snapshot_training_screen_light_theme(tmp_path, frozen_trainer_clock, snap_compare):
    app, run_before = finished_run_app(tmp_path / "runs", theme="textual-light")
    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_snapshot_training_screen_before_a_run(tmp_path, snap_compare):
    settings = LaunchSettings(runs_dir=tmp_path / "runs")
    app = MiniGPTApp(settings, preload_engine=False, clock=lambda: 1000.0, wall_clock=lambda: FROZEN_WALL)
    assert snap_compare(app, terminal_size=(80, 24))
