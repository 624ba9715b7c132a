"""Files from other tools on the Checkpoints screen: a nanoGPT ``ckpt.pt`` says what it is
and what works on it (in the summary, on p and on r), and a sharded transformers folder's
summary shows every shard at the smallest and a large terminal."""

from __future__ import annotations

import re

import pytest

from minigpt_tui.screens.checkpoints import CheckpointsScreen
from minigpt_tui.screens.resume_preflight import ResumePreflightScreen
from minigpt_tui.widgets.tensor_table import TensorTable
from tests.app_support import make_app, record_notifications, run_async, settle, static_text
from tests.foreign_support import nanogpt_ckpt, sharded_folder

PYTHON_REPRS = re.compile(r"\b(None|True|False)\b|\(\)")


def visible_text(app) -> str:
    """Every line the screen in front shows now, as plain text."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def open_in_checkpoints(pilot, path) -> CheckpointsScreen:
    await pilot.press("c")
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, CheckpointsScreen)
    screen.open_path(path)
    await settle(pilot)
    assert screen.opened is not None and screen.opened.inspection.path == path
    return screen


@run_async
async def test_a_nanogpt_checkpoint_says_what_it_is_and_what_works_on_it(tmp_path):
    ckpt = nanogpt_ckpt(tmp_path / "ckpt.pt")
    app = make_app(tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        seen = record_notifications(app)
        screen = await open_in_checkpoints(pilot, ckpt)
        summary = static_text(screen, "#ckpt-summary")
        assert "nanoGPT checkpoint" in summary and "made by another tool" in summary
        assert "header 0 B" not in summary  # a pickle has no header to size

        await pilot.press("p")
        await pilot.pause()
        assert app.screen is screen
        (reason, severity), = seen
        assert severity == "warning"
        assert "nothing open" not in reason
        for words in ("nanoGPT checkpoint", "GPT-2-style model (2 layers, 2 heads, width 8, vocabulary 13",
                      "generation needs a minigpt-tui model file", "cannot be converted"):
            assert words in reason, words
        assert not PYTHON_REPRS.search(reason), reason

        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, ResumePreflightScreen)
        preflight = app.screen
        assert not preflight.check.can_resume
        said = " ".join((*preflight.check.blockers, *preflight.check.uses))
        for words in ("nanoGPT checkpoint", "39 tensors", "its own optimizer state (exp_avg, exp_avg_sq and step",
                      "does not resume from", "resumes only its own checkpoint folders", "statistics", "compare",
                      "cannot be converted"):
            assert words in said, words
        shown = visible_text(app)
        for words in ("Cannot resume", "nanoGPT checkpoint", "What you can do with it here"):
            assert words in shown, words
        assert not PYTHON_REPRS.search(shown), shown
        # None of our own checkpoint's records (restored state, corpus check) applies to it.
        assert not preflight.check.restored and not preflight.check.reset_by_weights_only
        assert "corpus" not in shown and "Resuming restores" not in shown


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
@run_async
async def test_a_sharded_folder_summary_shows_every_shard(tmp_path, size):
    folder = sharded_folder(tmp_path / "sharded", shards=4)
    shard_names = [f"model-{i:05d}-of-00004.safetensors" for i in range(1, 5)]
    app = make_app(tmp_path / "runs")
    async with app.run_test(size=size) as pilot:
        screen = await open_in_checkpoints(pilot, folder)
        box = screen.query_one("#ckpt-summary-box")
        assert "4 files: 416 B, 4 tensors" in visible_text(app)  # the totals are always in view
        seen = ""
        if size == (80, 24):  # too tall for its box: the keyboard reaches it and scrolls it
            assert box.can_focus
            for _ in range(10):
                if box.has_focus:
                    break
                await pilot.press("tab")
            assert box.has_focus
            for _ in range(20):  # scroll the summary through; every shard passes by
                seen += visible_text(app)
                if box.scroll_y >= box.max_scroll_y:
                    break
                await pilot.press("down")
                await pilot.pause()
            assert box.scroll_y == box.max_scroll_y > 0
        else:  # a large terminal shows them all at once, and Tab passes the summary by
            seen = visible_text(app)
            assert box.max_scroll_y == 0 and not box.can_focus
        for name in shard_names:
            assert name in seen, name


@run_async
async def test_beside_the_runs_tree_long_tensor_names_keep_the_end_that_tells_them_apart(tmp_path):
    ckpt = nanogpt_ckpt(tmp_path / "ckpt.pt", layers=2)
    app = make_app(tmp_path / "runs")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_in_checkpoints(pilot, ckpt)
        assert screen.query_one("#runs").display  # the runs tree is shown: the name column is narrow
        table = screen.query_one(TensorTable)
        cells = [table.row_text(row)[0] for row in range(table.row_count)]
        names = [entry.name for entry in table.shown]
        assert any(len(name) > len(cell) for name, cell in zip(names, cells))  # some names are cut
        for name, cell in zip(names, cells):
            assert cell == name or (cell.startswith("…") and name.endswith(cell[1:])), (name, cell)
        # Every row reads differently, layer 0 from layer 1 included.
        assert len(set(cells)) == len(cells)
        assert any("h.0.attn.c_attn.weight" in cell for cell in cells)
        assert any("h.1.attn.c_attn.weight" in cell for cell in cells)
