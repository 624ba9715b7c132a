"""A learner's first day, the frictions they met (issue 41), each held here: the new-run form
starts at its first field with the preset's values as values; the Generation form's first
field is the prompt; sampling is a key away and says so; a reset forgets the decision looked
inside; the events keep their newest line in view across a resize and take what a key asked
for instead of a toast over them; `v` says why it does nothing on a large terminal; the
second-model dialog lists the runs' checkpoints as the compare dialog does; the loss table
explains its mark and loss-scale columns; the runs tree says how each run was left and the
Training screen names an unfinished run at launch and, after a run, how to train a longer one.
"""

from __future__ import annotations

import json
from pathlib import Path

from textual.widgets import Input, Select

from minigpt_tui.engine.session.run_store import RunStore
from minigpt_tui.screens.checkpoints import CheckpointsScreen
from minigpt_tui.screens.generation import GenerationScreen
from minigpt_tui.screens.help_texts import TRAINING_HELP
from minigpt_tui.screens.new_run import NewRunScreen
from minigpt_tui.screens.path_prompt import PathPromptScreen
from minigpt_tui.screens.run_reminders import LONGER_RUN_HINT, unfinished_note
from minigpt_tui.screens.training import TrainingScreen
from minigpt_tui.widgets.event_log import EventLog
from minigpt_tui.widgets.insight_panel import InsightPanel
from minigpt_tui.widgets.loss_table import LossTable
from minigpt_tui.widgets.prefix_view import PrefixView
from minigpt_tui.widgets.run_tree import RunTree, run_label
from tests.app_support import (
    make_app,
    open_generation,
    plain,
    press_settled,
    record_notifications,
    run_async,
    settle,
)

README = Path(__file__).resolve().parents[2] / "README.md"


def write_live(run_dir: Path, state: str, step: int, steps: int) -> None:
    """How a trainer that has gone left the run (what it writes in live.json)."""
    (run_dir / "live.json").write_text(json.dumps(
        {"at": 0.0, "host": "elsewhere", "listening": False, "pid": 1, "state": state, "step": step, "steps": steps}))


# -- the new-run form --------------------------------------------------------------------------------
@run_async
async def test_the_new_run_form_starts_at_its_first_field_with_the_presets_values_as_values(tmp_path):
    app = make_app(tmp_path / "runs")  # the tiny preset: 4 updates, bundled:tiny.txt
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("n")
        await settle(pilot)
        form = app.screen
        assert isinstance(form, NewRunScreen)
        assert form.focused is form.query_one("#preset", Select)  # was the corpus field, mid-form
        steps, corpus = form.query_one("#steps", Input), form.query_one("#corpus", Input)
        assert steps.value == "4" and corpus.value == "bundled:tiny.txt"  # were placeholders
        assert form.query_one("#save_every", Input).value == "0"
        steps.value = "9"  # edited: a new preset keeps it; the fields left as filled follow the preset
        form.query_one("#preset", Select).value = "mini"
        await pilot.pause()
        assert steps.value == "9" and corpus.value == "bundled:teaching.txt"
        assert form.query_one("#save_every", Input).value == "100"
        request = form.form().request(tmp_path / "runs")
        assert request.config.train.steps == 9 and request.config.corpus.source == "bundled:teaching.txt"


# -- the Generation form -----------------------------------------------------------------------------
@run_async
async def test_the_first_tab_into_the_generation_form_reaches_the_prompt_and_typing_stays_there(tmp_path):
    app = make_app(tmp_path / "runs")
    async with app.run_test(size=(80, 24)) as pilot:
        await press_settled(pilot, "g")
        screen = app.screen
        assert isinstance(screen, GenerationScreen)
        screen.query_one("#model", Input).value = "somewhere/model.safetensors"
        await pilot.press("tab", "h", "i")
        await pilot.pause()
        assert screen.focused is screen.query_one("#prompt", Input)
        assert screen.query_one("#prompt", Input).value == "hi"
        assert screen.query_one("#model", Input).value == "somewhere/model.safetensors"  # was "...safetensorshi"


