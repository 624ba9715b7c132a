"""The loss plot on the Training screen: y ticks at round values the same number of rows
apart at every size, a legend above the figure that names each series once with a mark of
its own, and the plot keys (log scale, smoothing, the series shown, zoom) named in its
title; the learning rate and gradient norm a run records reach the plot."""

from __future__ import annotations

import itertools
import json
import math
import re

import pytest
from textual.app import App, ComposeResult

from minigpt_tui.messages import LoadedCurve
from minigpt_tui.widgets.loss_plot import LossPlot
from minigpt_tui.widgets.loss_table import LossTable
from minigpt_tui.widgets.plot_scale import PlotMode, even_ticks, smoothed
from tests.app_support import run_async
from tests.training_support import key, make_app, training, wait_until

ROUND_MANTISSAS = (1.0, 2.0, 2.5, 5.0)


class PlotApp(App):
    """A loss plot alone, redrawn whenever asked."""

    def compose(self) -> ComposeResult:
        yield LossPlot(max_redraws_per_second=1000.0)


def falling_curve(plot: LossPlot, steps: int = 600) -> None:
    """A loss falling from about 5.6 to 2.7 (the curve whose ticks read 5.55, 4.85, 4.15,
    2.75), with evaluations every 50 updates."""
    for step in range(1, steps + 1):
        loss = 2.7 + 2.9 * math.exp(-step / 90) + 0.04 * ((step * 7) % 5)
        plot.add_update(step, loss, lr=0.001 * min(1.0, step / 100), grad_norm=0.5 + ((step * 3) % 7) / 10)
        if step % 50 == 0:
            plot.add_evaluation(step, loss - 0.05, loss + 0.3)


def figure_lines(plot: LossPlot) -> list[str]:
    return [line.rstrip() for line in str(plot.render()).splitlines()]


def y_axis(plot: LossPlot) -> list[tuple[int, str]]:
    """(row, label) of every labelled tick of the left y axis, top to bottom."""
    return [(row, line.split("┤")[0].strip()) for row, line in enumerate(figure_lines(plot)) if "┤" in line[:12]]


def is_round(step: float) -> bool:
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    return any(math.isclose(mantissa, m, rel_tol=1e-6) for m in ROUND_MANTISSAS)


def assert_even_round_ticks(ticks: list[tuple[int, str]]) -> None:
    assert len(ticks) >= 2, ticks
    rows = [row for row, _ in ticks]
    values = [float(label) for _, label in ticks]
    row_gaps = {b - a for a, b in itertools.pairwise(rows)}
    steps = [a - b for a, b in itertools.pairwise(values)]  # top to bottom: falling
    assert len(row_gaps) == 1 and min(row_gaps) >= 2, ticks  # the same rows apart, never touching
    assert all(math.isclose(s, steps[0], rel_tol=1e-9) for s in steps), ticks  # no tick skipped
    assert steps[0] > 0 and is_round(steps[0]), ticks


@pytest.mark.parametrize("size", [(78, 12), (78, 17), (60, 9), (100, 26), (118, 34), (41, 30)])
@run_async
async def test_y_ticks_are_round_values_the_same_rows_apart_at_every_size(size):
    app = PlotApp()
    async with app.run_test(size=size) as pilot:
        plot = app.query_one(LossPlot)
        falling_curve(plot)
        plot.redraw()
        await pilot.pause()
        assert_even_round_ticks(y_axis(plot))
        plot.set_probe("p", [(0, 0.0), (300, 0.4), (600, 0.9)])
        plot.redraw()
        await pilot.pause()
        assert_even_round_ticks(y_axis(plot))
        right = [(row, line.rsplit("├", 1)[1].strip()) for row, line in enumerate(figure_lines(plot))
                 if "├" in line[-8:]]
        assert_even_round_ticks(right)  # the probability's axis, 0 to 1


def test_even_ticks_hold_the_data_and_land_on_rows():
    for low, high, rows in ((2.7, 5.6, 8), (2.7, 5.6, 13), (0.0, 1.0, 20), (1e-4, 3e-3, 11), (4.0, 4.0, 9)):
        ticks = even_ticks(low, high, rows)
        bottom, top = ticks.limits
        assert bottom <= low and top >= high
        positions = [(v - bottom) / (top - bottom) * (rows - 1) for v in ticks.values]
        assert all(abs(p - round(p)) < 1e-6 for p in positions), (low, high, rows, positions)


