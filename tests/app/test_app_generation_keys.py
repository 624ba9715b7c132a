"""The Generation screen's keys and labels: f forces any id or piece typed in its field,
arriving on the screen (or tabbing round it) never hands a key to the model field, every
probability follows one rule, the lens names only what it reads, the second model is
named, and the small labels the Checkpoints screen shares with it read right."""

from __future__ import annotations

import re
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import safetensors.numpy
from textual.app import App
from textual.widgets import Input

from minigpt_tui.engine.analysis.generation import DecisionStepper, GenerationRule
from minigpt_tui.engine.models.model_file import load_portable_model
from minigpt_tui.screens.generation import GenerationScreen
from minigpt_tui.screens.path_prompt import PathPromptScreen
from minigpt_tui.widgets.candidate_table import CandidateTable
from minigpt_tui.widgets.decision_list import DecisionList
from minigpt_tui.widgets.insight_panel import InsightPanel
from minigpt_tui.widgets.numbers import short_probability, table_probability
from tests.app_support import (
    chosen_ids,
    make_app,
    open_generation,
    plain,
    record_notifications,
    run_async,
    saved_model_file,
    settle,
    static_text,
)
from tests.app_support import press_settled as keys

SIZE = (80, 24)



async def force_typed(pilot, typed: str) -> None:
    """Press f at the selected decision, type ``typed`` in the field and press enter."""
    await keys(pilot, "f")
    assert isinstance(pilot.app.screen, PathPromptScreen)
    pilot.app.screen.query_one(Input).value = typed
    await keys(pilot, "enter")


# -- f takes any id or piece -----------------------------------------------------------------------
@run_async
async def test_f_forces_any_id_or_piece_typed_in_its_field_and_refuses_unknown_ones(
    runs,
):
    portable = load_portable_model(saved_model_file(runs))
    reference = DecisionStepper.from_portable(portable, "ab", GenerationRule.greedy())
    reference.step()
    tokenizer = reference.tokenizer
    app = make_app(runs)
    notes = record_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot)
        await keys(pilot, "n", "n", "n")
        shown = {c.id for c in screen.query_one(CandidateTable).decision.candidates}
        # An eligible id the candidate table does not list (outside the 16 shown).
        hidden = next(
            a.id
            for a in reversed(reference.decisions[0].alternatives)
            if a.id not in shown and a.id > 1
        )
        screen.query_one(DecisionList).move_cursor(row=1)
        await pilot.pause()
        await keys(pilot, "f", *str(hidden))  # typed key by key into the dialog's field
        assert pilot.app.screen.query_one(Input).value == str(hidden)
        await keys(pilot, "enter")
        forced = screen.view.decisions[1]
        assert (
            len(screen.view.decisions) == 2
            and forced.forced
            and forced.chosen.id == hidden
        )
        expected = DecisionStepper.from_portable(
            portable, "ab", GenerationRule.greedy()
        )
        expected.step()
        expected.force(hidden)
        assert chosen_ids(screen) == [d.chosen.id for d in expected.decisions]
        # A piece as the screens draw it (a space as ·), and a piece of digits in quotes.
        spaced = next(
            i for i in range(tokenizer.vocab_size) if " " in tokenizer.piece_text(i)
        )
        await force_typed(pilot, tokenizer.piece_text(spaced).replace(" ", "·"))
        assert screen.view.decisions[1].chosen.id == spaced
        await force_typed(pilot, '"8"')
        assert (
            screen.view.decisions[1].chosen.id == tokenizer.encode_bytes(b"8")[0] != 8
        )
        # An unknown piece, an id outside the vocabulary, broken quotes: one error line each, nothing changed.
        before = screen.view.decisions
        for typed, says in (
            ("zq~unknown", "no token has the piece zq~unknown"),
            (str(tokenizer.vocab_size + 5), "outside the vocabulary"),
            ('"a\\q"', "does not read as quoted text"),
        ):
            notes.clear()
            await force_typed(pilot, typed)
            errors = [m for m, s in notes if s == "error"]
            assert len(errors) == 1 and says in errors[0] and "\n" not in errors[0], (
                typed,
                notes,
            )
            assert screen.view.decisions == before
        assert app.screen is screen


