"""The Generation screen's parts and attention views list the largest first, and b switches
both to the model's order and back."""

from __future__ import annotations

import re

import pytest

from minigpt_tui.widgets.attention_view import AttentionView
from minigpt_tui.widgets.contributions_view import ContributionsView
from minigpt_tui.widgets.insight_panel import InsightPanel
from tests.app_support import make_app, open_generation, record_notifications, run_async, static_text
from tests.app_support import press_settled as keys


def part_rows(screen) -> list[tuple[str, float]]:
    """The parts view's (name, value) rows of the chosen id, as drawn."""
    text = static_text(screen.query_one(ContributionsView), "#contributions-text").splitlines()
    rows = []
    for line in text[3:]:
        drawn = re.match(r"(\S.*?)\s+([+-][0-9]+\.[0-9]+) ", line)
        if drawn is None:
            break
        rows.append((drawn[1], float(drawn[2])))
    return rows


def sharpest_first(decision) -> tuple[list[str], list[str]]:
    """The heads in the model's order and by their largest weight past the first position."""
    weights = {f"block {layer} head {head}": max(w[1:]) for layer, block in enumerate(decision.attention)
               for head, w in enumerate(block)}
    return list(weights), sorted(weights, key=lambda name: -weights[name])


def head_order(screen) -> list[str]:
    lines = screen.query_one(AttentionView).plain.splitlines()[1:-1]
    return [line[:14].strip() for line in lines]


@run_async
async def test_parts_and_heads_come_largest_first_and_b_switches_to_model_order(runs):
    app = make_app(runs)
    notes = record_notifications(app)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_generation(pilot, prompt="ab ab ab")
        await keys(pilot, "n", "n", "x")
        panel = screen.query_one(InsightPanel)
        assert panel.kind == "contributions"
        parts = panel.inspected.contributions[0]
        every = [(part.name, part.value) for part in parts.parts()]

        shown = part_rows(screen)
        assert [name for name, _ in shown] == [name for name, _ in sorted(every, key=lambda p: -abs(p[1]))]
        sizes = [abs(value) for _, value in shown]
        assert sizes == sorted(sizes, reverse=True)
        assert sizes[0] == pytest.approx(max(abs(v) for _, v in every), abs=5e-5)
        text = static_text(screen.query_one(ContributionsView), "#contributions-text")
        assert text.startswith("largest |contribution| first · b: model order")

        model_order, sharpest = sharpest_first(screen.view.decisions[-1])
        assert head_order(screen) == sharpest
        assert "sharpest heads first · b: model order" in screen.query_one(AttentionView).border_title

        await keys(pilot, "b")
        assert [name for name, _ in part_rows(screen)] == [name for name, _ in every]
        assert static_text(screen.query_one(ContributionsView), "#contributions-text").startswith(
            "model order · b: largest first")
        assert head_order(screen) == model_order
        assert "model order · b: sharpest first" in screen.query_one(AttentionView).border_title
        assert any("model order" in message for message, _ in notes)

        await keys(pilot, "n")  # a new decision keeps the order chosen
        assert [name for name, _ in part_rows(screen)] == [part.name for part in parts.parts()]

        await keys(pilot, "b")
        assert head_order(screen) == sharpest_first(screen.view.decisions[-1])[1]
        sizes = [abs(value) for _, value in part_rows(screen)]
        assert sizes == sorted(sizes, reverse=True)
