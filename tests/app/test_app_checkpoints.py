"""The Checkpoints screen on real checkpoints: runs tree, every panel, opening foreign and
large files by path, statistics off the UI thread, rename and delete, the actions that hand
a checkpoint to the other screens, and every error path (one-line notification, the app
keeps running, nothing on disk changes)."""

from __future__ import annotations

import json
import re
import shutil
import threading
from pathlib import Path

import pytest
from textual.widgets import Button, Input, Static, TabbedContent

from minigpt_tui.engine.formats.inspect import inspect_path, tensor_statistics
from minigpt_tui.engine.formats.compare import compare_checkpoints
from minigpt_tui.engine.formats.state_groups import StateGroup
from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.session.resume_preview import ResumePreview
from minigpt_tui.engine.core.tokenizer import BOS, ByteBPETokenizer
from minigpt_tui.screens.checkpoints import CheckpointsScreen
from minigpt_tui.screens.confirm_delete import ConfirmDeleteScreen
from minigpt_tui.screens.path_prompt import PathPromptScreen
from minigpt_tui.widgets.comparison_view import ComparisonView
from minigpt_tui.screens.resume_preflight import ResumePreflightScreen
from minigpt_tui.widgets.run_tree import RunTree
from minigpt_tui.widgets.state_view import StateView
from minigpt_tui.widgets.tensor_table import TensorTable, left_truncate
from minigpt_tui.widgets.tokenizer_panel import TokenizerPanel
from tests.app_support import (
    record_notifications,
    run_async,
    build_saved_runs,
    make_app,
    plain,
    settle,
    static_text,
    tree_snapshot,
    write_sparse_large_file,
)
from tests.polling import pause_until
from conftest import patch_everywhere

SIZE = (80, 24)  # the smallest supported terminal; rendering more cells only costs test time


async def _until(pilot, condition, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    """Wait for what a key or click leads to, however busy the machine."""
    await pause_until(pilot, condition, timeout=timeout, what="what the key or click leads to",
                      detail=lambda: f"screen {pilot.app.screen!r}, focus {pilot.app.focused!r}")



@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return build_saved_runs(tmp_path_factory.mktemp("checkpoints-app"))


@pytest.fixture
def runs(saved, tmp_path):
    return saved.copy_to(tmp_path)


async def open_checkpoints(pilot) -> CheckpointsScreen:
    await pilot.press("c")
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, CheckpointsScreen)
    return screen


async def open_by_path(pilot, path: Path) -> None:
    await pilot.press("o")
    await pilot.pause()
    assert isinstance(pilot.app.screen, PathPromptScreen)
    pilot.app.screen.query_one(Input).value = str(path)
    await pilot.press("enter")
    await settle(pilot)