# -- the keyboard and the model field ------------------------------------------------------------
@run_async
async def test_arriving_on_generation_and_pressing_g_again_keeps_the_suggested_model(
    runs,
):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        await keys(pilot, "g")
        screen = app.screen
        assert isinstance(screen, GenerationScreen)
        field = screen.query_one("#model", Input)
        assert field.value == "tiny-a:latest"
        assert not isinstance(screen.focused, Input)
        await keys(pilot, "g", "t", "g")
        assert app.screen is screen and field.value == "tiny-a:latest"
        assert not isinstance(screen.focused, Input)
        # Leaving from a field (the palette switches screens too) and coming back: the keys act.
        screen.query_one("#prompt", Input).focus()
        await pilot.pause()
        app.action_show_screen("training")
        await settle(pilot)
        await keys(pilot, "g")
        assert app.screen is screen and not isinstance(screen.focused, Input)
        await keys(pilot, "g")
        assert (
            field.value == "tiny-a:latest"
            and screen.query_one("#prompt", Input).value == ""
        )
        # n loads the suggested model and takes a decision.
        await keys(pilot, "n")
        assert screen.view is not None and len(screen.view.decisions) == 1


@run_async
async def test_tab_from_the_candidates_reaches_the_prompt_and_keeps_its_text(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot)
        await keys(pilot, "n")
        assert isinstance(screen.focused, CandidateTable)
        await keys(pilot, "tab")
        field = screen.query_one("#prompt", Input)
        assert screen.focused is field
        assert (
            field.selection.start == field.selection.end == len(field.value)
        )  # nothing selected
        await keys(pilot, "x")
        assert field.value == "abx"  # added at the end of the prompt; the model's name untouched
        assert screen.query_one("#model", Input).value == "tiny-a:latest"


# -- labels -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.4778, "0.4778"),
        (0.005, "0.0050"),
        (0.0025, "2.5e-3"),
        (0.0006, "6.0e-4"),
        (5.6e-5, "5.6e-5"),
        (0.0, "0"),
        (1.0, "1.0000"),
    ],
)
def test_every_probability_under_0_005_is_written_with_an_exponent(value, shown):
    assert table_probability(value) == shown
    assert ("e-" in short_probability(value)) == ("e-" in shown)


@run_async
async def test_the_candidates_and_the_decision_line_follow_the_probability_rule(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot)
        await keys(pilot, "n")
        table = screen.query_one(CandidateTable)
        small = 0
        for row, candidate in enumerate(table.decision.candidates):
            cells = [plain(cell).strip() for cell in table.get_row_at(row)]
            assert cells[4] == table_probability(candidate.raw_probability)
            assert cells[6] == table_probability(candidate.selection_probability)
            small += candidate.raw_probability < 0.005
        assert small > 0  # an untrained model: every probability is small
        cells = " ".join(
            plain(c) for r in range(table.row_count) for c in table.get_row_at(r)
        )
        assert not re.search(
            r"\b0\.00[0-4]\d\b", cells
        )  # never four decimals under 0.005
        chosen = screen.view.decisions[0].chosen
        info = static_text(screen, "#decision-info")
        assert f"raw {table_probability(chosen.raw_probability)}" in info
        listed = screen.query_one(DecisionList).get_row_at(0)
        assert plain(listed[2]).strip() == short_probability(
            chosen.selection_probability
        )


@run_async
async def test_the_lens_and_parts_titles_name_the_decision_and_the_head_view_its_block_and_head(
    runs,
):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot)
        await keys(pilot, "n", "n", "l")
        panel = screen.query_one(InsightPanel)
        assert str(panel.border_title) == "Inside decision 2"
        await keys(pilot, "x")
        assert str(panel.border_title) == "Inside decision 2"
        await keys(pilot, "h")
        assert str(panel.border_title) == "Inside decision 2 · block 0 head 0"
        assert "{ } head" in str(panel.border_subtitle)
        await keys(pilot, "l")
        assert str(panel.border_title) == "Inside decision 2" and "block" not in str(
            panel.border_subtitle
        )


@run_async
async def test_the_second_model_is_named_under_the_decisions(runs, tmp_path):
    copy = tmp_path / "other-model.safetensors"
    shutil.copyfile(saved_model_file(runs), copy)
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot)
        await keys(pilot, "n", "n")
        listed = screen.query_one(DecisionList)
        assert not str(listed.border_subtitle)
        for spec, name in (
            ("tiny-a:2", "B: tiny-a step 2"),
            (str(copy), "B: other-model.safetensors"),
        ):
            await keys(pilot, "m")
            app.screen.query_one(Input).value = spec
            await keys(pilot, "enter")
            assert str(listed.border_subtitle) == name
        await keys(pilot, "m")
        app.screen.query_one(Input).value = "none"
        await keys(pilot, "enter")
        assert not str(listed.border_subtitle)


