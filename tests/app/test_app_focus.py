"""Focus and keys: text typed into a field stays in the field, escape leaves any field,
rename and delete need the runs tree, a panel or dialog with a field opens with the
keyboard in it, and the widget that has the keyboard always looks different."""

from __future__ import annotations

import pytest
from textual.keys import key_to_character
from textual.widgets import DataTable, Input, OptionList, Select, TabbedContent, TextArea

from minigpt_tui.screens.checkpoints import CheckpointsScreen
from minigpt_tui.screens.confirm_delete import ConfirmDeleteScreen
from minigpt_tui.screens.confirm_stop import ConfirmStopScreen
from minigpt_tui.screens.confirm_quit import ConfirmQuitScreen
from minigpt_tui.screens.generation import GenerationScreen
from minigpt_tui.screens.new_run import NewRunScreen
from minigpt_tui.screens.overlay import OverlayScreen
from minigpt_tui.screens.path_prompt import PathPromptScreen
from minigpt_tui.widgets.candidate_table import CandidateTable
from minigpt_tui.widgets.comparison_view import ComparisonView
from minigpt_tui.widgets.key_bar import KeyBar
from minigpt_tui.widgets.integrity_view import IntegrityView
from minigpt_tui.widgets.run_tree import RunTree
from minigpt_tui.widgets.tensor_detail import TensorDetail
from minigpt_tui.widgets.tensor_table import TensorTable
from tests.app_support import make_app, run_async, settle, tree_snapshot

SIZE = (80, 24)



def is_text_field(widget) -> bool:
    return isinstance(widget, (Input, TextArea))


async def open_screen(pilot, key: str, kind: type) -> object:
    await pilot.press(key)
    await settle(pilot)
    assert isinstance(pilot.app.screen, kind)
    return pilot.app.screen


async def type_text(pilot, text: str) -> None:
    await pilot.press(*("space" if character == " " else character for character in text))
    await pilot.pause()


# -- text typed into a field stays there --------------------------------------------------------------
@run_async
async def test_typing_into_the_tokenizer_panel_never_runs_a_shortcut(runs):
    before = tree_snapshot(runs)
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_screen(pilot, "c", CheckpointsScreen)
        assert isinstance(screen.focused, RunTree)
        await pilot.press("7")  # the Tokenizer panel opens with the keyboard in its field
        await settle(pilot)
        field = screen.query_one("#tokenizer-try", Input)
        assert screen.focused is field
        await type_text(pilot, "The key to delete")
        await settle(pilot)
        assert app.screen is screen  # no rename, delete or any other dialog
        assert field.value == "The key to delete"
        assert screen.query_one(TabbedContent).active == "tokenizer"
    assert tree_snapshot(runs) == before


@run_async
async def test_rename_and_delete_need_the_runs_tree_focused(runs):
    before = tree_snapshot(runs)
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_screen(pilot, "c", CheckpointsScreen)
        for panel_widget in (screen.query_one(TensorTable), screen.query_one(ComparisonView)):
            screen.set_focus(panel_widget)
            await pilot.pause()
            await pilot.press("e", "d")
            await settle(pilot)
            assert app.screen is screen, f"a letter reached rename/delete from {panel_widget}"
        assert tree_snapshot(runs) == before
        # With the tree focused they act on the run under its cursor, naming it first.
        screen.set_focus(screen.query_one(RunTree))
        await pilot.pause()
        await pilot.press("d")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmDeleteScreen) and app.screen.what == "run tiny-a"
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        assert isinstance(app.screen, PathPromptScreen) and "tiny-a" in app.screen.prompt
        await pilot.press("escape")
        await settle(pilot)
    assert tree_snapshot(runs) == before


def typed_character(key: str) -> str | None:
    """The character a key types, if any ("slash" is one Textual's own table leaves out)."""
    character = "/" if key == "slash" else key_to_character(key)
    return character if character is not None and character.isprintable() else None


def printable_binding_keys(*nodes) -> list[str]:
    """Every key bound on these nodes that types a character when a text field has it."""
    return sorted({key for node in nodes for key in node._bindings.key_to_bindings if typed_character(key)})


