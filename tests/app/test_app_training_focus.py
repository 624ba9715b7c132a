"""Where the keyboard is on the Training screen: a dialog opened from it has the keyboard in
its first field at once (a key typed right after the one that opened it lands there), and
back from another screen the keyboard is in no text field, so the screen's keys work."""

from __future__ import annotations

from textual import events
from textual.widgets import Input, TextArea

from minigpt_tui.screens.checkpoints import CheckpointsScreen
from minigpt_tui.screens.new_run import NewRunScreen
from minigpt_tui.screens.overlay import OverlayScreen
from minigpt_tui.widgets.loss_plot import LossPlot
from tests.app_support import run_async, settle
from tests.training_support import SIZE, make_app, training


async def open_and_type(pilot, opening: str, typed: str) -> object:  # type: ignore[no-untyped-def]
    """Send the key that opens a dialog and one more right behind it, as a terminal delivers
    keys typed quickly; the dialog in front once both are handled."""
    await pilot.pause()
    pilot.app.post_message(events.Key(opening, opening))
    pilot.app.post_message(events.Key(typed, typed))
    await settle(pilot)
    return pilot.app.screen


@run_async
async def test_a_name_typed_right_after_o_goes_into_the_overlay_field(tmp_path):
    runs = tmp_path / "runs"
    (runs / "other").mkdir(parents=True)
    (runs / "other" / "metrics.jsonl").write_text('{"kind": "update", "step": 1, "loss": 4.0}\n')
    app = make_app(runs, preset="tiny")
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_and_type(pilot, "o", "c")  # c: also the key of the Checkpoints screen
        assert isinstance(dialog, OverlayScreen)
        field = dialog.query_one("#overlay-path", Input)
        assert dialog.focused is field and field.value == "c"  # it was lost before


@run_async
async def test_a_character_typed_right_after_n_stays_in_the_new_run_form(tmp_path):
    """The form opens at its first field, the preset (issue 41: it opened mid-form): a key
    typed ahead reaches it, changes no field and never acts behind the form."""
    from textual.widgets import Select

    app = make_app(tmp_path / "runs", preset="tiny")
    async with app.run_test(size=SIZE) as pilot:
        form = await open_and_type(pilot, "n", "c")  # c: also the key of the Checkpoints screen
        assert isinstance(form, NewRunScreen) and app.screen is form
        assert form.focused is form.query_one("#preset", Select)
        assert form.query_one("#corpus", Input).value == "bundled:tiny.txt"


@run_async
async def test_back_from_a_text_field_elsewhere_the_training_keys_work(tmp_path):
    app = make_app(tmp_path / "runs", preset="tiny")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = training(app)
        await pilot.press("c")
        await settle(pilot)
        checkpoints = app.screen
        assert isinstance(checkpoints, CheckpointsScreen)
        await pilot.press("slash")  # the tensor filter has the keyboard
        await pilot.pause()
        assert isinstance(checkpoints.focused, (Input, TextArea))
        app.action_show_screen("training")  # as the palette or a click on the key bar does
        await settle(pilot)
        assert app.screen is screen
        assert not isinstance(screen.focused, (Input, TextArea))
        plot = screen.query_one(LossPlot)
        assert not plot.display
        await pilot.press("v")
        await pilot.pause()
        assert plot.display  # the screen's key acted; nothing was typed anywhere