@run_async
async def test_tree_lists_runs_with_disk_use_and_opens_the_latest_checkpoint(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        tree = screen.query_one(RunTree)
        names = [listing.name for listing in tree.listings]
        assert names == ["tiny-a", "tiny-empty"]
        tiny = tree.listings[0]
        assert [c.step for c in tiny.checkpoints] == [2, 4]
        assert tiny.disk_bytes == sum(f.stat().st_size for f in (runs / "tiny-a").rglob("*") if f.is_file())
        assert "tiny-a" in str(tree.root.children[0].label) and "kB" in str(tree.root.children[0].label)
        # The cursor starts on the first run, which opens as its latest checkpoint.
        assert screen.opened is not None
        assert screen.opened.inspection.path == runs / "tiny-a" / "checkpoints" / "step-000004"
        summary = static_text(screen, "#ckpt-summary")
        assert "tiny-a/checkpoints/step-000004" in summary and "checkpoint folder" in summary
        # Choosing the older checkpoint in the tree opens it.
        run_node = tree.root.children[0]
        run_node.expand()
        await pilot.pause()
        older = next(n for n in run_node.children if n.data and n.data.path.name == "step-000002")
        tree.select_node(older)
        await settle(pilot)
        assert screen.opened.inspection.path.name == "step-000002"
        # ? explains every record of this screen.
        tree.focus()
        await pilot.press("question_mark")
        await pilot.pause()
        help_text = app.screen.markdown
        for record in ("offsets", "Aliases", "Integrity", "Tokenizer", "Compare", "weights-only", "★ best"):
            assert record in help_text, record


@run_async
async def test_tensor_entries_sort_and_filter(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        table = screen.query_one(TensorTable)
        inspection = inspect_path(runs / "tiny-a")
        assert len(table.shown) == len(inspection.entries) == table.row_count
        first = table.shown[0]
        assert (first.file, first.begin) == ("model.safetensors", 0)
        table.focus()
        await pilot.press("s")  # offsets -> group
        assert table.order.column == "group"
        table.sort_by("bytes", reverse=True)
        assert [e.bytes for e in table.shown] == sorted((e.bytes for e in inspection.entries), reverse=True)
        table.sort_by("name")
        assert [e.name for e in table.shown] == sorted(e.name for e in inspection.entries)
        await pilot.press("slash")
        assert screen.query_one("#tensor-filter", Input).has_focus
        await pilot.press(*"exp_avg_sq")
        await pilot.pause()
        assert table.shown and all("exp_avg_sq" in e.name for e in table.shown)
        assert len(table.shown) == 29  # one second moment per learned tensor
        await pilot.press("escape")
        await pilot.pause()
        assert len(table.shown) == len(inspection.entries)
        assert screen.query_one("#tensor-filter", Input).value == ""


def test_long_names_are_cut_from_the_left_keeping_the_end_that_differs():
    name = "optimizer.state.blocks.0.ffn.down_proj.weight.exp_avg_sq"
    cut = left_truncate(name, 28)
    assert len(cut) == 28 and cut.startswith("…") and name.endswith(cut[1:])
    assert left_truncate("short", 28) == "short"


def column_widths(table, keys) -> int:
    return sum(table.column_width(key) for key in keys)


@run_async
async def test_below_150_columns_the_runs_panel_steps_aside_so_the_tensor_columns_fit(runs):
    from minigpt_tui.widgets.key_bar import KeyBar

    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        tree, table, bar = screen.query_one(RunTree), screen.query_one(TensorTable), screen.query_one(KeyBar)
        assert tree.has_focus and tree.display
        line = bar.render().plain
        assert len(line) <= SIZE[0] and "b Hide runs" in line
        for hint in ("o Open", "/ Filter", "p Generate", "r Resume", "m Compare", "t c g"):
            assert hint in line, hint
        # A click in the panels leaves the runs where they are (nothing moves under the pointer).
        await pilot.click(TensorTable, offset=(4, 3))
        await pilot.pause()
        assert table.has_focus and tree.display
        # Leaving the tree from the keyboard puts it aside: the key columns fit the width.
        tree.focus()
        await pilot.pause()
        await pilot.press("tab")
        await settle(pilot)
        assert not tree.display and screen.runs_aside
        assert column_widths(table, ("name", "dtype", "shape", "elements", "bytes")) \
            <= table.scrollable_content_region.width
        assert "b Show runs" in bar.render().plain
        await pilot.press("b")
        await settle(pilot)
        assert tree.display and tree.has_focus and not screen.runs_aside
        await pilot.press("b")
        await settle(pilot)
        assert not tree.display and table.has_focus
        # At 120 columns, aside, every column shows in full; from 150 the runs stay beside.
        await pilot.resize_terminal(120, 40)
        await settle(pilot)
        assert column_widths(table, table.column_keys) <= table.scrollable_content_region.width
        await pilot.resize_terminal(160, 40)
        await settle(pilot)
        assert tree.display and not screen.runs_aside
        assert column_widths(table, table.column_keys) <= table.scrollable_content_region.width
        assert " b " not in bar.render().plain


@run_async
async def test_the_palette_lists_the_checkpoint_actions_and_runs_them(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        commands = {command.title: command for command in app.get_system_commands(screen)}
        for title in ("Open a path", "Generate with this model", "Resume training from this checkpoint",
                      "Compare with another checkpoint"):
            assert title in commands, title
        assert "New run" not in commands  # a Training action
        await commands["Compare with another checkpoint"].callback()
        await pilot.pause()
        assert isinstance(app.screen, PathPromptScreen)
        await pilot.press("escape")
        await pilot.pause()
        await commands["Generate with this model"].callback()
        await settle(pilot)
        assert type(app.screen).__name__ == "GenerationScreen"


@run_async
async def test_statistics_are_computed_on_a_worker_thread_and_match_the_engine(runs, monkeypatch):
    import minigpt_tui.engine.formats.inspect as inspect_module

    threads: list[threading.Thread] = []
    original = inspect_module.tensor_statistics

    def spy(*args, **kwargs):
        threads.append(threading.current_thread())
        return original(*args, **kwargs)

    assert patch_everywhere(monkeypatch, inspect_module, "tensor_statistics", spy) >= 2
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        table = screen.query_one(TensorTable)
        row = next(i for i, e in enumerate(table.shown) if e.name == "token_embedding.weight")
        table.focus()
        table.move_cursor(row=row)
        await pilot.press("enter")
        await settle(pilot)
        assert screen.query_one(TabbedContent).active == "detail"
        assert threads and all(t is not threading.main_thread() for t in threads)
        expected = tensor_statistics(runs / "tiny-a" / "checkpoints" / "step-000004",
                                     "model.safetensors:token_embedding.weight", 20)
        text = static_text(screen, "#detail-stats")
        assert f"{expected['max']:.6g}" in text and f"{expected['std']:.6g}" in text
        assert f"{max(expected['histogram']['counts']):,}" in text
        record = static_text(screen, "#detail-record")
        assert "[266, 4]" in record and "8,512" in record


@run_async
async def test_statistics_of_a_file_gone_since_opening_is_an_error_not_a_crash(runs):
    copy = runs.parent / "files" / "gone.safetensors"
    copy.write_bytes((runs.parent / "files" / "foreign.safetensors").read_bytes())
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        screen = await open_checkpoints(pilot)
        await open_by_path(pilot, copy)
        copy.unlink()
        table = screen.query_one(TensorTable)
        table.focus()
        await pilot.press("enter")
        await settle(pilot)
        errors = [m for m, s in seen if s == "error"]
        assert len(errors) == 1 and "gone.safetensors" in errors[0]
        assert "statistics unavailable" in static_text(screen, "#detail-stats")
        assert app.is_running


@run_async
async def test_alias_state_metadata_and_integrity_panels(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        aliases = static_text(screen, "#aliases-text")
        assert "head.weight" in aliases and "token_embedding.weight" in aliases and "transpose" in aliases
        state = screen.query_one(StateView)
        groups = [str(node.label).split(" — ")[0] for node in state.root.children]
        for group in ("identities", "schedule", "optimizer", "data_progress", "randomness", "loss_scaling",
                      "envelope", "continuation"):
            assert group in groups
        assert groups.index("schedule") < groups.index("optimizer")  # grouped in reading order
        metadata = static_text(screen, "#metadata-text")
        assert "model.safetensors" in metadata and "training.safetensors" in metadata
        assert '"minigpt-tui/portable-model"' in metadata  # raw JSON string as stored
        integrity = static_text(screen, "#integrity-text")
        assert "every file's size matches (SHA-256 not checked yet)" in integrity  # says what was checked
        assert "every check passed" not in integrity
        await pilot.press("v")
        await settle(pilot)
        integrity = static_text(screen, "#integrity-text")
        assert "checked against every file" in integrity and integrity.count("matches") >= 4
        assert "every file's size and SHA-256 match" in integrity


@run_async
async def test_verify_reports_a_changed_file_and_changes_nothing(runs):
    folder = runs / "tiny-a" / "checkpoints" / "step-000004"
    data = bytearray((folder / "training.safetensors").read_bytes())
    data[-1] ^= 1
    (folder / "training.safetensors").write_bytes(bytes(data))
    before = tree_snapshot(runs)
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        screen = await open_checkpoints(pilot)
        await pilot.press("v")
        await settle(pilot)
        assert "DIFFERS" in static_text(screen, "#integrity-text")
        assert any("SHA-256 does not match" in m and s == "error" for m, s in seen)
        assert app.is_running
    assert tree_snapshot(runs) == before


@run_async
async def test_tokenizer_panel_lists_merges_and_splits_typed_text(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        await pilot.press("7")
        await settle(pilot)
        panel = screen.query_one(TokenizerPanel)
        assert panel.tokenizer is not None
        tokenizer = panel.tokenizer
        assert len(tokenizer.merges) == 8
        assert tokenizer.identity == inspect_path(runs / "tiny-a").state.get(StateGroup.IDENTITIES)["tokenizer"]
        merges_table = panel.query_one("#tokenizer-merges")
        assert merges_table.row_count == 8
        field = panel.query_one("#tokenizer-try", Input)
        field.focus()
        await pilot.press(*"the cat")
        await pilot.pause()
        # What the run's tokenizer must give: the same merges learned again from the corpus.
        config = load_config("tiny")
        trained = ByteBPETokenizer.train(load_corpus(config.corpus).train, config.tokenizer.merges)
        assert trained.identity == tokenizer.identity
        expected = trained.encode("the cat", bos=False, eos=False)
        assert [i for i, _ in panel.pieces_of("the cat")] == expected
        shown = static_text(panel, "#tokenizer-pieces")
        assert " ".join(str(i) for i in expected) in shown
        assert BOS not in expected


@run_async
async def test_opening_a_foreign_file_and_a_large_file_by_path(runs):
    files = runs.parent / "files"
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        await open_by_path(pilot, files / "foreign.safetensors")
        inspection = screen.opened.inspection
        assert inspection.kind == "safetensors"
        table = screen.query_one(TensorTable)
        assert sorted(e.name for e in table.shown) == ["encoder.bias", "encoder.weight"]
        assert "not made by minigpt-tui" in static_text(screen, "#ckpt-summary")
        assert "another tool" in static_text(screen, "#metadata-text")
        assert "has no manifest" in static_text(screen, "#integrity-text")
        await settle(pilot)
        assert screen.query_one(TokenizerPanel).tokenizer is None
        # Statistics of a foreign tensor.
        row = next(i for i, e in enumerate(table.shown) if e.name == "encoder.weight")
        table.focus()
        table.move_cursor(row=row)
        await pilot.press("enter")
        await settle(pilot)
        assert re.search(r"\nmax\s+11\s", static_text(screen, "#detail-stats"))  # of arange(12)
        # A 1 GiB file opens from its header alone (the file is sparse: its data was never written).
        declared = write_sparse_large_file(files / "big.safetensors")
        await open_by_path(pilot, files / "big.safetensors")
        assert screen.opened.inspection.entries[0].bytes == declared
        assert screen.query_one(TensorTable).shown[0].shape == (16384, 16384)


@run_async
async def test_a_transformers_folder_opens_with_its_tokenizer(runs):
    from minigpt_tui.engine.models.model_file import load_portable_model
    from minigpt_tui.engine.formats.hf_export import export_hf

    portable = load_portable_model(runs / "tiny-a" / "checkpoints" / "step-000004" / "model.safetensors")
    folder = runs.parent / "files" / "hf-tiny"
    export_hf(portable, folder)
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        await open_by_path(pilot, folder)
        assert screen.opened.inspection.kind == "hf-model"
        assert "transformers model folder" in static_text(screen, "#ckpt-summary")
        assert "checks: passed" in static_text(screen, "#integrity-text")
        panel = screen.query_one(TokenizerPanel)
        assert panel.tokenizer is not None and panel.tokenizer.identity == portable.tokenizer.identity
        table = screen.query_one(TensorTable)
        table.focus()
        await pilot.press("enter")
        await settle(pilot)
        assert "statistics" in static_text(screen, "#detail-stats")


@run_async
async def test_malformed_and_missing_paths_are_notified_and_change_nothing(runs):
    files = runs.parent / "files"
    before = tree_snapshot(runs.parent)
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        screen = await open_checkpoints(pilot)
        opened = screen.opened
        for path in (files / "garbage.safetensors", files / "truncated.safetensors", files / "nowhere.safetensors",
                     runs / "tiny-empty"):
            seen.clear()
            await open_by_path(pilot, path)
            errors = [m for m, s in seen if s == "error"]
            assert len(errors) == 1 and "\n" not in errors[0] and "Traceback" not in errors[0], path
            assert screen.opened is opened  # the panels still show what was open
        assert app.is_running
    assert tree_snapshot(runs.parent) == before


@run_async
async def test_rename_a_run_and_refuse_invalid_or_taken_names(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        screen = await open_checkpoints(pilot)
        tree = screen.query_one(RunTree)
        tree.focus()
        for bad in ("bad name!", "tiny-empty"):
            seen.clear()
            await pilot.press("e")
            await pilot.pause()
            prompt = app.screen
            assert isinstance(prompt, PathPromptScreen) and prompt.query_one(Input).value == "tiny-a"
            prompt.query_one(Input).value = bad
            await pilot.press("enter")
            await settle(pilot)
            assert any(s == "error" for _, s in seen), bad
            assert (runs / "tiny-a").is_dir()
        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one(Input).value = "renamed"
        await pilot.press("enter")
        await settle(pilot)
        assert (runs / "renamed" / "checkpoints" / "step-000004").is_dir() and not (runs / "tiny-a").exists()
        assert [listing.name for listing in tree.listings] == ["renamed", "tiny-empty"]
        assert screen.opened.inspection.path == runs / "renamed" / "checkpoints" / "step-000004"


@run_async
async def test_delete_a_run_only_after_confirmation(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        tree = screen.query_one(RunTree)
        tree.focus()
        await pilot.press("d")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmDeleteScreen))  # a loaded machine is slow
        dialog = app.screen
        assert any("kB on disk" in str(label.render()) for label in dialog.query("Label"))
        await pilot.press("escape")  # keep
        await _until(pilot, lambda: app.screen is screen)
        await settle(pilot)
        assert (runs / "tiny-a").is_dir()
        await pilot.press("d")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmDeleteScreen))
        app.screen.query_one("#act").press()  # a click can land before the dialog is laid out on a busy machine
        await _until(pilot, lambda: [listing.name for listing in tree.listings] == ["tiny-empty"])
        await settle(pilot)
        assert not (runs / "tiny-a").exists() and (runs / "tiny-empty").is_dir()
        assert str(tree.border_subtitle).startswith("1 run · ")  # not "1 runs"
        assert screen.opened is None


@run_async
async def test_the_delete_question_counts_one_checkpoint_in_the_singular(runs):
    shutil.rmtree(runs / "tiny-a" / "checkpoints" / "step-000002")
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        screen.query_one(RunTree).focus()
        await pilot.press("d")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmDeleteScreen))
        labels = [str(label.render()) for label in app.screen.query("Label")]
        assert any(label.startswith("1 checkpoint, ") for label in labels), labels
        await pilot.press("right", "enter")  # the arrow reaches the Delete button
        await _until(pilot, lambda: not (runs / "tiny-a").exists())


@run_async
async def test_generate_with_this_model_opens_the_generation_screen_with_it_loaded(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        await pilot.press("p")
        await settle(pilot, rounds=6)
        generation = app.screen
        assert type(generation).__name__ == "GenerationScreen"
        model_file = runs / "tiny-a" / "checkpoints" / "step-000004" / "model.safetensors"
        assert generation.query_one("#model", Input).value == str(model_file)
        assert generation.view is not None and generation.view.model_label == str(model_file)
        # A foreign file cannot generate: the screen says why and stays.
        app.switch_mode("checkpoints")
        await pilot.pause()
        seen = record_notifications(app)
        await open_by_path(pilot, runs.parent / "files" / "foreign.safetensors")
        await pilot.press("p")
        await pilot.pause()
        assert app.screen is screen
        assert any("needs a minigpt-tui model" in m for m, _ in seen)


def test_preflight_lists_what_resume_restores_and_a_warm_start_resets(saved):
    folder = saved.root / "runs" / "tiny-a" / "checkpoints" / "step-000002"
    inspection = inspect_path(folder)
    check = ResumePreview.of("tiny-a/step-2", inspection)
    assert check.can_resume and check.step == 2 and check.steps == 4
    restored = "\n".join(check.restored)
    for what in ("weights: 29 tensors, 1,572 scalars", "optimizer: AdamW", "schedule: cosine at update 2 of 4",
                 "data position: order [2, 0, 1]", "random streams", "loss scaling: scale 8.0"):
        assert what in restored, what
    reset = "\n".join(check.reset_by_weights_only)
    assert "optimizer moments" in reset and "restarts at update 1" in reset and "loss scale" in reset
    finished = inspect_path(folder.parent / "step-000004")
    done = ResumePreview.of("tiny-a/step-4", finished)
    assert not done.can_resume and "completed its schedule" in done.blockers[0]
    assert "loss scaling: scale 16.0, 1 finite update since the last change" in done.restored
    single = inspect_path(folder / "model.safetensors")
    assert not ResumePreview.of("m", single).can_resume


@run_async
async def test_compare_with_another_checkpoint(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        screen = await open_checkpoints(pilot)
        await pilot.press("m")
        await pilot.pause()
        prompt = app.screen
        assert isinstance(prompt, PathPromptScreen)
        assert [label for label, _ in prompt.choices] == ["tiny-a  step 2"]
        # The field has the keyboard (typed text goes there); down moves to the choices.
        assert prompt.query_one("#path-prompt-input").has_focus
        await pilot.press("down")
        await pilot.pause()
        assert prompt.query_one("#path-prompt-choices").has_focus
        await pilot.press("enter")
        await settle(pilot)
        expected = compare_checkpoints(runs / "tiny-a" / "checkpoints" / "step-000004",
                                       runs / "tiny-a" / "checkpoints" / "step-000002")
        text = static_text(screen, "#compare-text")
        differing = sum(1 for t in expected["tensors"] if t["status"] != "same")
        assert f"{differing} tensors differ" in text and "token_embedding.weight" in text
        assert "schedule" in text
        # The result has the keyboard: the page keys scroll it.
        view = screen.query_one(ComparisonView)
        assert view.has_focus
        assert view.max_scroll_y > 0  # the result is longer than the panel at this size
        await pilot.press("pagedown")
        await settle(pilot)
        assert view.scroll_y > 0
        # An unreadable other side is an error notification.
        await pilot.press("m")
        await pilot.pause()
        app.screen.query_one(Input).focus()
        app.screen.query_one(Input).value = str(runs.parent / "files" / "garbage.safetensors")
        await pilot.press("enter")
        await settle(pilot)
        assert any(s == "error" for _, s in seen)
        assert app.is_running


@run_async
async def test_open_and_compare_take_run_names_as_the_command_line_does(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        screen = await open_checkpoints(pilot)
        await open_by_path(pilot, Path("tiny-a:2"))
        await _until(pilot, lambda: screen.opened is not None
                     and Path(screen.opened.inspection.path).name == "step-000002")
        await pilot.press("m")
        await pilot.pause()
        app.screen.query_one(Input).value = "tiny-a:latest"
        await pilot.press("enter")
        await settle(pilot)
        expected = compare_checkpoints(runs / "tiny-a" / "checkpoints" / "step-000002",
                                       runs / "tiny-a" / "checkpoints" / "step-000004")
        differing = sum(1 for t in expected["tensors"] if t["status"] != "same")
        await _until(pilot, lambda: f"{differing} tensors differ" in static_text(screen, "#compare-text"))
        # A name that is neither a path nor a run is refused naming both, and changes nothing.
        await pilot.press("m")
        await pilot.pause()
        app.screen.query_one(Input).value = "no-such-run:3"
        await pilot.press("enter")
        await settle(pilot)
        assert ("no checkpoint 'no-such-run:3': no such path, and no run named 'no-such-run' in "
                f"{runs}", "error") in seen
        assert Path(screen.opened.inspection.path).name == "step-000002"


def test_screens_and_widgets_do_not_import_torch():
    import subprocess
    import sys

    code = ("import sys\n"
            "import minigpt_tui.screens.checkpoints, minigpt_tui.screens.generation\n"
            "import minigpt_tui.screens.resume_preflight, minigpt_tui.screens.path_prompt\n"
            "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@run_async
async def test_resume_after_the_preflight_continues_the_run_bit_for_bit(runs):
    from tests.checkpoint_support import make_trainer

    straight = make_trainer("tiny", updates=4)
    folder = runs / "tiny-a" / "checkpoints" / "step-000002"
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        # The finished checkpoint (4 of 4) cannot be resumed: the button is disabled.
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, ResumePreflightScreen)
        assert app.screen.query_one("#resume", Button).disabled
        await pilot.press("escape")
        await pilot.pause()
        screen.open_path(folder)
        await settle(pilot)
        await pilot.press("r")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, ResumePreflightScreen)
        text = plain(dialog.query_one(Static).content)
        assert "Resuming restores" in text and "weights-only start" in text and "update 2 of 4" in text
        await pilot.click("#resume")
        await settle(pilot, rounds=10)
        training = app.training_screen
        assert app.screen is training
        assert training.run.summary.resumed_from == folder
        assert training.run.state == "finished" and training.run.step == 4
        assert training.run.final_digest == straight.state_digest()
    records = [json.loads(line) for line in (runs / "tiny-a" / "metrics.jsonl").read_text().splitlines()]
    assert records[0] == {"kind": "resume", "from": str(folder), "step": 2}
    assert [r["step"] for r in records if r["kind"] == "update"] == [3, 4]


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_snapshot_checkpoints_screen(saved, tmp_path, snap_compare, size):
    runs = saved.copy_to(tmp_path)

    async def run_before(pilot):
        screen = await open_checkpoints(pilot)
        if size == (80, 24):
            await pilot.press("tab", "tab")  # from the tree to the tensor table: the runs step aside
            await settle(pilot)
        if size == (120, 40):
            table = screen.query_one(TensorTable)
            table.focus()
            table.move_cursor(row=next(i for i, e in enumerate(table.shown) if e.name == "token_embedding.weight"))
            await pilot.press("enter")
            await settle(pilot)
        pilot.app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(runs), terminal_size=size, run_before=run_before)


def test_snapshot_resume_preflight(saved, tmp_path, snap_compare):
    runs = saved.copy_to(tmp_path)

    async def run_before(pilot):
        screen = await open_checkpoints(pilot)
        screen.open_path(runs / "tiny-a" / "checkpoints" / "step-000002")
        await settle(pilot)
        await pilot.press("r")
        await pilot.pause()

    assert snap_compare(make_app(runs), terminal_size=(80, 24), run_before=run_before)


def newer_copy(runs):
    """tiny-b: a copy of tiny-a changed an hour later (its config and checkpoint folders)."""
    import os

    newer = runs / "tiny-b"
    shutil.copytree(runs / "tiny-a", newer)
    later = (runs / "tiny-a" / "config.json").stat().st_mtime + 3600
    for path in (newer / "config.json", *newer.glob("checkpoints/step-*")):
        os.utime(path, (later, later))
    return newer


@run_async
async def test_the_screen_opens_the_newest_run_not_the_first_by_name(runs):
    newer = newer_copy(runs)
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        assert screen.opened is not None
        assert screen.opened.inspection.path == newer / "checkpoints" / "step-000004"


@run_async
async def test_the_open_dialog_names_every_kind_that_opens(runs):
    app = make_app(runs)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_checkpoints(pilot)
        await pilot.press("o")
        await pilot.pause()
        assert isinstance(app.screen, PathPromptScreen)
        prompt = " ".join(str(label.render()) for label in app.screen.query("Label"))
        assert ".pt" in prompt and "transformers model folder" in prompt and "safetensors" in prompt


@run_async
async def test_a_run_that_fails_to_open_quietly_shows_why_in_the_summary(runs):
    model_file = runs / "tiny-a" / "checkpoints" / "step-000004" / "model.safetensors"
    model_file.write_bytes(b"not a safetensors file")
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        screen = await open_checkpoints(pilot)
        assert app.is_running and screen.opened is None
        assert "model.safetensors" in static_text(screen, "#ckpt-summary")
        assert not [m for m, s in seen if s == "error"]  # a cursor move is quiet: no notification


@run_async
async def test_the_tokenizer_summary_of_a_byte_level_tokenizer_says_no_merges():
    """A byte-level tokenizer (the text preset's) has no merge ids: no "(258–257)" range."""
    from textual.app import App, ComposeResult

    class PanelApp(App):
        def compose(self) -> ComposeResult:
            yield TokenizerPanel()

    app = PanelApp()
    async with app.run_test(size=(120, 20)) as pilot:
        panel = app.query_one(TokenizerPanel)
        panel.show_tokenizer(ByteBPETokenizer.train(["abab abab"], 0))
        await pilot.pause()
        text = static_text(panel, "#tokenizer-summary")
        assert "258 ids = 2 specials (0 <bos>, 1 <eos>) + 256 bytes (2–257) + no merges" in text
        panel.show_tokenizer(ByteBPETokenizer.train(["abab abab"], 1))
        await pilot.pause()
        assert "+ 1 merge (258–258)" in static_text(panel, "#tokenizer-summary")


def test_counts_in_the_resume_preview_agree_in_number():
    from minigpt_tui.engine.session.display import counted

    assert [counted(1, "point"), counted(13, "point")] == ["1 point", "13 points"]
    assert [counted(1, "microbatch", "microbatches"), counted(2, "microbatch", "microbatches")] == [
        "1 microbatch", "2 microbatches"]


# -- the tensor filter's keys, the table beside the runs, comparisons and dialogs ------------------
def type_together(app, *keys: str) -> None:
    """Keys that arrive together, as a terminal delivers keys typed quickly back to back: the
    second is handled while the dialog the first opens is still being put up."""
    from textual import events

    for key in keys:
        event = events.Key(key, key if len(key) == 1 else None)
        event.set_sender(app)
        app._driver.send_message(event)


async def filter_tensors(pilot, screen, text: str) -> TensorTable:
    table = screen.query_one(TensorTable)
    table.focus()
    await pilot.press("slash", *text)
    await pilot.pause()
    assert screen.query_one("#tensor-filter", Input).has_focus and table.shown
    return table


@run_async
async def test_escape_clears_the_filter_keeping_the_highlighted_row_which_enter_opens(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        table = await filter_tensors(pilot, screen, "token_emb")
        assert table.highlighted_entry.name == "token_embedding.weight"  # the first match
        await pilot.press("escape")
        await pilot.pause()
        assert len(table.shown) == len(table.entries) and table.has_focus
        # The row the user saw highlighted stays highlighted, in view, and is the one enter opens.
        assert table.highlighted_entry.name == "token_embedding.weight"
        top = table.scroll_offset.y
        assert top <= table.cursor_row < top + table.rows_in_view
        await pilot.press("enter")
        await settle(pilot)
        assert screen.query_one(TabbedContent).active == "detail"
        record = static_text(screen, "#detail-record")
        assert "token_embedding.weight" in record and "[266, 4]" in record


@run_async
async def test_down_from_the_filter_goes_to_the_table_so_the_first_enter_opens_the_match(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        table = await filter_tensors(pilot, screen, "final_norm")
        await pilot.press("down")
        await pilot.pause()
        assert table.has_focus and table.highlighted_entry.name == "final_norm.weight"
        assert screen.query_one("#tensor-filter", Input).value == "final_norm"  # the filter stays
        await pilot.press("enter")
        await settle(pilot)
        assert screen.query_one(TabbedContent).active == "detail"
        assert "final_norm.weight" in static_text(screen, "#detail-record")


@run_async
async def test_the_key_bar_drops_leave_field_once_escape_has_cleared_the_filter(runs):
    from minigpt_tui.widgets.key_bar import KeyBar

    app = make_app(runs)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_checkpoints(pilot)
        bar = screen.query_one(KeyBar)
        drawn: list[str] = []  # what the bar last drew (it draws on a refresh only)
        draw = bar.render
        bar.render = lambda: (drawn.append(draw().plain), draw())[1]
        table = await filter_tensors(pilot, screen, "final_norm")
        await pilot.press("down")  # the table has the keyboard; the filter stays
        await settle(pilot)
        assert table.has_focus and "Leave field" in drawn[-1]  # escape clears the filter
        await pilot.press("escape")
        await settle(pilot)
        assert table.has_focus and len(table.shown) == len(table.entries)
        assert "Leave field" not in drawn[-1]


@run_async
async def test_at_80_columns_beside_the_runs_the_dtype_and_shape_columns_show_whole(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        tree, table = screen.query_one(RunTree), screen.query_one(TensorTable)
        assert tree.display and not screen.runs_aside
        assert column_widths(table, ("name", "dtype", "shape")) <= table.scrollable_content_region.width
        widest_shape = max(len(table.row_text(row)[2]) for row in range(table.row_count))
        assert widest_shape >= len("[266, 4]")  # every shape cell whole, the widest included
        # Names give up their start, never the end that tells them apart.
        for row, entry in enumerate(table.shown):
            cell = table.row_text(row)[0]
            assert cell == entry.name or (cell.startswith("…") and entry.name.endswith(cell[1:]))


@run_async
async def test_a_checkpoint_deleted_since_it_was_opened_is_not_named_as_shown(runs):
    """Retention after a resume deletes the checkpoint the run resumed from; back on the
    screen, the summary must not name it as what is shown."""
    folder = runs / "tiny-a" / "checkpoints" / "step-000002"
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        screen.open_path(folder)
        await settle(pilot)
        assert "tiny-a/checkpoints/step-000002" in static_text(screen, "#ckpt-summary")
        await pilot.press("t")
        await settle(pilot)
        shutil.rmtree(folder)  # as a run's retention does once newer checkpoints are saved
        await pilot.press("c")
        await _until(pilot, lambda: "step-000004" in static_text(screen, "#ckpt-summary"))
        summary = static_text(screen, "#ckpt-summary")
        assert "tiny-a/checkpoints/step-000004" in summary and "step-000002" not in summary
        assert "step 2, open here before, has been deleted since" in summary
        assert screen.opened.inspection.path == runs / "tiny-a" / "checkpoints" / "step-000004"


@run_async
async def test_a_run_whose_every_checkpoint_was_deleted_shows_nothing_of_them(runs):
    checkpoints = runs / "tiny-a" / "checkpoints"
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        assert screen.opened is not None
        for folder in list(checkpoints.iterdir()):
            shutil.rmtree(folder)
        await pilot.press("f5")
        await _until(pilot, lambda: screen.opened is None)
        summary = static_text(screen, "#ckpt-summary")
        assert "step 4, open here before, has been deleted since" in summary and "step-000004" not in summary
        assert screen.query_one(TensorTable).row_count == 0


@run_async
async def test_comparison_shows_the_norms_and_the_relative_change(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        screen._start_compare(runs / "tiny-a" / "checkpoints" / "step-000002")
        await settle(pilot)
        expected = compare_checkpoints(runs / "tiny-a" / "checkpoints" / "step-000004",
                                       runs / "tiny-a" / "checkpoints" / "step-000002")
        row = next(t for t in expected["tensors"] if t["name"] == "token_embedding.weight")
        assert row["status"] == "changed" and 0 < row["relative_change"] < 1
        figures = [f"{row[key]:.3g}" for key in ("max_abs_diff", "relative_change", "norm_a", "norm_b")]

        def shown_figures(lines: list[str]) -> list[str]:
            return [word for word in " ".join(lines).split() if word in figures]

        # Beside the runs tree at 80 columns: the name on a line, its figures under the header below it.
        text = static_text(screen, "#compare-text")
        lines = text.splitlines()
        header = next(line for line in lines if "‖a−b‖/‖a‖" in line)
        assert header.split() == ["max", "|a−b|", "‖a−b‖/‖a‖", "‖a‖", "‖b‖"]
        at = next(i for i, line in enumerate(lines) if line.startswith("token_embedding.weight"))
        assert shown_figures([lines[at + 1]]) == figures
        room = screen.query_one("#compare-view").scrollable_content_region.width
        assert len(header) <= room and len(lines[at + 1]) <= room  # never wrapped out of their columns
        # A wide terminal: one table row per tensor, the figures beside the name.
        await pilot.resize_terminal(160, 40)
        await settle(pilot)
        line = next(line for line in static_text(screen, "#compare-text").splitlines() if "token_embedding.weight" in line)
        assert shown_figures([line]) == figures and line.split()[0] == "changed"


@run_async
async def test_compare_lists_the_newest_checkpoints_first(runs):
    newer = newer_copy(runs)
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        assert screen.opened.inspection.path == newer / "checkpoints" / "step-000004"
        await pilot.press("m")
        await _until(pilot, lambda: isinstance(app.screen, PathPromptScreen))
        assert [label for label, _ in app.screen.choices] == ["tiny-b  step 2", "tiny-a  step 4", "tiny-a  step 2"]


@run_async
async def test_dialogs_have_the_keyboard_for_a_key_typed_right_after_the_one_that_opens_them(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        # m then down at once: down reaches the compare dialog's choices.
        type_together(app, "m", "down")
        await _until(pilot, lambda: isinstance(app.screen, PathPromptScreen))
        await settle(pilot)
        assert app.screen.query_one("#path-prompt-choices").has_focus
        await pilot.press("escape")
        await _until(pilot, lambda: app.screen is screen)
        # r then enter at once on the finished checkpoint: enter presses the focused Cancel.
        type_together(app, "r", "enter")
        await settle(pilot)
        assert app.screen is screen
        # d, right and enter at once on the runs tree: the arrow reaches Delete, enter presses it.
        screen.query_one(RunTree).focus()
        await pilot.pause()
        type_together(app, "d", "right", "enter")
        await _until(pilot, lambda: not (runs / "tiny-a").exists())


@run_async
async def test_back_from_another_screen_the_keys_act_instead_of_typing_into_a_field(runs):
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_checkpoints(pilot)
        await pilot.press("7")  # the Tokenizer panel: its field takes the keyboard
        await settle(pilot)
        field = screen.query_one("#tokenizer-try", Input)
        assert field.has_focus
        app.action_show_screen("training")  # as the command palette switches screens
        await settle(pilot)
        app.action_show_screen("checkpoints")
        await settle(pilot)
        assert app.screen is screen and not isinstance(screen.focused, Input)
        await pilot.press("o")
        await _until(pilot, lambda: isinstance(app.screen, PathPromptScreen))
        assert field.value == ""