async def assert_every_bound_key_is_typed(pilot, screen, field: Input, expected: set[str]) -> None:
    """The screen's keys, the app's and those of every widget on the screen (the runs tree's
    rename and delete, the tensor table's sort), pressed in ``field``, are text in it."""
    field.value = ""
    screen.set_focus(field)
    await pilot.pause()
    keys = printable_binding_keys(screen, pilot.app, *screen.query("*"))
    assert expected <= set(keys)
    await pilot.press(*keys)
    await settle(pilot)
    assert pilot.app.screen is screen, f"{field.id}: a key opened {pilot.app.screen}"
    assert screen.focused is field
    assert field.value == "".join(typed_character(key) for key in keys)
    # The key bar lists none of them while the field has the keyboard.
    shown = {key for entry in screen.query_one(KeyBar).entries(narrow=False) for key, _display in entry.keys}
    assert not shown & set(keys), f"the key bar lists keys the field types: {shown & set(keys)}"


@run_async
async def test_no_letter_or_digit_key_acts_while_a_text_field_has_the_keyboard(runs):
    before = tree_snapshot(runs)
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        checkpoints = await open_screen(pilot, "c", CheckpointsScreen)
        checkpoint_keys = {"e", "d", "o", "m", "r", "8", "s", "slash", "q", "t", "g"}
        await assert_every_bound_key_is_typed(pilot, checkpoints, checkpoints.query_one("#tokenizer-try", Input),
                                              checkpoint_keys)
        await pilot.press("escape", "slash")  # leave the field; / opens the tensor filter
        await pilot.pause()
        assert checkpoints.has_class("-filtering")
        await assert_every_bound_key_is_typed(pilot, checkpoints, checkpoints.query_one("#tensor-filter", Input),
                                              checkpoint_keys)
        await pilot.press("escape")
        await pilot.pause()
        generation = await open_screen(pilot, "g", GenerationScreen)
        for field_id in ("#model", "#prompt"):
            await assert_every_bound_key_is_typed(pilot, generation, generation.query_one(field_id, Input),
                                                  {"n", "r", "f", "w", "l", "x", "m", "c"})
    assert tree_snapshot(runs) == before


