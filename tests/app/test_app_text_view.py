"""The Text view (key s on the Generation screen): the text's per-token loss as the engine's
score_text computes it, the selected token's alternatives, the cursor, the change between two
models, and every refusal in one line."""

from __future__ import annotations

import threading

import pytest
from textual.widgets import Input

from minigpt_tui.engine.analysis.scoring import compare_scores, score_text
from minigpt_tui.engine.models.model_file import load_portable_model
from minigpt_tui.screens.generation import GenerationScreen
from minigpt_tui.screens.path_prompt import PathPromptScreen
from minigpt_tui.screens.text_view import NO_SECOND_MODEL, TextViewScreen
from minigpt_tui.widgets.candidate_table import CandidateTable
from minigpt_tui.widgets.token_loss_view import (
    CHANGE_COLOURS,
    TokenLossView,
    change_colour,
    change_scale,
    loss_colour,
    probability_label,
    shown_piece,
    wrap_pieces,
)
from tests.app_support import make_app, record_notifications, run_async, settle, static_text, saved_model_file as model_file, press_settled as keys, open_generation

SIZE = (80, 24)
PROMPT = "ab"



async def score(pilot, path: str = "") -> TextViewScreen | None:
    """Press s, give ``path`` (empty: the text on screen) and wait for the worker."""
    await keys(pilot, "s")
    dialog = pilot.app.screen
    assert isinstance(dialog, PathPromptScreen)
    dialog.query_one(Input).value = path
    await keys(pilot, "enter")
    await settle(pilot)
    return pilot.app.screen if isinstance(pilot.app.screen, TextViewScreen) else None


def shown_text(screen: GenerationScreen) -> str:
    return PROMPT + screen.view.output.generated_bytes.decode("utf-8", errors="ignore")


def one_line_errors(seen: list[tuple[str, str]]) -> list[str]:
    messages = [m for m, s in seen if s in ("error", "warning")]
    assert all("\n" not in m and "Traceback" not in m for m in messages), messages
    return messages


def test_pieces_wrap_at_the_width_and_break_at_a_newline():
    shown = [shown_piece(p) for p in ("<bos>", "ab", " cd", "\n", "x\x1by", "long-piece-here")]
    assert shown[3] == "↵\n" and shown[4] == "x\\x1by"
    lines = wrap_pieces(shown, 8)
    text = ["".join(f.text for f in line) for line in lines]
    # a piece wider than a line starts where the last one ended and is cut at each line's end
    assert text == ["<bos>ab", " cd↵", "x\\x1bylo", "ng-piece", "-here"]
    assert all(sum(len(f.text) for f in line) <= 8 for line in lines)
    assert [f.index for f in lines[2] + lines[3] + lines[4]] == [4, 5, 5, 5]
    # a word of several pieces moves to the next line whole
    words = wrap_pieces([shown_piece(p) for p in ["<bos>", *"the quick brown fox\nand"]], 12)
    assert ["".join(f.text for f in line) for line in words] == ["<bos>the ", "quick brown ", "fox↵", "and"]


