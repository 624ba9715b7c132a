"""The Generation screen's ``e``: a steering file and a coefficient, the prompt generated on the
worker without and with it, shown side by side; a bad file is one notification."""

from __future__ import annotations

import torch
from textual.widgets import DataTable, Input

from minigpt_tui.engine.analysis.generation import DecisionStepper
from minigpt_tui.engine.analysis.steering import Steering, save_direction
from minigpt_tui.screens.path_prompt import PathPromptScreen
from minigpt_tui.screens.steering_view import SteeringViewScreen
from tests.app_support import make_app, open_generation, record_notifications, run_async, settle

SIZE = (100, 30)


@run_async
async def test_e_shows_the_decisions_without_and_with_a_steering_file(runs, tmp_path):
    app = make_app(runs)
    notes = record_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_generation(pilot)
        await pilot.press("n")
        await settle(pilot)
        portable = screen.session.portable
        width = portable.model.config.width
        path = save_direction(Steering("blocks.0.hook_resid_post", torch.full((width,), 5.0, dtype=portable.model.dtype)),
                              tmp_path / "steer.safetensors")
        await pilot.press("e")
        await settle(pilot)
        assert isinstance(app.screen, PathPromptScreen)
        app.screen.query_one(Input).value = f"{path} 3"
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, SteeringViewScreen), notes
        beside = app.screen.beside
        assert beside["steering"]["coefficient"] == 3.0 and beside["steering"]["site"] == "blocks.0.hook_resid_post"
        rule = screen.session.stepper.rule
        plain = DecisionStepper.from_portable(portable, screen.session.stepper.prompt, rule)
        plain.run()
        assert [row["without"]["id"] for row in beside["compared"] if row["without"]] == plain.generated_ids
        assert app.screen.query_one(DataTable).row_count == len(beside["compared"])
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is screen
        # a file that is not there: one notification, the screen stays
        await pilot.press("e")
        await settle(pilot)
        app.screen.query_one(Input).value = str(tmp_path / "missing.safetensors")
        await pilot.press("enter")
        await settle(pilot)
        assert app.screen is screen
        assert ("file not found: " + str(tmp_path / "missing.safetensors"), "error") in notes, notes