@run_async
async def test_the_legend_names_each_series_once_above_the_curves_with_a_mark_of_its_own():
    app = PlotApp()
    async with app.run_test(size=(100, 24)) as pilot:
        plot = app.query_one(LossPlot)
        falling_curve(plot)
        plot.set_overlay(LoadedCurve("other-run", tuple((s, 3.0 + 2.0 * math.exp(-s / 70)) for s in range(1, 401)),
                                     ((200, 4.6), (400, 4.5)), ((200, 4.9), (400, 4.8))))
        await pilot.pause()
        lines = figure_lines(plot)
        legend, canvas = lines[0], "\n".join(lines[1:])
        assert "┤" not in legend and "│" not in legend  # above the figure, never on the curves
        assert "\n".join(lines).count("other-run") == 1  # the overlaid run is named once
        labels = legend.replace("other-run:", "").split()
        marks = labels[0::2]
        assert labels[1::2] == ["batch", "train", "val", "batch", "train", "val"]
        assert len(set(marks)) == 6  # six series, six marks: colour is not the only difference
        for mark in marks[1:]:  # each mark is what the series is drawn with (the batch line in braille)
            assert mark in canvas, mark
        # The curve starts at the top left of the canvas, where the legend used to be: it shows.
        rows = [re.split("[┤│]", line, maxsplit=1)[1][:3] for line in lines[2:6]]
        assert any(start.strip() for start in rows), lines[:6]


@run_async
async def test_plot_keys_switch_scale_smoothing_series_and_zoom_and_the_title_says_so(tmp_path):
    app = make_app(tmp_path / "runs", preset="tiny")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = training(app)
        plot, table = screen.query_one(LossPlot), screen.query_one(LossTable)
        falling_curve(plot)
        plot.redraw()
        await pilot.pause()
        assert table.display and not plot.display and plot.border_title == "Loss"
        await pilot.press("l")  # a plot key on a narrow terminal shows the plot in the table's place
        await pilot.pause()
        assert plot.display and not table.display
        assert plot.border_title == "Loss · log" and plot.mode == PlotMode(log=True)
        labels = [label for _, label in y_axis(plot)]
        assert labels and all(float(label) > 0 for label in labels)  # the values, on a log axis
        await pilot.press("l", "m")
        await pilot.pause()
        assert plot.border_title == "Loss · EMA 0.6"
        await pilot.press("m", "m", "m")
        await pilot.pause()
        assert plot.mode.smoothing == 0.0 and plot.border_title == "Loss"
        await pilot.press("y")
        await pilot.pause()
        assert plot.border_title == "Learning rate" and figure_lines(plot)[0].split()[1:] == ["lr"]
        assert max(float(label) for _, label in y_axis(plot)) <= 0.0015  # the learning rate's scale, not the loss's
        await pilot.press("y")
        await pilot.pause()
        assert plot.border_title == "Grad norm" and "grad norm" in figure_lines(plot)[0]
        await pilot.press("y", "plus")
        await pilot.pause()
        assert plot.border_title == "Loss · last 500 updates"
        await pilot.press("plus", "plus")
        await pilot.pause()
        assert plot.border_title == "Loss · last 100 updates"
        axis = next(i for i, line in enumerate(figure_lines(plot)) if "└" in line)
        steps = [int(label) for label in figure_lines(plot)[axis + 1].split()]
        assert steps and min(steps) >= 501 and max(steps) <= 600
        await pilot.press("minus", "minus", "minus")
        await pilot.pause()
        assert plot.border_title == "Loss" and plot.mode.last is None
        await pilot.press("v", "space")  # the run keys still work
        await pilot.pause()
        assert table.display and screen.run is not None


def test_smoothing_starts_at_the_first_value_and_follows_the_curve():
    points = [(1, 4.0), (2, 2.0), (3, 2.0), (4, 2.0)]
    assert smoothed(points, 0.0) == points
    shown = smoothed(points, 0.5)
    assert shown[0] == (1, 4.0)  # corrected at its start, never pulled toward zero
    assert 2.0 < shown[-1][1] < shown[1][1] < 4.0


@run_async
async def test_the_plot_draws_the_learning_rate_and_gradient_norm_the_run_records(tmp_path):
    app = make_app(tmp_path / "runs", {"train": {"steps": 30, "eval_every": 0, "save_every": 0}}, preset="tiny")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = training(app)
        await key(pilot, "space")
        await wait_until(pilot, lambda: screen.run is not None and screen.run.state == "finished")
        plot = screen.query_one(LossPlot)
        records = [json.loads(line) for line in (screen.run.run_dir / "metrics.jsonl").read_text().splitlines()]
        updates = [r for r in records if r["kind"] == "update"]
        assert plot.lr == [(r["step"], r["lr"]) for r in updates]
        assert plot.grad_norm == [(r["step"], r["grad_norm"]) for r in updates]
        assert len(plot.lr) == 30


def test_an_overlaid_run_brings_its_learning_rate_and_gradient_norm(tmp_path):
    from minigpt_tui.engine.session.history import load_curve

    records = [{"kind": "update", "step": 1, "loss": 4.0, "lr": 0.001, "grad_norm": 2.5},
               {"kind": "update", "step": 2, "loss": 3.5, "lr": 0.002, "grad_norm": None},
               {"kind": "update", "step": "3", "loss": 3.0, "lr": 0.003, "grad_norm": 1.0},  # not a step: skipped
               {"kind": "evaluation", "step": 2, "train_loss": 3.4, "validation_loss": 3.6}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    curve = load_curve(tmp_path)
    assert curve.lr == ((1, 0.001), (2, 0.002))
    assert curve.grad_norm == ((1, 2.5),)
