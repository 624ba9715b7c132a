"""No screen shows a Python repr: the words None, True and False and an empty tuple ``()``
never reach the visible text of the Training screen (fresh, running, paused, stopped and
finished runs), of every Checkpoints panel (our checkpoint and model file, a nanoGPT
``ckpt.pt``, a sharded transformers folder, a foreign safetensors file, and the resume
preflight of each) or of the Generation screen with its views."""

from __future__ import annotations

import re

import pytest

from minigpt_tui.app import LaunchSettings, MiniGPTApp, resolve_next_config
from minigpt_tui.screens.checkpoints import TABS
from tests.app_support import build_saved_runs, make_app, record_notifications, run_async, settle
from tests.foreign_support import nanogpt_ckpt, sharded_folder
from tests.polling import pause_until

# A keyword argument in a code line (``torch.load(weights_only=True)``) is code, not a repr.
PYTHON_REPR = re.compile(r"(?<![=\w])(None|True|False)\b|\(\)")
SIZE = (120, 40)


def visible_lines(app) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


def leaks(app, where: str) -> list[str]:
    return [f"{where}: {line.strip()}" for line in visible_lines(app) if PYTHON_REPR.search(line)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("reprs")
    saved = build_saved_runs(root)
    nanogpt_ckpt(root / "files" / "ckpt.pt")
    sharded_folder(root / "files" / "sharded")
    return saved


@run_async
async def test_training_screen_in_every_state_shows_no_python_repr(tmp_path):
    found: list[str] = []
    settings = LaunchSettings(runs_dir=tmp_path / "runs", preset="tiny")
    long_run = resolve_next_config(settings, {"train": {"steps": 100_000, "eval_every": 2, "save_every": 0}})
    app = MiniGPTApp(settings, next_config=long_run, preload_engine=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.training_screen
        await pilot.pause()
        found += leaks(app, "fresh")
        await pilot.press("space")
        await pause_until(pilot, lambda: screen.run is not None and screen.run.step >= 5, timeout=60,
                          what="update 5", interval=0.05)
        found += leaks(app, "running")
        await pilot.press("space")
        await pause_until(pilot, lambda: screen.run.state == "paused", timeout=60, what="the pause", interval=0.05)
        await pilot.pause(0.3)
        found += leaks(app, "paused")
        await pilot.press("x")
        await pause_until(pilot, lambda: not screen.run.active, timeout=60, what="the stop", interval=0.05)
        await pilot.pause(0.3)
        found += leaks(app, "stopped")
    finished = MiniGPTApp(LaunchSettings(runs_dir=tmp_path / "runs2", preset="tiny"), preload_engine=False)
    async with finished.run_test(size=SIZE) as pilot:
        screen = finished.training_screen
        await pilot.press("space")
        await pause_until(pilot, lambda: screen.run is not None and screen.run.state == "finished", timeout=60,
                          what="the run to finish", interval=0.05)
        await pilot.pause(0.3)
        found += leaks(finished, "finished")
        for key in ("v", "p"):  # the plot and the probes table
            await pilot.press(key)
            await pilot.pause(0.3)
            found += leaks(finished, f"finished, {key}")
    assert not found, "\n".join(found)


@pytest.mark.slow  # every panel of every file kind: CI runs it with the slow ones
@run_async
async def test_every_checkpoints_panel_and_preflight_shows_no_python_repr(saved, tmp_path):
    runs = saved.copy_to(tmp_path)
    files = runs.parent / "files"
    checkpoint = runs / "tiny-a" / "checkpoints" / "step-000002"
    targets = [checkpoint, checkpoint / "model.safetensors", files / "ckpt.pt", files / "sharded",
               files / "foreign.safetensors"]
    found: list[str] = []
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("c")
        await settle(pilot)
        screen = app.screen
        panels = screen.query_one("#ckpt-main")
        for target in targets:
            screen.open_path(target)
            await settle(pilot)
            assert screen.opened.inspection.path == target
            table = screen.query_one("#tensor-table")
            panels.show_statistics(table.shown[0])
            await settle(pilot)
            screen.query_one("#state-view").root.expand_all()
            for tab in TABS:
                panels.show_tab(tab)
                await settle(pilot)
                found += leaks(app, f"{target.name}, {tab}")
            await pilot.press("r")
            await settle(pilot)
            found += leaks(app, f"{target.name}, resume preflight")
            await pilot.press("escape")
            await settle(pilot)
    assert not found, "\n".join(found)


@run_async
async def test_generation_screen_and_its_views_show_no_python_repr(saved, tmp_path):
    from textual.widgets import Input

    runs = saved.copy_to(tmp_path)
    found: list[str] = []
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("g")
        await settle(pilot)
        screen = app.screen
        found += leaks(app, "no model")
        seen = record_notifications(app)
        screen.query_one("#prompt", Input).value = "ab"
        field = screen.query_one("#model", Input)
        field.value = "tiny-a:latest"
        field.focus()
        await pilot.press("enter")
        await settle(pilot)
        assert screen.view is not None, seen
        found += leaks(app, "loaded")
        await pilot.press("escape")
        for key, where in (("n", "a decision"), ("n", "two decisions"), ("l", "lens"), ("x", "contributions"),
                           ("h", "head pattern"), ("r", "run to the end")):
            await pilot.press(key)
            await settle(pilot)
            found += leaks(app, where)
        assert len(screen.view.decisions) > 2  # the views above were of real decisions
    assert not found, "\n".join(found)