def test_colour_scales_run_from_low_to_high_and_centre_on_no_change():
    assert loss_colour(0.0, 5.0) != loss_colour(5.0, 5.0) == loss_colour(50.0, 5.0)
    assert change_colour(0.0, 1.0) == CHANGE_COLOURS[len(CHANGE_COLOURS) // 2] == change_colour(0.3, 0.0)
    assert change_colour(-1.0, 1.0) == CHANGE_COLOURS[0] and change_colour(2.0, 1.0) == CHANGE_COLOURS[-1]
    assert change_scale([0.5, -2.0, 1.0]) == 2.0


@run_async
async def test_the_text_on_screen_is_scored_as_the_engine_scores_it(runs, monkeypatch):
    from minigpt_tui.engine.models import model as model_module

    threads: list[threading.Thread] = []
    forward = model_module.MiniGPT.forward

    def spy_forward(self, *args, **kwargs):
        threads.append(threading.current_thread())
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(model_module.MiniGPT, "forward", spy_forward)
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        generation = await open_generation(pilot)
        await keys(pilot, "r")
        threads.clear()
        view = await score(pilot)
        assert view is not None
        assert threads and all(t is not threading.main_thread() for t in threads)
        portable = load_portable_model(model_file(runs))
        engine = score_text(portable.model, portable.tokenizer, shown_text(generation))
        assert view.view.scored == engine
        summary = static_text(view, "#text-summary")
        assert f"mean loss {engine.mean_loss:.4f} nats" in summary
        assert summary.startswith(f"{len(engine.tokens)} tokens scored in {engine.windows} window(s)")
        tokens = view.query_one(TokenLossView)
        assert tokens.has_focus and tokens.cursor == 0
        assert tokens.colours[0] is None  # BOS is not scored
        assert tokens.colours[1:] == [loss_colour(t.loss, view.high) for t in engine.tokens]

        def shows(index: int) -> None:
            token = engine.tokens[index]
            detail = static_text(view, "#token-detail")
            assert f"loss  {token.loss:.4f} nats" in detail and f"rank  {token.rank} of" in detail
            lines = detail.splitlines()
            start = lines.index("the model expected") + 1
            assert len(lines[start:]) == len(token.top) == 5
            for line, (_, _, probability) in zip(lines[start:], token.top):
                assert line.rstrip().endswith(probability_label(probability))

        shows(0)
        await keys(pilot, "right", "right")
        assert tokens.cursor == 2
        shows(2)
        await keys(pilot, "left")
        shows(1)
        await keys(pilot, "end")
        shows(len(engine.tokens) - 1)
        await keys(pilot, "home")
        shows(0)
        await keys(pilot, "escape")
        assert pilot.app.screen is generation


@run_async
async def test_a_file_longer_than_the_context_is_read_in_windows(runs, tmp_path):
    text = "the quick brown fox jumps over the lazy dog\nand again the quick brown fox\n"
    path = tmp_path / "text.txt"
    path.write_text(text)
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        await open_generation(pilot)
        view = await score(pilot, str(path))
        assert view is not None
        portable = load_portable_model(model_file(runs))
        engine = score_text(portable.model, portable.tokenizer, text)
        assert engine.windows > 1 and view.view.scored == engine
        assert f"mean loss {engine.mean_loss:.4f} nats" in static_text(view, "#text-summary")
        tokens = view.query_one(TokenLossView)
        assert len(tokens.lines) > 1
        # down moves to the next line's token; the cursor's line stays in view
        await keys(pilot, "down")
        assert tokens.cursor_line == 1
        await keys(pilot, "end")
        assert tokens.scroll_offset.y <= tokens.cursor_line < tokens.scroll_offset.y + tokens.size.height


@run_async
async def test_with_a_second_model_d_colours_by_the_change(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        generation = await open_generation(pilot)
        await keys(pilot, "r", "m")
        pilot.app.screen.query_one(Input).value = "tiny-a:2"
        await keys(pilot, "enter")
        assert generation.session.second is not None
        view = await score(pilot)
        assert view is not None
        text = shown_text(generation)
        a, b = (load_portable_model(model_file(runs, step)) for step in (4, 2))
        first = score_text(a.model, a.tokenizer, text)
        compared = compare_scores(first, score_text(b.model, b.tokenizer, text, stride=first.stride))
        assert list(view.view.compared) == compared
        assert any(t.change != 0 for t in compared)
        await keys(pilot, "d")
        assert view.mode == "change"
        tokens = view.query_one(TokenLossView)
        scale = change_scale([t.change for t in compared])
        assert tokens.colours[1:] == [change_colour(t.change, scale) for t in compared]
        assert "B − A" in static_text(view, "#text-legend")
        assert f"B − A  {compared[0].change:+.4f}" in static_text(view, "#token-detail")
        assert "mean loss" in static_text(view, "#text-summary").splitlines()[1]
        await keys(pilot, "right")
        assert f"B − A  {compared[1].change:+.4f}" in static_text(view, "#token-detail")
        await keys(pilot, "d")
        assert view.mode == "loss" and "B − A" not in static_text(view, "#token-detail")


@run_async
async def test_refusals_are_one_line_notifications(runs, tmp_path):
    from lens_support import BYTES_ONLY, varied_model
    from minigpt_tui.engine.formats.portable import save_portable_model

    other = tmp_path / "other.safetensors"
    save_portable_model(varied_model("llama"), BYTES_ONLY, other)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    app = make_app(runs)
    seen = record_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await keys(pilot, "g")
        pilot.app.screen.query_one(CandidateTable).focus()  # the model field has the keyboard at first
        await keys(pilot, "s")
        assert one_line_errors(seen) == ["load a model first"]
        generation = await open_generation(pilot, prompt="")
        for path, expected in (("", "the text is empty: there is nothing to score"),
                               (str(empty), "the text is empty: there is nothing to score"),
                               (str(tmp_path / "nowhere.txt"), "file not found")):
            seen.clear()
            assert await score(pilot, path) is None
            assert any(expected in m for m in one_line_errors(seen)), (path, seen)
            assert pilot.app.screen is generation and app.is_running
        generation.query_one("#prompt", Input).value = PROMPT
        generation.query_one("#model", Input).focus()
        await keys(pilot, "enter", "r")
        # A second model with another tokenizer is refused when it is set (the CLI's words) ...
        seen.clear()
        await keys(pilot, "m")
        pilot.app.screen.query_one(Input).value = str(other)
        await keys(pilot, "enter")
        assert any("different tokenizers" in m for m in one_line_errors(seen))
        view = await score(pilot)
        seen.clear()
        await keys(pilot, "d")
        assert one_line_errors(seen) == [NO_SECOND_MODEL] and view.mode == "loss"
        await keys(pilot, "escape")
        # ... and by the Text view, had it been set beside the model another way.
        foreign = load_portable_model(other)
        generation.session.second, generation.session.second_path = foreign, other
        view = await score(pilot)
        assert view is not None and view.view.compare_refused
        seen.clear()
        await keys(pilot, "d")
        refused = one_line_errors(seen)
        assert len(refused) == 1 and "different tokenizers" in refused[0] and view.mode == "loss"
