"""The attention view draws the chosen head's whole pattern as a picture of shaded cells (two
query positions a line, one key position a column), read from the decisions' records; a head
key redraws only what changed: two rows of the head-role grid, the pattern and the picture,
without laying the screen out again."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lens_support import BYTES_ONLY, FAMILY_SHAPES, varied_model

from minigpt_tui.engine.formats.portable import save_portable_model
from minigpt_tui.widgets.attention_picture import (
    LOWER,
    PICTURE_POSITIONS,
    UPPER,
    picture_lines,
    shade_colour,
    shade_level,
)
from minigpt_tui.widgets.attention_view import AttentionView
from minigpt_tui.widgets.decision_list import DecisionList
from minigpt_tui.widgets.head_role_grid import HEADER_LINES, HeadRoleGrid, grid_lines
from minigpt_tui.widgets.insight_panel import InsightPanel
from minigpt_tui.widgets.painted_lines import lines_text
from tests.app_support import make_app, open_generation, plain, run_async, settle
from tests.app_support import press_settled as keys
from tests.polling import pause_until

SIZE = (120, 48)
SHAPE = FAMILY_SHAPES["llama"]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("attention-picture") / "f32.safetensors"
    save_portable_model(varied_model("llama", dtype=torch.float32), BYTES_ONLY, path)
    return path


def drawn_cells(picture, length: int) -> list[list[tuple[str, object, object]]]:
    """The picture's cells, a line per two queries: (glyph, colour, background)."""
    rows = picture[2:2 + (length + 1) // 2]
    return [[(s.text, s.style.color if s.style else None, s.style.bgcolor if s.style else None)
             for s in line[1:]] for line in rows]


def expected_cells(weights: torch.Tensor) -> list[list[tuple[str, object, object]]]:
    length = weights.shape[0]
    rows = []
    for query in range(0, length, 2):
        row = []
        for key in range(length):
            upper = shade_colour(shade_level(float(weights[query, key]))) if key <= query else None
            lower_seen = query + 1 < length and key <= query + 1
            lower = shade_colour(shade_level(float(weights[query + 1, key]))) if lower_seen else None
            if upper is None and lower is None:
                row.append((" ", None, None))
            elif upper is None:
                row.append((LOWER, lower, None))
            else:
                row.append((UPPER, upper, lower))
        rows.append(row)
    return rows


@run_async
async def test_the_attention_view_draws_the_chosen_heads_pattern_as_shaded_cells(model_file):
    app = make_app(model_file.parent / "runs")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot, model=str(model_file), prompt="Old limit")
        await keys(pilot, "n", "n", "n")
        view = screen.query_one(AttentionView)
        for pressed, (layer, head) in ((None, (0, 0)), ("right_square_bracket", (1, 0)),
                                       ("right_curly_bracket", (1, 1)), ("right_curly_bracket", (1, 2))):
            if pressed:
                await keys(pilot, pressed)
            weights = screen.session.stepper.head_patterns().pattern(3, layer, head)
            length = weights.shape[0]
            assert view.picture_plain.startswith(f"block {layer} head {head} · query (rows, two a line) x key")
            assert f"{length} positions" in view.picture_plain.splitlines()[0]
            assert drawn_cells(view.picture, length) == expected_cells(weights)
        painted = "\n".join(view.render_line(y).text for y in range(view.size.height))
        assert "block 1 head 2 · query" in painted and UPPER in painted  # the picture is what the view paints
        assert view.plain.splitlines()[1].startswith("block")  # the heads' rows stay below it
        screen.query_one(DecisionList).focus()
        await keys(pilot, "up")  # another decision: the same head's picture over its shorter prefix
        assert screen.query_one(DecisionList).selected.step == 2
        weights = screen.session.stepper.head_patterns().pattern(2, 1, 2)
        assert drawn_cells(view.picture, weights.shape[0]) == expected_cells(weights)


def test_a_long_prefix_shows_its_last_positions():
    length = PICTURE_POSITIONS + 9
    weights = torch.tril(torch.ones(length, length))
    weights = (weights / weights.sum(-1, keepdim=True)).tolist()
    pieces = [chr(ord("a") + i % 26) for i in range(length)]
    lines = picture_lines(4, 2, pieces, weights)
    text = lines_text(lines).plain.splitlines()
    assert text[0].endswith(f"positions 9-{length - 1} of {length}")
    assert text[1].strip() == "".join(pieces[9:])
    rows = lines[2:-1]
    assert len(rows) == (PICTURE_POSITIONS + 1) // 2 and all(len(row) == 1 + PICTURE_POSITIONS for row in rows)
    assert rows[0][0].text.strip() == "9" and rows[-1][0].text.strip() == str(length - 2)  # queries 71 and 72


@run_async
async def test_a_head_key_redraws_two_grid_rows_and_lays_nothing_out(model_file, monkeypatch):
    app = make_app(model_file.parent / "runs")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot, model=str(model_file), prompt="Old limit")
        await keys(pilot, "n", "n", "h")
        grid = screen.query_one(HeadRoleGrid)
        await pause_until(pilot, lambda: grid.view is not None, timeout=30, what="the head-role grid",
                          detail=lambda: plain(grid.content))
        replaced: list[set[int]] = []
        layouts: list[str] = []
        replace_lines, refresh = HeadRoleGrid.replace_lines, type(screen).refresh

        def spy_replace(self, changed):
            replaced.append(set(changed))
            return replace_lines(self, changed)

        def spy_refresh(self, *regions, layout=False, **kwargs):
            if layout:
                layouts.append(type(self).__name__)
            return refresh(self, *regions, layout=layout, **kwargs)

        monkeypatch.setattr(HeadRoleGrid, "replace_lines", spy_replace)
        for widget in {type(w) for w in screen.query("*")}:
            monkeypatch.setattr(widget, "refresh", spy_refresh)
        for pressed, moved in (("right_square_bracket", (0, 1)), ("right_curly_bracket", (1,)),
                               ("right_square_bracket", (1, 2))):
            await pilot.press(pressed)
            await pilot.pause()
            assert replaced.pop() == {HEADER_LINES + layer for layer in moved}
        monkeypatch.undo()
        assert layouts == []  # another head of the same decision keeps every size
        panel = screen.query_one(InsightPanel)
        assert (panel.pattern_layer, panel.pattern_head) == (2, 1)
        assert plain(grid.content) == plain(lines_text(grid_lines(grid.view, grid.role, (2, 1))))


@run_async
async def test_past_the_context_the_picture_says_so_then_shows_what_the_head_view_computed(model_file):
    app = make_app(model_file.parent / "runs")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot, model=str(model_file), prompt="x" * (SHAPE.context - 4))
        await keys(pilot, "n", "n", "n", "n", "n", "n")
        view = screen.query_one(AttentionView)
        assert screen.view.window_from is not None  # the last decision saw a sliding window
        assert "do not hold its whole pattern (a slid window" in view.picture_plain
        await keys(pilot, "h")  # the head view's worker computes the pattern over the window
        await pause_until(pilot, lambda: screen.insight is not None and screen.insight.pattern.weights,
                          timeout=30, what="the computed pattern", detail=lambda: view.picture_plain)
        await settle(pilot)
        computed = screen.insight.pattern
        assert view.picture_plain.startswith("block 0 head 0 · query")
        expected = expected_cells(torch.tensor(computed.weights, dtype=torch.float64))
        assert drawn_cells(view.picture, len(computed.weights)) == expected