@run_async
async def test_u_switches_between_greedy_and_sampling_and_the_prefix_says_so(runs):
    app = make_app(runs)
    async with app.run_test(size=(80, 24)) as pilot:
        seen = record_notifications(app)
        screen = await open_generation(pilot)
        await press_settled(pilot, "n")
        assert screen.query_one(PrefixView).border_title == "Prefix · greedy · u: sample"
        await press_settled(pilot, "u")
        assert screen.query_one("#rule", Select).value == "sample"
        assert not screen.query_one("#temperature", Input).disabled
        assert any(message.startswith("sampling:") for message, _ in seen)
        await press_settled(pilot, "n")  # starts over with the rule
        assert screen.query_one(PrefixView).border_title.startswith("Prefix · sample t=1")
        await press_settled(pilot, "u")
        assert screen.query_one("#rule", Select).value == "greedy" and screen.query_one("#temperature", Input).disabled


# -- the inside panel after a reset ------------------------------------------------------------------
@run_async
async def test_a_reset_forgets_the_decision_looked_inside(runs):
    app = make_app(runs)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_generation(pilot)
        await press_settled(pilot, "n", "n", "l")
        panel = screen.query_one(InsightPanel)
        assert panel.border_title == "Inside decision 2"
        await press_settled(pilot, "ctrl+r")
        assert screen.view is not None and not screen.view.decisions
        assert panel.border_title == "Inside" and panel.inspected is None  # said "Inside decision 2"
        await press_settled(pilot, "n")
        assert panel.border_title == "Inside decision 1"


