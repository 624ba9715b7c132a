"""The Generation screen on a real model: loading by path and RUN:latest, stepping, running,
going back, resetting, forcing, sampling, attention, saving the trace, every forward pass
off the UI thread, and every error path (one-line notification, the app keeps running,
nothing on disk changes)."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pytest
from textual.widgets import Input, OptionList, Select

from minigpt_tui.engine.models.model_file import load_portable_model
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.analysis.generation import DecisionStepper, GenerationRule
from minigpt_tui.engine.core.tokenizer import BOS
from minigpt_tui.engine.session.generation import parse_settings
from minigpt_tui.screens.path_prompt import PathPromptScreen
from minigpt_tui.widgets.attention_view import AttentionView
from minigpt_tui.widgets.candidate_table import CandidateTable
from minigpt_tui.widgets.decision_list import DecisionList
from minigpt_tui.widgets.numbers import short_probability
from tests.app_support import chosen_ids, record_notifications, run_async, make_app, settle, static_text, tree_snapshot, saved_model_file as model_file, press_settled as keys, open_generation

SIZE = (80, 24)  # the smallest supported terminal; rendering more cells only costs test time
PROMPT = "ab"


def engine_stepper(runs: Path, rule: GenerationRule, prompt: str = PROMPT) -> DecisionStepper:
    return DecisionStepper.from_portable(load_portable_model(model_file(runs)), prompt, rule)


@run_async
async def test_the_model_field_is_filled_with_the_newest_run_and_loads_on_enter(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot, model=None)
        assert screen.query_one("#model", Input).value == "tiny-a:latest"
        assert screen.view is None
        screen.query_one("#model", Input).focus()
        await pilot.press("enter")
        await settle(pilot)
        assert screen.view is not None and screen.view.model_label == str(model_file(runs))
        tokenizer = load_portable_model(model_file(runs)).tokenizer
        assert [p.id for p in screen.view.prompt] == tokenizer.encode_prompt(PROMPT)
        assert screen.view.prompt[0].text == "<bos>"
        # ? explains every record of this screen.
        screen.query_one(CandidateTable).focus()
        await pilot.press("question_mark")
        await pilot.pause()
        text = app.screen.markdown
        for record in ("raw p", "sel p", "elig", "entropy", "Attention", "stop", "UTF-8", "forced", "budget"):
            assert record in text, record


@run_async
async def test_step_run_back_and_reset_match_the_engine(runs):
    expected = engine_stepper(runs, GenerationRule.greedy())
    expected.run()
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot)
        # Keys pressed faster than the worker decides are applied in order.
        await pilot.press("n", "n", "n", "backspace", "backspace")
        await settle(pilot)
        view = screen.view
        assert len(view.decisions) == 1
        first = view.decisions[0]
        reference = expected.decisions[0]
        assert first.chosen.id == reference.chosen.id and first.rule_choice.id == reference.rule_choice
        assert first.entropy == pytest.approx(reference.entropy, abs=0)
        table = screen.query_one(CandidateTable)
        assert table.row_count == len(first.candidates) >= 16
        top = first.candidates[0]
        assert (top.rank, top.id, top.logit) == (1, reference.alternatives[0].id, reference.alternatives[0].logit)
        assert [c.rank for c in first.candidates] == sorted(c.rank for c in first.candidates)
        bos = [c for c in first.candidates if c.id == BOS]
        assert all(not c.eligible and c.selection_probability == 0 for c in bos)
        await keys(pilot, "r")
        assert chosen_ids(screen) == [d.chosen.id for d in expected.decisions]
        assert screen.view.finished and screen.view.stop_reason == expected.stop_reason
        output = expected.output()
        assert list(screen.view.output.generated_bytes) == output["generated_bytes"]
        status = static_text(screen, "#gen-output")
        assert f"stop: {expected.stop_reason}" in status
        assert f"{len(output['generated_bytes'])} byte" in status and "UTF-8" in status
        await keys(pilot, "backspace")
        assert chosen_ids(screen) == [d.chosen.id for d in expected.decisions][:-1]
        assert not screen.view.finished
        await keys(pilot, "n")
        assert chosen_ids(screen) == [d.chosen.id for d in expected.decisions]
        await keys(pilot, "ctrl+r")
        assert screen.view.decisions == ()
        assert screen.query_one(DecisionList).row_count == 0


@run_async
async def test_force_takes_the_highlighted_candidate_and_continues_from_there(runs, tmp_path):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot)
        await keys(pilot, "n", "n", "n")
        # Select decision 2, highlight its third candidate, force it.
        decisions = screen.query_one(DecisionList)
        decisions.move_cursor(row=1)
        await pilot.pause()
        table = screen.query_one(CandidateTable)
        target = table.decision.candidates[2]
        table.focus()
        table.move_cursor(row=2)
        await keys(pilot, "f")  # enter on the empty field takes the highlighted candidate
        assert isinstance(app.screen, PathPromptScreen) and app.screen.query_one(Input).value == ""
        assert f"id {target.id}" in str(app.screen.query_one(OptionList).get_option_at_index(0).prompt)
        await keys(pilot, "enter")
        view = screen.view
        assert len(view.decisions) == 2  # decisions after the forced one were undone
        forced = view.decisions[1]
        assert forced.forced and forced.chosen.id == target.id and forced.rule_choice.id != target.id
        assert view.forced_steps == frozenset({2})
        # The engine, forced the same way, agrees; then continue with the rule.
        reference = engine_stepper(runs, GenerationRule.greedy())
        reference.step()
        reference.force(target.id)
        reference.run()
        await keys(pilot, "r")
        assert chosen_ids(screen) == [d.chosen.id for d in reference.decisions]
        # Save the trace: the forced decision is marked as such.
        target_file = tmp_path / "trace.json"
        await pilot.press("w")
        await pilot.pause()
        assert isinstance(app.screen, PathPromptScreen)
        app.screen.query_one(Input).value = str(target_file)
        await pilot.press("enter")
        await settle(pilot)
        trace = json.loads(target_file.read_text("utf-8"))
        assert trace["format"] == "minigpt-tui-generation-trace"
        assert [d["forced"] for d in trace["decisions"]][:3] == [False, True, False]
        assert trace["decisions"][1]["chosen"]["id"] == target.id
        assert trace["model"]["path"] == str(model_file(runs))
        assert trace["output"]["generated_ids"] == chosen_ids(screen)
        # A folder is no place for a trace: refused, nothing written.
        seen = record_notifications(app)
        await pilot.press("w")
        await pilot.pause()
        app.screen.query_one(Input).value = str(tmp_path)
        await pilot.press("enter")
        await settle(pilot)
        assert any(s == "error" for _, s in seen)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["trace.json", "runs", "files"])
        # An existing trace is kept; the refusal offers no command-line option the app lacks.
        before = target_file.read_bytes()
        await pilot.press("w")
        await pilot.pause()
        app.screen.query_one(Input).value = str(target_file)
        await pilot.press("enter")
        await settle(pilot)
        assert (f"{target_file} already exists: choose a new path", "error") in seen
        assert not [m for m, _ in seen if "--force" in m]
        assert target_file.read_bytes() == before


@run_async
async def test_sampling_with_a_seed_matches_the_engine_and_shows_draws(runs):
    rule = GenerationRule.sample(0.8, top_k=5, top_p=0.9, seed=7)
    reference = engine_stepper(runs, rule)
    reference.run()
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot)
        screen.query_one("#rule", Select).value = "sample"
        await pilot.pause()
        for name, value in (("temperature", "0.8"), ("top_k", "5"), ("top_p", "0.9"), ("seed", "7")):
            field = screen.query_one(f"#{name}", Input)
            assert not field.disabled
            field.value = value
        screen.query_one(CandidateTable).focus()
        await keys(pilot, "r")
        assert chosen_ids(screen) == [d.chosen.id for d in reference.decisions]
        first = screen.view.decisions[0]
        assert first.draw == reference.decisions[0].draw and first.retained <= 5
        assert sum(1 for c in first.candidates if c.selection_probability > 0) == first.retained
        # The kept column says what the rule dropped: cut beside an eligible id outside top-k / top-p.
        table = screen.query_one(CandidateTable)
        table.show_decision(screen.view.decisions[0])
        marks = [table.get_cell_at((row, 7)).plain for row in range(len(first.candidates))]
        for candidate, mark in zip(first.candidates, marks):
            expected = "✗" if not candidate.eligible else ("✓" if candidate.selection_probability > 0 else "cut")
            assert mark == expected, (candidate, mark)
        assert "cut" in marks
        assert "draw" in static_text(screen, "#decision-info")
        assert "sample t=0.8 k=5 p=0.9 seed=7" in str(screen.query_one("#prefix").border_title)


@run_async
async def test_at_80_columns_every_candidate_column_and_key_hint_fits(runs):
    from minigpt_tui.widgets.key_bar import KeyBar

    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot)
        await keys(pilot, "r")
        table = screen.query_one(CandidateTable)
        width = sum(column.get_render_width(table) for column in table.columns.values())
        assert width <= table.scrollable_content_region.width
        assert (table.fit.piece, table.fit.bar) == (8, 3)
        assert len(table.get_cell_at((0, 5)).plain) == 3  # the bar column, 3 cells of 8 steps each
        # An almost untrained model: every probability is small, yet the bars are scaled to show.
        candidates = screen.view.decisions[-1].candidates
        assert max(c.raw_probability for c in candidates) < 0.1
        assert table.get_cell_at((0, 5)).plain == "███" and table.get_cell_at((1, 5)).plain.strip()
        line = screen.query_one(KeyBar).render().plain
        assert len(line) <= SIZE[0]
        for hint in ("n Next", "r Run", "⌫ Back", "^r Reset", "f Force", "w Save", "l Lens", "x Parts", "h Head", "t c g", "?"):
            assert hint in line, hint
        await pilot.resize_terminal(120, 40)
        await settle(pilot)
        assert (table.fit.piece, table.fit.bar) == (10, 8)
        assert table.row_count == len(screen.view.decisions[-1].candidates)


@run_async
async def test_at_80_columns_a_long_piece_is_cut_and_every_decision_number_and_probability_shows(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot)
        await keys(pilot, "r")
        first = screen.view.decisions[0]
        # More rows than fit (a scrollbar), two-digit and forced steps, and a long piece.
        decisions = tuple(
            dataclasses.replace(first, step=step, forced=step % 3 == 0,
                                chosen=dataclasses.replace(first.chosen, piece=" Answer: ",
                                                           selection_probability=0.1284))
            for step in range(1, 21))
        listed = screen.query_one(DecisionList)
        listed.show_decisions(decisions, select=20)
        await settle(pilot)
        width = sum(column.get_render_width(listed) for column in listed.columns.values())
        assert width <= listed.scrollable_content_region.width
        lines = [listed.render_line(y).text for y in range(1, listed.size.height)]
        assert len(lines) >= 10
        for line in lines:
            step, piece, shown = line.split()
            assert int(step.rstrip("*")) in range(1, 21) and step.endswith("*") == (int(step.rstrip("*")) % 3 == 0)
            assert piece.startswith("·A") and piece.endswith("…"), line
            assert shown == "0.13", line  # the chosen id's selection probability, two decimals
        await pilot.resize_terminal(120, 40)
        await settle(pilot)
        assert listed.piece_width == len("·Answer:·")  # room for 10; no wider than the widest piece
        assert listed.get_cell_at((0, 1)).plain == "·Answer:·"
        assert listed.cursor_row == 19


@run_async
async def test_the_palette_lists_the_generation_actions_and_runs_them(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot)
        commands = {command.title: command for command in app.get_system_commands(screen)}
        for title in ("Next decision", "Run to the end", "Back one decision", "Reset to the prompt", "Save trace"):
            assert title in commands, title
        await commands["Next decision"].callback()
        await settle(pilot)
        assert len(screen.view.decisions) == 1
        await commands["Run to the end"].callback()
        await settle(pilot)
        assert screen.view.finished
        made = len(screen.view.decisions)
        await commands["Back one decision"].callback()
        await settle(pilot)
        assert len(screen.view.decisions) == made - 1
        await commands["Reset to the prompt"].callback()
        await settle(pilot)
        assert not screen.view.decisions
        await commands["Next decision"].callback()
        await settle(pilot)
        await commands["Save trace"].callback()
        await pilot.pause()
        assert isinstance(app.screen, PathPromptScreen)


@run_async
async def test_attention_view_shows_every_layer_and_head(runs):
    app = make_app(runs)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_generation(pilot)
        await keys(pilot, "n", "n")
        decision = screen.view.decisions[-1]
        assert decision.attention is not None and len(decision.attention) == 3  # tiny: 3 layers, 1 head
        for heads in decision.attention:
            for weights in heads:
                assert len(weights) == decision.prefix_length
                assert sum(weights) == pytest.approx(1.0, abs=1e-9)
        view = screen.query_one(AttentionView)
        text = view.plain
        assert "block 0 head 0" in text and "block 2 head 0" in text and "past the first position" in text
        assert len(text.splitlines()) == 1 + 3 + 1  # the axis, a row per layer and head, the legend
        painted = "\n".join(view.render_line(y).text for y in range(view.size.height))
        assert "block 0 head 0" in painted  # the lines in view are painted


@run_async
async def test_forward_passes_and_loading_never_run_on_the_ui_thread(runs, monkeypatch):
    from minigpt_tui.engine.models import model as model_module
    from minigpt_tui.engine.models import model_file as portable

    threads: list[threading.Thread] = []
    forward = model_module.MiniGPT.forward
    load = portable.load_portable_model

    def spy_forward(self, *args, **kwargs):
        threads.append(threading.current_thread())
        return forward(self, *args, **kwargs)

    def spy_load(*args, **kwargs):
        threads.append(threading.current_thread())
        return load(*args, **kwargs)

    monkeypatch.setattr(model_module.MiniGPT, "forward", spy_forward)
    monkeypatch.setattr(portable, "load_portable_model", spy_load)
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot)
        await keys(pilot, "n", "r", "backspace", "n")
        assert screen.view.finished
    assert len(threads) >= 3 and all(t is not threading.main_thread() for t in threads)


@run_async
async def test_invalid_values_and_models_are_notified_and_change_nothing(runs):
    before = tree_snapshot(runs.parent)
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        screen = await open_generation(pilot)
        await keys(pilot, "n")
        good = chosen_ids(screen)
        files = runs.parent / "files"
        cases = [
            # (the bad value, who refuses it: loading the model, the form (a malformed number or
            # one the rule refuses), or the start (a prompt that leaves no room in the context))
            ({"model": str(files / "garbage.safetensors")}, "load failed"),
            ({"model": str(files / "foreign.safetensors")}, "load failed"),
            ({"model": str(runs / "nowhere")}, "load failed"),
            ({"model": "tiny-a:best"}, "load failed"),  # the tiny run never evaluated: no best
            ({"model": "tiny-empty:latest"}, "load failed"),
            ({"budget": "many"}, "invalid value"),
            ({"rule": "sample", "temperature": "hot"}, "invalid value"),
            ({"rule": "sample", "top_p": "2"}, "invalid value"),
            ({"rule": "sample", "temperature": "0"}, "invalid value"),
            ({"rule": "sample", "top_k": "0"}, "invalid value"),
            ({"budget": "0"}, "invalid value"),
            ({"prompt": "a long prompt that cannot fit"}, "start failed"),  # context 8
        ]
        titles: list[str] = []
        recording = app.notify

        def notify_with_title(message, *, title="", **kwargs):
            titles.append(title)
            return recording(message, title=title, **kwargs)

        app.notify = notify_with_title
        for change, refused_by in cases:
            # Back to the good settings, then apply one bad value and press n.
            screen.query_one("#model", Input).value = "tiny-a:latest"
            screen.query_one("#prompt", Input).value = PROMPT
            screen.query_one("#rule", Select).value = "greedy"
            for name in ("temperature", "top_k", "top_p", "seed", "budget"):
                screen.query_one(f"#{name}", Input).value = ""
            await settle(pilot)
            seen.clear()
            titles.clear()
            for name, value in change.items():
                if name == "rule":
                    screen.query_one("#rule", Select).value = value
                    await pilot.pause()
                else:
                    screen.query_one(f"#{name}", Input).value = value
            screen.query_one(CandidateTable).focus()
            await keys(pilot, "n")
            errors = [m for m, s in seen if s == "error"]
            assert len(errors) == 1, (change, seen)
            assert "\n" not in errors[0] and "Traceback" not in errors[0], errors[0]
            assert titles[[s for _, s in seen].index("error")] == refused_by, (change, titles)
            assert app.is_running
        # Forcing an ineligible id (BOS) is refused.
        screen.query_one("#model", Input).value = "tiny-a:latest"
        screen.query_one("#prompt", Input).value = PROMPT
        screen.query_one("#rule", Select).value = "greedy"
        for name in ("temperature", "top_k", "top_p", "seed", "budget"):
            screen.query_one(f"#{name}", Input).value = ""
        screen.query_one(CandidateTable).focus()
        await keys(pilot, "ctrl+r", "n")
        assert chosen_ids(screen) == good
        table = screen.query_one(CandidateTable)
        bos_row = next(i for i, c in enumerate(table.decision.candidates) if c.id == BOS)
        table.move_cursor(row=bos_row)
        seen.clear()
        await keys(pilot, "f", "enter")
        assert any("not eligible" in m for m, s in seen if s == "error")
        assert chosen_ids(screen) == good
    assert tree_snapshot(runs.parent) == before


def test_the_form_parses_numbers_and_ignores_sampling_fields_under_greedy():
    assert parse_settings("hi", "greedy", "junk", "junk", "junk", "junk", "") == parse_settings(
        "hi", "greedy", "", "", "", "", "24")
    sample = parse_settings("hi", "sample", "0.5", "3", "0.9", "1_000", "10")
    assert sample.rule == GenerationRule.sample(0.5, top_k=3, top_p=0.9, seed=1000, max_new_tokens=10)
    blank = parse_settings("", "sample", "", "", "", "", "")
    assert blank.rule == GenerationRule.sample()
    with pytest.raises(GenerationError, match="temperature must be a finite number above 0"):
        parse_settings("hi", "sample", "0", "", "", "", "")



@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_snapshot_generation_screen(saved, tmp_path, snap_compare, size):
    runs = saved.copy_to(tmp_path)

    async def run_before(pilot):
        screen = await open_generation(pilot)
        await keys(pilot, "n", "n", "n") if size == (80, 24) else await keys(pilot, "r")
        pilot.app.clear_notifications()
        screen.query_one(CandidateTable).focus()
        await pilot.pause()

    assert snap_compare(make_app(runs), terminal_size=size, run_before=run_before)


@run_async
async def test_lens_contributions_and_head_pattern_of_the_selected_decision(runs):
    from minigpt_tui.engine.analysis.lens import inspect_decision
    from minigpt_tui.widgets.insight_panel import InsightPanel

    expected = engine_stepper(runs, GenerationRule.greedy())
    expected.run()
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot)
        await keys(pilot, "r")
        panel = screen.query_one(InsightPanel)
        assert not panel.display
        await keys(pilot, "l")
        assert panel.display and not screen.query_one(CandidateTable).display
        last = expected.decisions[-1]
        reference = inspect_decision(expected.model, expected.tokenizer, last.prefix_ids, last.chosen.id,
                                     lens=True, contributions=True, pattern=(0, 0))
        view = screen.insight
        assert view.step == len(expected.decisions)
        assert [row.chosen_rank for row in view.lens] == [row.chosen_rank for row in reference.lens]
        assert view.lens[-1].chosen_rank == last.chosen.rank
        lens_lines = static_text(panel, "#lens-text").splitlines()
        assert lens_lines[0].startswith("chosen") and len(lens_lines) >= 2 + expected.model.config.layers + 1
        await keys(pilot, "x")
        parts = static_text(panel, "#contributions-text")
        assert f"parts add up to {reference.contributions[0].total:+.6f}" in parts
        await keys(pilot, "h")
        assert "block 0 head 0" in static_text(panel, "#head-pattern-text")
        await keys(pilot, "right_square_bracket")
        assert screen.insight.pattern.layer == 1
        assert "block 1 head 0" in static_text(panel, "#head-pattern-text")
        await keys(pilot, "right_curly_bracket")  # tiny has one head: stays at head 0
        assert screen.insight.pattern.head == 0
        await keys(pilot, "up")  # the panel follows the selected decision
        assert screen.insight.step == len(expected.decisions) - 1
        await keys(pilot, "h")
        assert not panel.display and screen.query_one(CandidateTable).display


@run_async
async def test_a_second_model_adds_its_probability_and_kl_to_each_decision(runs, tmp_path):
    from lens_support import BYTES_ONLY, varied_model
    from minigpt_tui.engine.formats.portable import save_portable_model

    other = tmp_path / "other.safetensors"
    save_portable_model(varied_model("llama"), BYTES_ONLY, other)
    app = make_app(runs)
    notes = record_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot)
        await keys(pilot, "r")
        await keys(pilot, "m")
        # The empty field says what it takes, as the other path prompts do.
        assert "RUN:STEP" in pilot.app.screen.query_one(Input).placeholder
        pilot.app.screen.query_one(Input).value = "tiny-a:latest"
        await keys(pilot, "enter")
        listed = screen.query_one(DecisionList)
        # At 80 columns p gives way to the second model's columns (the candidates show it).
        assert [str(c.label) for c in listed.columns.values()] == ["#", "piece", "pB", "KL"]
        width = sum(column.get_render_width(listed) for column in listed.columns.values())
        assert width <= listed.scrollable_content_region.width
        candidates = screen.query_one(CandidateTable)
        assert sum(c.get_render_width(candidates) for c in candidates.columns.values()) \
            <= candidates.scrollable_content_region.width
        for row, decision in enumerate(screen.view.decisions):
            cells = listed.get_row_at(row)
            assert cells[2].plain == short_probability(decision.chosen.raw_probability)
            assert cells[3].plain == "0.00"  # the same model: KL exactly 0
        assert all(o.kl == 0.0 and o.top1_agree for o in screen.view.second_opinions)
        await pilot.resize_terminal(130, 40)
        await settle(pilot)
        assert [str(c.label) for c in listed.columns.values()] == ["#", "piece", "p", "pB", "KL"]
        await pilot.resize_terminal(*SIZE)
        await settle(pilot)
        await keys(pilot, "m")
        pilot.app.screen.query_one(Input).value = str(other)
        await keys(pilot, "enter")
        assert any("different tokenizers" in message for message, _ in notes)
        assert len(screen.view.second_opinions) == len(screen.view.decisions)  # the first one stays
        await keys(pilot, "m")
        pilot.app.screen.query_one(Input).value = "none"
        await keys(pilot, "enter")
        assert [str(c.label) for c in listed.columns.values()] == ["#", "piece", "p"]
