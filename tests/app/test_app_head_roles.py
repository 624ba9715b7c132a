"""The head view's grid of every head's role score: the numbers are `score_heads`' own on
the loaded model (exactly, and as printed), `o` cycles the role, `[ ] { }` move the
highlighted head, the scores are computed once per model on the generation worker, and a
model whose context is too short for the scores says so in the grid."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from lens_support import BYTES_ONLY, FAMILY_SHAPES, varied_model
from textual.widgets import Input

from minigpt_tui.engine.analysis import head_roles
from minigpt_tui.engine.analysis.roles import HEAD_ROLES
from minigpt_tui.engine.core.config import ModelConfig
from minigpt_tui.engine.formats.portable import save_portable_model
from minigpt_tui.engine.session.operations import OperationQueue
from minigpt_tui.engine.models.model import MiniGPT
from minigpt_tui.engine.models.model_file import load_portable_model
from minigpt_tui.screens.generation import GenerationScreen
from minigpt_tui.widgets.head_role_grid import HeadRoleGrid, score_cell
from minigpt_tui.widgets.insight_panel import InsightPanel
from tests.app_support import make_app, plain, record_notifications, run_async, settle, press_settled as keys
from tests.polling import pause_until

SIZE = (80, 24)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("head-roles")
    files = {family: folder / f"{family}.safetensors" for family in FAMILY_SHAPES}
    for family, path in files.items():
        save_portable_model(varied_model(family), BYTES_ONLY, path)
    short = MiniGPT(ModelConfig(family="gpt2", width=16, heads=2, kv_heads=2, ffn=24, layers=1, context=4),
                    BYTES_ONLY.vocab_size)
    short.initialize(5)
    files["short"] = folder / "short.safetensors"
    save_portable_model(short, BYTES_ONLY, files["short"])
    return files


def expected_roles(path: Path) -> tuple[head_roles.HeadRole, ...]:
    portable = load_portable_model(path)
    return head_roles.score_heads(portable.model, portable.tokenizer)


async def load(pilot, screen: GenerationScreen, path: Path) -> None:
    field = screen.query_one("#model", Input)
    field.value = str(path)
    field.focus()
    await pilot.press("enter")
    await settle(pilot)


async def open_head_view(pilot, path: Path) -> tuple[GenerationScreen, HeadRoleGrid]:
    await pilot.press("g")
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, GenerationScreen)
    screen.query_one("#prompt", Input).value = "ab"
    await load(pilot, screen, path)
    await keys(pilot, "n", "n", "h")
    grid = screen.query_one(HeadRoleGrid)
    await pause_until(pilot, lambda: grid.view is not None, timeout=30, what="the head-role grid",
                      detail=lambda: plain(grid.content))
    return screen, grid


def grid_rows(grid: HeadRoleGrid) -> list[str]:
    """The grid's block rows as printed: 'b0  0.12  0.05 [0.87] 0.02'."""
    return [line for line in plain(grid.content).splitlines() if line.startswith("b")]


def printed_cells(row: str) -> list[str]:
    return row[4:].replace("[", " ").replace("]", " ").split()


@run_async
async def test_the_grid_shows_score_heads_of_the_loaded_model_and_cycles_the_role(models):
    expected = expected_roles(models["gpt2"])
    config = FAMILY_SHAPES["gpt2"]
    app = make_app(models["gpt2"].parent / "runs")
    async with app.run_test(size=SIZE) as pilot:
        screen, grid = await open_head_view(pilot, models["gpt2"])
        assert grid.view.roles == expected  # the engine's records, exactly
        assert (grid.view.layers, grid.view.heads) == (config.layers, config.heads)
        shown = []
        for role in HEAD_ROLES:
            assert grid.role == role
            scores = grid.scores()
            assert scores == tuple(tuple(getattr(expected[layer * config.heads + head], role)
                                         for head in range(config.heads)) for layer in range(config.layers))
            text = plain(grid.content)
            assert f"head roles · {role.replace('_', '-')}" in text
            rows = grid_rows(grid)
            assert len(rows) == config.layers
            for layer, row in enumerate(rows):
                assert row.startswith(f"b{layer}")
                assert printed_cells(row) == [score_cell(s) for s in scores[layer]]
            top = sorted(expected, key=lambda r: -getattr(r, role))[:3]
            top_line = next(line for line in text.splitlines() if line.startswith("top: "))
            assert top_line == "top: " + " · ".join(f"block {r.layer} head {r.head} {getattr(r, role):.2f}" for r in top)
            shown.append(scores)
            await keys(pilot, "o")
        assert grid.role == HEAD_ROLES[0]  # four presses: back to the first role
        assert len(set(shown)) == len(HEAD_ROLES)  # each role shows other scores
        assert screen.query_one(InsightPanel).display