# -- the events log ----------------------------------------------------------------------------------
@run_async
async def test_the_events_keep_their_newest_line_in_view_across_a_resize_unless_scrolled_up(tmp_path):
    app = make_app(tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        log = app.screen.query_one("#events", EventLog)
        for index in range(30):
            log.record("saved", f"update {index}: a line long enough to wrap on a narrower terminal " * 2)
        log.record("finished", "at update 600")
        await pilot.pause()
        assert log.scroll_y == log.max_scroll_y > 0
        await pilot.resize_terminal(80, 24)  # a shorter box, every line wrapped again
        await settle(pilot)
        assert log.scroll_y == log.max_scroll_y  # was left where the taller box had it
        assert log.lines and log.max_scroll_y > 0
        log.focus()
        await pilot.press("home")  # the reader goes back to older lines
        await settle(pilot)
        assert log.scroll_y == 0 and not log.following
        await pilot.resize_terminal(120, 40)
        await settle(pilot)
        assert log.scroll_y == 0  # the reader's place is kept


@run_async
async def test_v_on_a_terminal_that_shows_both_views_says_why_it_does_nothing(runs):
    app = make_app(runs)
    async with app.run_test(size=(120, 40)) as pilot:
        seen = record_notifications(app)
        await press_settled(pilot, "v")
        assert isinstance(app.screen, TrainingScreen) and not app.screen.has_class("-show-plot")
        assert any("both show from 120 columns" in message for message, _ in seen)
        await press_settled(pilot, "g", "v")
        assert not app.screen.has_class("-show-attention")
        assert any("34 rows or taller" in message for message, _ in seen)


@run_async
async def test_v_still_switches_the_views_on_a_small_terminal(runs):
    app = make_app(runs)
    async with app.run_test(size=(80, 24)) as pilot:
        await press_settled(pilot, "v")
        assert app.screen.has_class("-show-plot")
        await press_settled(pilot, "g", "v")
        assert app.screen.has_class("-show-attention")


# -- the second-model dialog -------------------------------------------------------------------------
@run_async
async def test_the_second_model_dialog_lists_the_runs_checkpoints_as_the_compare_dialog_does(runs):
    app = make_app(runs)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_generation(pilot)
        await press_settled(pilot, "m")
        dialog = app.screen
        assert isinstance(dialog, PathPromptScreen) and dialog.title_text == "Second model"
        assert [label for label, _ in dialog.choices] == ["tiny-a  step 4", "tiny-a  step 2"]
        await press_settled(pilot, "escape", "c")
        tree = app.screen.query_one(RunTree)
        assert dialog.choices == tuple(tree.checkpoint_choices(leaving_out=Path("/nowhere")))


# -- the loss table's columns ------------------------------------------------------------------------
@run_async
async def test_the_loss_table_explains_its_mark_and_loss_scale_columns(tmp_path):
    app = make_app(tmp_path / "runs")
    async with app.run_test(size=(100, 30)):
        tooltip = str(app.screen.query_one(LossTable).tooltip)
    assert "mark: ★ best" in tooltip and "extra" in tooltip and "loss scale:" in tooltip
    assert "- **mark**:" in TRAINING_HELP and "before the backward pass" in TRAINING_HELP


# -- how each run was left -----------------------------------------------------------------------------
def test_a_runs_status_is_how_its_trainer_left_it(runs):
    write_live(runs / "tiny-a", "stopped", 2, 4)
    write_live(runs / "tiny-empty", "finished", 4, 4)
    listings = {listing.name: listing for listing in RunStore(runs).scan()}
    assert plain(run_label(listings["tiny-a"])).split()[:5] == ["tiny-a", "stopped", "at", "2", "of"]
    assert listings["tiny-a"].resumable and not listings["tiny-empty"].resumable
    assert "finished" in plain(run_label(listings["tiny-empty"]))
    note = unfinished_note(tuple(listings.values()))
    assert note is not None and note.startswith("tiny-a stopped at 2 of 4: c opens it in Checkpoints, r resumes")


@run_async
async def test_at_launch_the_training_screen_names_the_unfinished_run_and_the_tree_its_status(runs):
    write_live(runs / "tiny-a", "stopped", 2, 4)
    app = make_app(runs)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        log = app.screen.query_one("#events", EventLog)
        assert [kind for kind, _ in log.entries] == ["unfinished"]
        assert log.entries[0][1].startswith("tiny-a stopped at 2 of 4: c opens it in Checkpoints")
        await press_settled(pilot, "c")
        assert isinstance(app.screen, CheckpointsScreen)
        labels = [plain(node.label) for node in app.screen.query_one(RunTree).root.children]
        assert any(label.startswith("tiny-a  stopped at 2 of 4") for label in labels)


@run_async
async def test_a_completed_run_says_how_to_train_a_longer_one(tmp_path):
    from tests.training_support import key, training, wait_until

    app = make_app(tmp_path / "runs")  # tiny: 4 updates, over in a moment
    async with app.run_test(size=(100, 30)) as pilot:
        screen = training(app)
        await key(pilot, "space")
        await wait_until(pilot, lambda: screen.run is not None and screen.run.state == "finished")
        await settle(pilot)
        log = screen.query_one("#events", EventLog)
        assert log.entries[-1] == ("next", LONGER_RUN_HINT)


def test_the_readme_says_how_long_make_test_takes():
    line = next(line for line in README.read_text().splitlines() if line.startswith("make test"))
    assert "minutes" in line


@run_async
async def test_an_event_line_wraps_within_the_box_at_80_columns(tmp_path):
    app = make_app(tmp_path / "runs")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        log = app.screen.query_one("#events", EventLog)
        log.record("unfinished", "x" * 30 + " c opens it in Checkpoints, r resumes it exactly where it stopped")
        await settle(pilot)
        assert max(strip.cell_length for strip in log.lines) <= log.scrollable_content_region.width  # cut 2 off
        assert "".join(strip.text for strip in log.lines).count("Checkpoints") == 1