# -- labels the Generation and Checkpoints screens show about a model -------------------------------
@run_async
async def test_a_gpt2_models_settings_leave_out_rope_base_and_a_llamas_the_gelu_variant(
    tmp_path,
):
    from lens_support import BYTES_ONLY, varied_model

    from minigpt_tui.engine.formats.inspect import inspect_path
    from minigpt_tui.engine.formats.portable import save_portable_model
    from minigpt_tui.widgets.state_view import StateView

    class StateApp(App):
        def compose(self):
            yield StateView()

    for family, absent, present in (
        ("gpt2", "rope_base", "gelu_approximation"),
        ("llama", "gelu_approximation", "rope_base"),
    ):
        path = tmp_path / f"{family}.safetensors"
        save_portable_model(varied_model(family), BYTES_ONLY, path)
        state = inspect_path(path).state
        app = StateApp()
        async with app.run_test(size=(100, 60)) as pilot:
            view = app.query_one(StateView)
            view.show_state(state)
            await pilot.pause()
            group = next(
                n for n in view.root.children if str(n.label).startswith("model_config")
            )
            names = [str(leaf.label).split(":")[0] for leaf in group.children]
            assert "family" in names and absent not in names and present in names, (
                family,
                names,
            )


@run_async
async def test_a_constant_tensors_histogram_says_1_bin(tmp_path):
    from minigpt_tui.engine.formats.inspect import tensor_statistics
    from minigpt_tui.widgets.tensor_detail import HISTOGRAM_BINS, TensorDetail

    path = tmp_path / "ones.safetensors"
    safetensors.numpy.save_file({"ones": np.ones(6, np.float32)}, str(path))
    stats = tensor_statistics(path, "ones", HISTOGRAM_BINS)
    assert len(stats["histogram"]["counts"]) == 1
    entry = SimpleNamespace(
        name="ones",
        file="ones.safetensors",
        dtype="F32",
        shape=[6],
        elements=6,
        bytes=24,
        begin=0,
        end=24,
        group="tensors",
    )

    class DetailApp(App):
        def compose(self):
            yield TensorDetail()

    app = DetailApp()
    async with app.run_test(size=(100, 40)) as pilot:
        detail = app.query_one(TensorDetail)
        detail.show_statistics(entry, str(path), stats)
        await pilot.pause()
        text = static_text(detail, "#detail-stats")
        assert "histogram (1 bin of" in text and "1 bins" not in text


# -- r shows a run's decisions as they come, and r again stops it ----------------------------------
@run_async
async def test_a_run_shows_its_decisions_as_they_come_and_r_again_stops_it(runs, monkeypatch):
    import time

    import minigpt_tui.engine.session.operations as operations

    monkeypatch.setattr(operations, "PROGRESS_INTERVAL_S", 0.0)
    step = DecisionStepper.step

    def slow_step(self, *args, **kwargs):  # a decision of a larger model takes a while
        time.sleep(0.15)
        return step(self, *args, **kwargs)

    app = make_app(runs)
    seen = record_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot, prompt="a")  # the budget of 24, past the tiny context of 8
        monkeypatch.setattr(DecisionStepper, "step", slow_step)
        await pilot.press("r")
        for _ in range(100):  # the first decisions show while the run still goes on
            await pilot.pause(0.03)
            if screen.view is not None and len(screen.view.decisions) >= 1:
                break
        assert 1 <= len(screen.view.decisions) < 6 and not screen.queue.idle
        await pilot.press("r")
        await settle(pilot)
        made = len(screen.view.decisions)
        assert 1 <= made < 6 and not screen.view.finished
        assert ("stopping the run after this decision", "information") in seen
        assert (f"run stopped after decision {made}", "information") in seen
        monkeypatch.setattr(DecisionStepper, "step", step)
        await keys(pilot, "r")  # a new run takes it to the end
        await settle(pilot)
        assert screen.view.finished and len(screen.view.decisions) == 24 and screen.view.window_from == 8