@run_async
async def test_moving_the_head_moves_the_highlighted_cell(models):
    app = make_app(models["gpt2"].parent / "runs")
    async with app.run_test(size=SIZE) as pilot:
        screen, grid = await open_head_view(pilot, models["gpt2"])

        def bracketed() -> tuple[int, int]:
            (found,) = [(layer, row[4:].index("[") // 6) for layer, row in enumerate(grid_rows(grid))
                        if "[" in row]
            return found

        assert grid.highlight == (0, 0) and bracketed() == (0, 0)
        await keys(pilot, "right_curly_bracket", "right_curly_bracket")
        assert grid.highlight == (0, 2) and bracketed() == (0, 2)
        await keys(pilot, "right_square_bracket")
        assert grid.highlight == (1, 2) and bracketed() == (1, 2)
        assert (screen.insight.pattern.layer, screen.insight.pattern.head) == (1, 2)  # the pattern shown
        await keys(pilot, "o")
        assert bracketed() == (1, 2)  # another role, the same head
        for _ in range(5):
            await keys(pilot, "right_curly_bracket", "right_square_bracket")
        last = (FAMILY_SHAPES["gpt2"].layers - 1, FAMILY_SHAPES["gpt2"].heads - 1)
        assert grid.highlight == last and bracketed() == last  # held at the model's last head
        await keys(pilot, "left_square_bracket", "left_curly_bracket")
        assert bracketed() == (last[0] - 1, last[1] - 1)


@run_async
async def test_the_scores_are_computed_once_per_model_on_the_worker(models, monkeypatch):
    threads: list[threading.Thread] = []
    queued: list[str] = []
    expected_second = expected_roles(models["llama"])  # before the spy: this one runs here
    score_heads, push = head_roles.score_heads, OperationQueue.push

    def spy_score(*args, **kwargs):
        threads.append(threading.current_thread())
        return score_heads(*args, **kwargs)

    def spy_push(self, operation):
        queued.append(operation.what)
        return push(self, operation)

    monkeypatch.setattr(head_roles, "score_heads", spy_score)
    monkeypatch.setattr(OperationQueue, "push", spy_push)
    app = make_app(models["gpt2"].parent / "runs")
    async with app.run_test(size=SIZE) as pilot:
        screen, grid = await open_head_view(pilot, models["gpt2"])
        first = grid.view
        # Another decision, the view closed and opened, the head moved: the same scores.
        await keys(pilot, "h", "n", "h", "right_curly_bracket", "up", "o")
        assert grid.view is first and len(threads) == 1 and queued.count("head roles") == 1
        # Another model, loaded while the head view shows: scored once more, for it.
        await load(pilot, screen, models["llama"])
        await keys(pilot, "n")
        await pause_until(pilot, lambda: grid.view is not first, timeout=30, what="the second model's grid")
        assert grid.view.roles == expected_second
        assert len(threads) == 2 and queued.count("head roles") == 2
    assert all(thread is not threading.main_thread() for thread in threads)


@run_async
async def test_a_context_too_short_and_o_outside_the_head_view_are_one_line_each(models):
    app = make_app(models["short"].parent / "runs")
    notes = record_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("g")
        await settle(pilot)
        screen = pilot.app.screen
        screen.query_one("#prompt", Input).value = "a"
        await load(pilot, screen, models["short"])
        await keys(pilot, "n", "o")
        assert any("press h for the head view first" in message for message, _ in notes)
        await keys(pilot, "h")
        grid = screen.query_one(HeadRoleGrid)
        await pause_until(pilot, lambda: grid.view is not None, timeout=30, what="the grid's answer")
        assert plain(grid.content).strip() == "head roles: the context of 4 is too short for repeated sequences"
        assert grid.scores() == ()
        await keys(pilot, "o")  # nothing to cycle through, nothing breaks
        assert "too short" in plain(grid.content)
