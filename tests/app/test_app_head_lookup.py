"""The head view reads every head's pattern from the decisions' records: moving between heads
runs no forward pass and queues nothing, a head can be typed (`j`), and `k` switches the
decisions between the key/value cache and the whole prefix, which the prefix's border names."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lens_support import BYTES_ONLY, FAMILY_SHAPES, varied_model

from minigpt_tui.engine.analysis.lens import inspect_decision
from minigpt_tui.engine.formats.portable import save_portable_model
from minigpt_tui.engine.session.operations import OperationQueue
from minigpt_tui.engine.models.model import MiniGPT
from minigpt_tui.screens.generation import GenerationScreen
from minigpt_tui.widgets.insight_panel import InsightPanel
from minigpt_tui.widgets.prefix_view import PrefixView
from tests.app_support import make_app, open_generation, record_notifications, run_async, static_text
from tests.app_support import press_settled as keys

SIZE = (100, 32)
SHAPE = FAMILY_SHAPES["llama"]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("head-lookup")
    files = {"float32": folder / "f32.safetensors", "float64": folder / "f64.safetensors"}
    save_portable_model(varied_model("llama", dtype=torch.float32), BYTES_ONLY, files["float32"])
    save_portable_model(varied_model("llama"), BYTES_ONLY, files["float64"])
    return files


def shown_pattern(screen: GenerationScreen) -> tuple[int, int, tuple[tuple[float, ...], ...]]:
    pattern = screen.insight.pattern
    return pattern.layer, pattern.head, pattern.weights


def whole_pattern(screen: GenerationScreen, layer: int, head: int) -> torch.Tensor:
    decision = screen.session.stepper.decisions[screen.insight.step - 1]
    model = screen.session.stepper.model
    return inspect_decision(model, BYTES_ONLY, decision.prefix_ids, decision.chosen.id,
                            pattern=(layer, head)).pattern.weights


@run_async
async def test_moving_between_heads_is_a_lookup_without_a_forward_pass(models, monkeypatch):
    app = make_app(models["float32"].parent / "runs")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot, model=str(models["float32"]), prompt="Old limit")
        await keys(pilot, "n", "n", "n", "h")
        assert screen.view.cached and screen.insight.step == 3
        forwards: list[int] = []
        queued: list[str] = []
        forward, push = MiniGPT.forward, OperationQueue.push

        def spy_forward(self, *args, **kwargs):
            forwards.append(1)
            return forward(self, *args, **kwargs)

        def spy_push(self, operation):
            queued.append(operation.what)
            return push(self, operation)

        monkeypatch.setattr(MiniGPT, "forward", spy_forward)
        monkeypatch.setattr(OperationQueue, "push", spy_push)
        panel = screen.query_one(InsightPanel)
        for pressed, expected in (("right_square_bracket", (1, 0)), ("right_curly_bracket", (1, 1)),
                                  ("right_curly_bracket", (1, 2)), ("left_square_bracket", (0, 2)),
                                  ("right_square_bracket", (1, 2))):
            await pilot.press(pressed)  # no settling needed: the pattern is there at once
            await pilot.pause()
            layer, head, weights = shown_pattern(screen)
            assert (layer, head) == expected
            assert f"block {layer} head {head}" in static_text(panel, "#head-pattern-text")
            assert str(panel.border_title) == f"Inside decision 3 · block {layer} head {head}"
        assert forwards == [] and queued == []
        monkeypatch.undo()
        layer, head, weights = shown_pattern(screen)
        torch.testing.assert_close(torch.tensor(weights, dtype=torch.float64), whole_pattern(screen, layer, head),
                                   atol=3e-5, rtol=3e-5)  # float32 rows of separate passes
        await keys(pilot, "up")  # another decision: its pattern at once, the lens from the worker
        assert screen.insight.step == 2 and len(shown_pattern(screen)[2]) == len(screen.view.prompt) + 1


@run_async
async def test_a_typed_head_is_shown_and_one_that_is_not_there_is_refused(models):
    app = make_app(models["float32"].parent / "runs")
    notes = record_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot, model=str(models["float32"]), prompt="Old limit")
        await keys(pilot, "n", "n")
        await keys(pilot, "j", *"2.3", "enter")  # from the candidates: opens the head view at that head
        assert screen.insight_kind == "pattern"
        layer, head, weights = shown_pattern(screen)
        assert (layer, head) == (2, 3)
        torch.testing.assert_close(torch.tensor(weights, dtype=torch.float64), whole_pattern(screen, 2, 3),
                                   atol=3e-5, rtol=3e-5)
        await keys(pilot, "j", *"block 1 head 0", "enter")
        assert shown_pattern(screen)[:2] == (1, 0)
        await keys(pilot, "j", *f"{SHAPE.layers}.0", "enter")
        assert shown_pattern(screen)[:2] == (1, 0)
        assert (f"there is no block {SHAPE.layers}: the model has blocks 0 to {SHAPE.layers - 1}", "error") in notes


@run_async
async def test_k_switches_between_the_cache_and_the_whole_prefix_and_the_prefix_says_which(models):
    app = make_app(models["float64"].parent / "runs")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot, model=str(models["float64"]), prompt="Old limit")
        await keys(pilot, "n", "n", "n")
        prefix = screen.query_one(PrefixView)
        assert not screen.view.cached and str(prefix.border_subtitle).endswith("· whole prefix")  # exact: float64
        before = [d.chosen.id for d in screen.view.decisions]
        await keys(pilot, "k")
        assert screen.view.cached and str(prefix.border_subtitle).endswith("· kv cache")
        assert [d.chosen.id for d in screen.view.decisions] == before
        await keys(pilot, "k")
        assert not screen.view.cached and [d.chosen.id for d in screen.view.decisions] == before
