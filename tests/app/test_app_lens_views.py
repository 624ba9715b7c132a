"""The lens, contributions and head-pattern views render engine records as text that fits."""

from __future__ import annotations

import pytest

from lens_support import BYTES_ONLY, varied_model
from minigpt_tui.engine.analysis.lens import inspect_decision
from minigpt_tui.widgets.contributions_view import contribution_rows, contributions_text, signed_bar
from minigpt_tui.widgets.head_pattern_view import LABEL_CELLS, pattern_text
from minigpt_tui.widgets.lens_view import lens_text, rank_sparkline
from minigpt_tui.widgets.numbers import short_probability
from minigpt_tui.widgets.pieces import piece_text, visible_piece
from tests.app_support import run_async, static_text


@pytest.fixture(scope="module")
def insight():
    model = varied_model("gpt2")
    ids = BYTES_ONLY.encode_prompt("Heat map")
    return inspect_decision(model, BYTES_ONLY, ids, 72, lens=True, contributions=True, candidate_ids=[80],
                            pattern=(1, 2))


@pytest.mark.parametrize(("value", "shown"), [(0.79, "0.79"), (0.0042, "4e-3"), (0.00042, "4e-4"),
                                              (1.0, "1.00"), (0.0, "0"), (2.5e-12, "2e-12")])
def test_small_probabilities_are_readable_in_a_few_cells(value, shown):
    assert short_probability(value) == shown


def test_control_bytes_in_a_piece_are_escaped_never_sent_raw():
    for text in ("a\x16b", "\x1b[31m", "\x7f", "\x85"):
        for drawn in (piece_text(text).plain, visible_piece(text)):
            assert not any(ord(ch) < 0x20 or 0x7f <= ord(ch) <= 0x9f for ch in drawn)
    assert piece_text("a\x16b").plain == "a\\x16b" and visible_piece("\x1b x") == "\\x1b·x"


def test_rank_sparkline_is_full_at_rank_one_and_lowest_at_the_last_rank():
    assert rank_sparkline([258, 16, 1], 258) == "▁▅█"


def test_lens_view_lists_every_layer_and_highlights_the_chosen_id(insight):
    text = lens_text(insight.lens, 72, "G", 258)
    lines = text.plain.splitlines()
    assert lines[0].startswith("chosen G 72 · rank by layer ")
    assert [line[:14].strip() for line in lines[2:6]] == ["embed", "block 0 resid", "block 1 resid", "block 2 resid"]
    assert lines[5][14:].split()[0] == str(insight.lens[-1].chosen_rank)
    assert all(len(line) <= 78 for line in lines[:-1])
    highlighted = [text.plain[s.start:s.end] for s in text.spans if s.style == "bold reverse"]
    assert highlighted[0] == "G"


def test_contributions_view_draws_a_signed_bar_per_part(insight):
    parts = insight.contributions[0]
    rows = contribution_rows(parts)
    assert len(rows) == 1 + 3 * (4 + 2) + 1  # embedding; per block 4 heads, bias, ffn; norm bias
    assert sum(value for _, value in rows) == pytest.approx(parts.total, abs=1e-12)
    text = contributions_text(insight.contributions, half=10).plain
    assert "logit of F 72" in text and "logit of N 80" in text
    assert signed_bar(-1.0, 1.0, 4).plain == "████│    " and signed_bar(0.5, 1.0, 4).plain == "    │██  "


def test_a_float32_models_parts_say_they_equal_its_logit_to_float32_rounding():
    import dataclasses

    import torch

    model = varied_model("gpt2", dtype=torch.float32)
    ids = BYTES_ONLY.encode_prompt("Heat map")
    every = list(range(BYTES_ONLY.vocab_size))
    parts = inspect_decision(model, BYTES_ONLY, ids, 0, contributions=True, candidate_ids=every).contributions
    differing = next(c for c in parts if f"{c.total:+.6f}" != f"{c.logit:+.6f}")
    text = contributions_text([differing], half=10).plain
    assert f"{differing.logit:+.6f}" in text
    assert f"parts add up to {differing.total:+.6f}, equal to the logit to float32 rounding" in text
    same = next(c for c in parts if f"{c.total:+.6f}" == f"{c.logit:+.6f}")
    assert f"parts add up to {same.total:+.6f}\n" in contributions_text([same], half=10).plain
    # A sum that is off by more than rounding says by how much, never that it agrees.
    wrong = dataclasses.replace(differing, total=differing.total + 0.25)
    assert f"parts add up to {wrong.total:+.6f}, 2.5e-01 from the logit" in contributions_text([wrong], half=10).plain


def test_head_pattern_view_has_a_row_per_query_and_nothing_past_the_diagonal(insight):
    pattern = insight.pattern
    pieces = [piece for _, piece in pattern.tokens]
    text = pattern_text(pattern.layer, pattern.head, pieces, pattern.weights.tolist()).plain.splitlines()
    assert text[1].strip() == "^Heat·map"
    rows = text[2:-1]
    assert len(rows) == len(pieces)
    for query, row in enumerate(rows):
        cells = row[LABEL_CELLS:].split("  ")[0]
        assert len(cells) == query + 1


@run_async
async def test_insight_panel_switches_views_and_the_pattern_scrolls_inside_80x24():
    from textual.app import App

    from minigpt_tui.engine.session.insight import insight_view
    from minigpt_tui.widgets.insight_panel import InsightPanel

    model = varied_model("llama")
    ids = BYTES_ONLY.encode_prompt("longer than 24 rows tall")
    insight = inspect_decision(model, BYTES_ONLY, ids, 72, lens=True, contributions=True, pattern=(0, 1))
    view = insight_view(insight, 3, 72, "F", model.config, BYTES_ONLY.vocab_size)
    assert isinstance(view.pattern.weights[0][0], float)

    class PanelApp(App):
        def compose(self):
            yield InsightPanel()

    app = PanelApp()
    async with app.run_test(size=(80, 24)) as pilot:
        panel = app.query_one(InsightPanel)
        assert "Press l" in static_text(panel, "#lens-text")
        panel.show_insight(view)
        await pilot.pause()
        assert static_text(panel, "#lens-text").startswith("chosen F 72 · rank by layer")
        panel.show_kind("contributions")
        await pilot.pause()
        assert panel.kind == "contributions"
        assert "block 2 head 3" in static_text(panel, "#contributions-text")
        panel.show_kind("pattern")
        await pilot.pause()
        scroller = panel.query_one("#insight-pattern")
        assert scroller.region.height <= 24 and scroller.virtual_size.height > scroller.region.height
        panel.show_insight(None)
        await pilot.pause()
        assert "Press h" in static_text(panel, "#head-pattern-text")
