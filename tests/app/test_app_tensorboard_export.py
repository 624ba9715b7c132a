"""The Checkpoints screen's `w`: the run under the runs tree's cursor written as TensorBoard
event files in its folder's ``tensorboard/``, on a worker; a notification says where. Only
with the tree focused; without the tensorboard package, a one-line error and nothing written."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path

import pytest

from minigpt_tui.cli import main
from minigpt_tui.widgets.run_tree import RunTree
from minigpt_tui.widgets.tensor_table import TensorTable
from tests.app_support import make_app, record_notifications, run_async, settle

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

SIZE = (80, 24)


@pytest.fixture
def runs(tmp_path) -> Path:
    runs = tmp_path / "runs"
    with contextlib.redirect_stdout(io.StringIO()):
        assert (
            main(
                [
                    "train",
                    "--preset",
                    "tiny",
                    "--runs-dir",
                    str(runs),
                    "--run",
                    "r",
                    "--json",
                ]
            )
            == 0
        )
    return runs


async def open_tree(pilot) -> RunTree:  # type: ignore[no-untyped-def]
    await pilot.press("c")
    await settle(pilot)
    tree = pilot.app.screen.query_one(RunTree)
    tree.focus()
    await pilot.pause()
    return tree


@run_async
async def test_w_in_the_runs_tree_exports_the_run_and_says_where(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        await open_tree(pilot)
        screen = app.screen
        screen.set_focus(screen.query_one(TensorTable))  # elsewhere `w` does nothing
        await pilot.press("w")
        await settle(pilot)
        assert not (runs / "r" / "tensorboard").exists()
        screen.set_focus(screen.query_one(RunTree))
        await pilot.pause()
        await pilot.press("w")
        await settle(pilot)
    folder = runs / "r" / "tensorboard"
    assert any(
        str(folder) in message and severity == "information"
        for message, severity in seen
    ), seen
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    accumulator.Reload()
    losses = [(e.step, e.value) for e in accumulator.Scalars("loss/batch")]
    records = [
        json.loads(line)
        for line in (runs / "r" / "metrics.jsonl").read_text().splitlines()
    ]
    wanted = [
        (r["step"], pytest.approx(r["loss"], rel=1e-6))
        for r in records
        if r["kind"] == "update"
    ]
    assert losses == wanted and len(losses) == 4


@run_async
async def test_without_the_package_w_says_how_to_install_it(runs, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tensorboard" else real(name, *a),
    )
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        await open_tree(pilot)
        await pilot.press("w")
        await settle(pilot)
    errors = [message for message, severity in seen if severity == "error"]
    assert errors == [
        "TensorBoard event files need the tensorboard package: pip install 'minigpt-tui[tensorboard]'"
    ]
    assert not (runs / "r" / "tensorboard").exists()