# -- escape leaves a field; the screen's keys work again ----------------------------------------------
@run_async
async def test_escape_leaves_every_text_field_and_the_panel_keys_work_again(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_screen(pilot, "c", CheckpointsScreen)
        screen.query_one(TabbedContent).active = "tokenizer"
        field = screen.query_one("#tokenizer-try", Input)
        screen.set_focus(field)  # as a click in the field does
        await pilot.pause()
        await type_text(pilot, "ab")
        await pilot.press("escape")
        await pilot.pause()
        assert not is_text_field(screen.focused) and isinstance(screen.focused, DataTable)
        await pilot.press("8")
        await pilot.pause()
        assert screen.query_one(TabbedContent).active == "compare" and field.value == "ab"
        # A compare asked for from the field (the palette runs it there) shows its result
        # and keeps the keyboard out of the field, so 1–8 still switch panels.
        screen.query_one(TabbedContent).active = "tokenizer"
        screen.set_focus(field)
        await pilot.pause()
        await screen.run_action("compare")
        await pilot.pause()
        assert isinstance(app.screen, PathPromptScreen)
        await pilot.press("down", "enter")
        await settle(pilot)
        assert app.screen is screen
        assert screen.query_one(TabbedContent).active == "compare"
        assert isinstance(screen.focused, ComparisonView)
        await pilot.press("1")
        await pilot.pause()
        assert screen.query_one(TabbedContent).active == "tensors" and field.value == "ab"
        # Generation: escape leaves any field of the form for the candidates.
        generation = await open_screen(pilot, "g", GenerationScreen)
        for field_id in ("#model", "#prompt", "#budget"):
            generation.set_focus(generation.query_one(field_id, Input))
            await pilot.pause()
            await pilot.press("escape")
            await pilot.pause()
            assert isinstance(generation.focused, CandidateTable), field_id


@run_async
async def test_the_keyboard_never_stays_in_a_hidden_panel(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_screen(pilot, "c", CheckpointsScreen)
        table = screen.query_one(TensorTable)
        screen.set_focus(table)
        await pilot.pause()
        await pilot.press("enter")  # a tensor's statistics: the Detail panel replaces the table
        await settle(pilot)
        assert screen.query_one(TabbedContent).active == "detail"
        assert isinstance(screen.focused, TensorDetail)
        await pilot.press("6")
        await pilot.pause()
        assert isinstance(screen.focused, IntegrityView)
        # From the tree, a panel without a field leaves the keyboard in the tree.
        screen.set_focus(screen.query_one(RunTree))
        await pilot.pause()
        await pilot.press("4")
        await pilot.pause()
        assert isinstance(screen.focused, RunTree)


# -- a field opens with the keyboard in it -----------------------------------------------------------
@run_async
async def test_on_a_wide_terminal_with_no_model_two_tabs_reach_the_model_field(tmp_path):
    """At 120x40 the attention view is beside the candidates; empty, it is no stop on the way
    to the form (the hint says tab moves to the form): the prompt, then the model, and typing
    goes into the field."""
    from minigpt_tui.widgets.attention_view import AttentionView

    app = make_app(tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_screen(pilot, "g", GenerationScreen)
        assert isinstance(screen.focused, CandidateTable)
        assert screen.query_one(AttentionView).display and not screen.query_one(AttentionView).allow_focus()
        await pilot.press("tab")
        await pilot.pause()
        assert screen.focused is screen.query_one("#prompt", Input)
        await pilot.press("tab")
        await pilot.pause()
        model = screen.query_one("#model", Input)
        assert screen.focused is model
        await type_text(pilot, "/m")
        assert model.value == "/m" and isinstance(app.screen, GenerationScreen)


@run_async
async def test_the_generation_form_is_a_tab_away_at_the_prompt_and_tab_from_it_reaches_the_model(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_screen(pilot, "g", GenerationScreen)
        model = screen.query_one("#model", Input)
        prompt = screen.query_one("#prompt", Input)
        # Arriving, the keys act (n loads the suggested model); tab reaches the form.
        assert isinstance(screen.focused, CandidateTable)
        assert model.value == "tiny-a:latest"
        prompt.value = "a"
        await pilot.press("tab")
        await pilot.pause()
        assert screen.focused is prompt  # the field a learner means to type in, not the model's path
        await type_text(pilot, "b")  # added to the prompt, not in place of it (the tiny context is 8)
        assert prompt.value == "ab" and model.value == "tiny-a:latest"
        await pilot.press("tab")
        await pilot.pause()
        assert screen.focused is model
        await pilot.press("shift+tab")
        await pilot.pause()
        assert screen.focused is prompt
        await pilot.press("tab")
        await pilot.pause()
        assert screen.focused is model
        await pilot.press("enter")  # loads, and the keyboard moves to the candidates
        await settle(pilot)
        assert screen.view is not None and isinstance(screen.focused, CandidateTable)


@run_async
async def test_every_dialog_with_a_text_field_opens_with_the_keyboard_in_it(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_screen(pilot, "c", CheckpointsScreen)
        for dialog in (PathPromptScreen("Compare with", "with:", choices=[("a", "x"), ("b", "y")]),
                       PathPromptScreen("Open", "path:"),
                       OverlayScreen(runs, None, has_overlay=True),
                       NewRunScreen(app.next_config, runs)):
            app.push_screen(dialog)
            await settle(pilot)
            # The new-run form starts at its first field, the preset; the others at their text field.
            first = dialog.query_one("#preset") if isinstance(dialog, NewRunScreen) else None
            assert dialog.focused is first if first is not None else is_text_field(dialog.focused), \
                f"{type(dialog).__name__} focused {dialog.focused}"
            await pilot.press("escape")
            await settle(pilot)
            assert app.screen is screen
        # In a dialog with choices, down moves to them and enter on an empty field takes the highlighted one.
        chosen = []
        app.push_screen(PathPromptScreen("Compare with", "with:", choices=[("a", "x"), ("b", "y")]), chosen.append)
        await settle(pilot)
        dialog = app.screen
        await pilot.press("down")
        await pilot.pause()
        options = dialog.query_one(OptionList)
        assert dialog.focused is options
        await pilot.press("down")
        await pilot.pause()
        dialog.set_focus(dialog.query_one(Input))
        await pilot.pause()
        await pilot.press("enter")
        await settle(pilot)
        assert chosen == ["y"]


# -- focus you can see -------------------------------------------------------------------------------
def look(widget) -> tuple:
    """What shows that a widget has the keyboard: its border, outline, background or text
    style, or those of an enclosing panel (a background tint alone is too faint to see)."""
    shown = []
    for node in [widget, *widget.ancestors]:
        if node is widget.screen:
            break
        styles = node.styles
        shown.append((tuple(styles.border), tuple(styles.outline), styles.background, styles.text_style))
    if isinstance(widget, Select):
        current = widget.query_one("SelectCurrent")
        shown.append((tuple(current.styles.border), current.styles.background))
    return tuple(shown)


async def assert_focus_visible(pilot, where: str) -> int:
    screen = pilot.app.screen
    checked = 0
    for widget in [w for w in screen.query("*") if w.focusable and type(w).__name__ != "SelectOverlay"]:
        screen.set_focus(None)
        await pilot.pause()
        unfocused = look(widget)
        screen.set_focus(widget)
        await pilot.pause()
        assert screen.focused is widget
        assert look(widget) != unfocused, f"{where}: {widget!r} looks the same focused and unfocused"
        checked += 1
    return checked


@pytest.mark.slow  # every focusable widget at two sizes: CI runs it with the slow ones
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
@run_async
async def test_the_focused_widget_always_looks_focused(runs, size):
    app = make_app(runs)
    async with app.run_test(size=size) as pilot:
        checked = await assert_focus_visible(pilot, "training")
        for dialog in (NewRunScreen(app.next_config, runs), OverlayScreen(runs, None, has_overlay=True),
                       ConfirmQuitScreen(2), ConfirmDeleteScreen("run tiny-a", ["folder"]),
                       PathPromptScreen("Compare with", "with:", choices=[("a", "x")])):
            app.push_screen(dialog)
            await settle(pilot)
            checked += await assert_focus_visible(pilot, type(dialog).__name__)
            dialog.dismiss(None)
            await settle(pilot)
        screen = await open_screen(pilot, "c", CheckpointsScreen)
        checked += await assert_focus_visible(pilot, "checkpoints")
        screen.set_focus(screen.query_one(RunTree))
        await pilot.pause()
        await pilot.press("question_mark")
        await settle(pilot)
        checked += await assert_focus_visible(pilot, "help")
        await pilot.press("escape")
        await settle(pilot)
        await open_screen(pilot, "g", GenerationScreen)
        checked += await assert_focus_visible(pilot, "generation")
        assert checked >= 40


@run_async
async def test_a_tab_typed_right_after_opening_the_new_run_form_moves_on_from_the_first_field(tmp_path):
    """A terminal delivers keys typed ahead back to back: a tab sent with the key that opens
    the form moves from the preset (the form's first field and first focus) to the model
    field; it was undone when the first focus was set after it."""
    from textual import events

    from tests.training_support import make_app as make_training_app

    app = make_training_app(tmp_path / "runs", preset="tiny")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.post_message(events.Key("n", "n"))
        app.post_message(events.Key("tab", None))
        await settle(pilot)
        form = app.screen
        assert isinstance(form, NewRunScreen)
        assert form.focused is form.query_one("#model", Input)
        await pilot.press("7")
        assert form.query_one("#model", Input).value == "7"
        assert form.query_one("#steps", Input).value == "4"  # the tiny preset's updates, as a value


@run_async
async def test_the_arrow_keys_move_between_a_confirmation_s_buttons(runs):
    app = make_app(runs)
    async with app.run_test(size=(80, 24)) as pilot:
        for dialog, order in ((ConfirmQuitScreen(2), ["save", "discard", "stay"]),
                              (ConfirmDeleteScreen("run tiny-a", ["folder"]), ["keep", "act"]),
                              (ConfirmStopScreen("headless", "process 7"), ["keep", "act"])):
            app.push_screen(dialog)
            await settle(pilot)
            seen = [dialog.focused.id]
            for _ in order[1:]:
                await pilot.press("right")
                await pilot.pause()
                seen.append(dialog.focused.id)
            assert seen == order
            await pilot.press("left")
            await pilot.pause()
            assert dialog.focused.id == order[-2]
            dialog.dismiss(None)
            await settle(pilot)
