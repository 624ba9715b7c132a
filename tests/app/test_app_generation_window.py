"""The Generation screen past the context: the run goes on to the budget over a sliding
window, and the prefix, the output line, the selected decision and its attention say which
positions the model saw."""

from __future__ import annotations

from minigpt_tui.widgets.attention_view import AttentionView
from minigpt_tui.widgets.decision_info import DecisionInfo
from minigpt_tui.widgets.decision_list import DecisionList
from minigpt_tui.widgets.generation_output import GenerationOutput
from minigpt_tui.widgets.prefix_view import PrefixView
from tests.app_support import make_app, open_generation, plain, record_notifications, run_async
from tests.app_support import press_settled as keys


@run_async
async def test_a_run_goes_on_past_the_context_and_shows_the_window(runs):
    app = make_app(runs)
    seen = record_notifications(app)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_generation(pilot, prompt="a")  # 2 ids with BOS; the tiny context is 8
        await keys(pilot, "r")
        view = screen.view
        assert view.finished and view.stop_reason == "budget" and len(view.decisions) == 24
        assert view.window_from == 8 and view.window_note == "sliding window of 8 positions from decision 8"
        prefix = screen.query_one(PrefixView)
        assert prefix.border_subtitle == ("sliding window of 8 positions from decision 8 · "
                                          "last 8 of 26 ids: prompt 2 + generated 24")
        assert plain(prefix.content).startswith("… 18 ids before the window")
        assert "stop: budget after 24 decisions · window from #8" in plain(screen.query_one(GenerationOutput).content)
        assert screen.query_one(DecisionList).selected.step == 24
        assert "saw positions 17-24 (sliding window)" in plain(screen.query_one(DecisionInfo).content)
        axis = screen.query_one(AttentionView).plain.splitlines()[0].strip()
        assert len(axis) == 8  # the window's positions, not the first 8 of the text
        await keys(pilot, "l")  # inside the last decision: one pass over its window
        assert not [m for m in seen if m[1] == "error"]
