"""Round four of hostile input, the app's part: a failure of any type on a worker ends in a
one-line notification and leaves the screen usable; a tensor's statistics are read in
bounded pieces, with progress, and can be cancelled; one unreadable run is one marked row;
attaching reads a missing live.json or a step outside the plan as a note, not an end."""

from __future__ import annotations

from pathlib import Path

import pytest

from minigpt_tui.engine.session import generation as generation_session
from minigpt_tui.widgets.candidate_table import CandidateTable
from minigpt_tui.widgets.checkpoint_panels import CheckpointPanels
from minigpt_tui.widgets.decision_list import DecisionList
from tests.app_support import (
    make_app,
    open_generation,
    record_notifications,
    run_async,
    saved_model_file,
    settle,
)

SIZE = (100, 30)


class FakePanic(BaseException):
    """Like pyo3_runtime.PanicException: not an Exception, and a message of many lines."""


def failing_then_real(monkeypatch, failure: BaseException) -> list[str]:
    """``open_model`` fails with ``failure`` for the first spec asked for, then opens for real."""
    real = generation_session.open_model
    asked: list[str] = []

    def open_model(spec, runs_dir):
        asked.append(spec)
        if len(asked) == 1:
            raise failure
        return real(spec, runs_dir)

    monkeypatch.setattr(generation_session, "open_model", open_model)
    return asked


@pytest.mark.parametrize("failure, shown", [
    (ZeroDivisionError("division by zero"), "ZeroDivisionError: division by zero"),
    (NotImplementedError("no dequantizer for I8"), "NotImplementedError: no dequantizer for I8"),
    (FakePanic("Onig: Regex search error: retry-limit-in-match over\n  0: backtrace frame\n  1: another"),
     "FakePanic: Onig: Regex search error: retry-limit-in-match over"),
])
@run_async
async def test_a_model_that_fails_in_any_way_is_one_line_and_the_next_model_loads(runs, monkeypatch, failure, shown):
    asked = failing_then_real(monkeypatch, failure)
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        screen = await open_generation(pilot, model="bad.gguf")
        errors = [message for message, severity in seen if severity == "error"]
        assert errors == [f"could not open bad.gguf: {shown}"]
        assert "\n" not in errors[0]
        assert screen.view is None
        assert screen.query_one(DecisionList).border_subtitle == ""  # not "working…" for good
        assert screen.queue.idle
        # The screen is usable: a good model loads and steps.
        await open_generation(pilot, model=str(saved_model_file(runs)))
        assert asked == ["bad.gguf", str(saved_model_file(runs))]
        assert screen.view is not None and screen.view.model_label == str(saved_model_file(runs))
        screen.query_one(CandidateTable).focus()
        await pilot.press("n")
        await settle(pilot)
        assert len(screen.view.decisions) == 1
        assert screen.query_one(DecisionList).border_subtitle == ""


# -- every other worker: a failure of any type is one line ----------------------------------------
@run_async
async def test_a_file_that_fails_inspection_in_any_way_is_one_line_and_the_next_opens(runs, monkeypatch):
    from minigpt_tui.engine.session import checkpoint_views as checkpoints_screen

    real = checkpoints_screen.inspect_path
    calls: list[Path] = []

    def inspect_path(path):
        calls.append(path)
        if path.name == "bad.gguf":
            raise FakePanic("a panic\nwith a backtrace")
        return real(path)

    monkeypatch.setattr(checkpoints_screen, "inspect_path", inspect_path)
    bad = runs.parent / "bad.gguf"
    bad.write_bytes(b"GGUF")
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        await pilot.press("c")
        await settle(pilot)
        screen = app.screen
        screen.open_path(bad, loud=False)  # even a quiet open (a cursor move) says an unexpected failure
        await settle(pilot)
        assert (f"could not open {bad}: FakePanic: a panic", "error") in seen
        good = saved_model_file(runs).parent
        screen.open_path(good, loud=True)
        await settle(pilot)
        assert screen.opened is not None and Path(screen.opened.inspection.path) == good


# -- one unreadable run is one marked row -----------------------------------------------------------
def unreadable_checkpoints(monkeypatch, run_name: str) -> None:
    """``run_name``'s checkpoints folder refuses to be listed, as mode 000 does for a user who
    is not root (the tests run as root here, who may read anything: the refusal is simulated)."""
    from minigpt_tui.engine.session import run_store

    real = run_store.list_checkpoints

    def list_checkpoints(folder, **kwargs):
        if folder.parent.name == run_name:
            raise PermissionError(13, "Permission denied", str(folder))
        return real(folder, **kwargs)

    monkeypatch.setattr(run_store, "list_checkpoints", list_checkpoints)


def unreadable_run_folder(monkeypatch, run_name: str) -> None:
    """``run_name``'s folder refuses a look inside (its config.json cannot even be checked)."""
    real = Path.exists

    def exists(self, *args, **kwargs):
        if self.parent.name == run_name and self.name == "config.json":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "exists", exists)


@pytest.mark.parametrize("make_unreadable", [unreadable_checkpoints, unreadable_run_folder])
def test_the_runs_listing_marks_one_unreadable_run_and_lists_the_others(runs, monkeypatch, make_unreadable):
    from minigpt_tui.engine.session.run_store import RunStore

    make_unreadable(monkeypatch, "tiny-empty")
    listings = {listing.name: listing for listing in RunStore(runs).scan()}
    assert set(listings) == {"tiny-a", "tiny-empty"}
    assert listings["tiny-empty"].unreadable == "unreadable: permission denied"
    assert listings["tiny-a"].unreadable is None and listings["tiny-a"].complete_checkpoints == 2


@run_async
async def test_the_checkpoints_screen_shows_an_unreadable_run_as_a_marked_row(runs, monkeypatch):
    from minigpt_tui.widgets.run_tree import RunTree

    unreadable_checkpoints(monkeypatch, "tiny-a")
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("c")
        await settle(pilot)
        tree = app.screen.query_one(RunTree)
        rows = [node.label.plain for node in tree.root.children]
        assert len(rows) == 2
        assert any(row.startswith("tiny-a") and "unreadable: permission denied" in row for row in rows)
        assert any(row.startswith("tiny-empty") and "unreadable" not in row for row in rows)
        assert "2 runs (1 unreadable)" in str(tree.border_subtitle)


# -- a tensor's statistics in bounded pieces --------------------------------------------------------
def write_tensors(path: Path, **tensors) -> Path:
    import safetensors.torch

    safetensors.torch.save_file(tensors, str(path))
    return path


def test_statistics_read_in_pieces_equal_those_of_the_whole_tensor(tmp_path, monkeypatch):
    import torch

    from minigpt_tui.engine.formats import streamed_statistics
    from minigpt_tui.engine.formats.inspect import tensor_statistics

    values = torch.randn(10_007, generator=torch.Generator().manual_seed(4), dtype=torch.float32) * 3 + 1
    values[5], values[77], values[78], values[100:110] = float("nan"), float("inf"), -float("inf"), 0
    path = write_tensors(tmp_path / "t.safetensors", t=values, c=torch.randn(3_001, dtype=torch.complex64),
                         k=torch.full((5_000,), 2.5, dtype=torch.float64), b=torch.arange(4_000) % 3 == 0)
    for name in ("t", "c", "k", "b"):
        whole = tensor_statistics(path, name, 7)
        monkeypatch.setattr(streamed_statistics, "PIECE_ELEMENTS", 1_000)
        sizes: list[int] = []
        real_add = streamed_statistics._Moments.add
        monkeypatch.setattr(streamed_statistics._Moments, "add",
                            lambda self, piece: sizes.append(piece.numel()) or real_add(self, piece))
        fractions: list[float] = []
        pieces = tensor_statistics(path, name, 7, lambda fraction: fractions.append(fraction) or True)
        monkeypatch.undo()
        assert sizes and max(sizes) <= 1_000  # never the whole tensor at once
        assert fractions == sorted(fractions) and fractions[-1] == 1.0
        for key in ("min", "max", "nan", "inf", "zero_fraction", "histogram", "elements", "of", "bytes_read"):
            assert pieces[key] == whole[key], (name, key)
        assert pieces["mean"] == pytest.approx(whole["mean"], rel=1e-12)
        assert pieces["std"] == pytest.approx(whole["std"], rel=1e-12)


def test_a_stop_between_pieces_and_a_truncated_tensor(tmp_path, monkeypatch):
    import torch

    from minigpt_tui.engine.core.errors import CheckpointError
    from minigpt_tui.engine.formats import streamed_statistics
    from minigpt_tui.engine.formats.inspect import tensor_statistics

    path = write_tensors(tmp_path / "t.safetensors", t=torch.ones(5_000))
    monkeypatch.setattr(streamed_statistics, "PIECE_ELEMENTS", 1_000)
    stopped = []
    with pytest.raises(streamed_statistics.StatisticsStopped):
        tensor_statistics(path, "t", 5, lambda fraction: stopped.append(fraction) or fraction < 0.3)
    assert stopped and stopped[-1] >= 0.3 and max(stopped) < 0.5  # stopped in the first pass
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    with pytest.raises(CheckpointError, match="cut short|truncated|shorter|size"):
        tensor_statistics(path, "t", 5)


def slow_pieces(monkeypatch, seconds: float) -> list[int]:
    """Each piece of a large tensor takes ``seconds`` (a slow disk); returns the pieces read."""
    import time

    from minigpt_tui.engine.formats import streamed_statistics

    monkeypatch.setattr(streamed_statistics, "PIECE_ELEMENTS", 1_000)
    real_add = streamed_statistics._Moments.add
    read: list[int] = []

    def add(self, piece):
        read.append(piece.numel())
        time.sleep(seconds)
        real_add(self, piece)

    monkeypatch.setattr(streamed_statistics._Moments, "add", add)
    return read


async def choose_tensor(pilot, screen, name: str) -> None:
    from minigpt_tui.widgets.tensor_table import TensorTable

    screen.query_one(CheckpointPanels).show_tab("tensors")
    table = screen.query_one(TensorTable)
    await pilot.pause()
    table.focus()
    table.move_cursor(row=next(i for i, entry in enumerate(table.shown) if entry.name == name))
    await pilot.press("enter")
    await pilot.pause()


@run_async
async def test_a_large_tensor_shows_progress_and_escape_stops_the_reading(runs, monkeypatch):
    import asyncio
    import time

    import torch

    from minigpt_tui.widgets.tensor_detail import TensorDetail
    from tests.app_support import static_text

    path = write_tensors(runs.parent / "big.safetensors", big=torch.ones(200_000), small=torch.arange(6.0))
    read = slow_pieces(monkeypatch, 0.02)  # 200 pieces a pass: 4 s, were it not stopped
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("c")
        await settle(pilot)
        screen = app.screen
        screen.open_path(path, loud=True)
        await settle(pilot)
        await choose_tensor(pilot, screen, "big")
        detail = screen.query_one(TensorDetail)
        assert detail.reading
        deadline = time.monotonic() + 5
        while "%" not in static_text(screen, "#detail-stats") and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert "(escape stops)" in static_text(screen, "#detail-stats")
        assert app.focused is detail
        await pilot.press("escape")
        await settle(pilot)
        stopped_at = len(read)
        assert not detail.reading and stopped_at < 200
        assert "stopped (escape)" in static_text(screen, "#detail-stats")
        await asyncio.sleep(0.2)
        assert len(read) == stopped_at  # the worker stopped at its next piece
        # Another tensor reads at once and shows its figures.
        await choose_tensor(pilot, screen, "small")
        await settle(pilot)
        assert "std (population)" in static_text(screen, "#detail-stats") and not detail.reading


@run_async
async def test_choosing_another_tensor_stops_the_reading_of_the_first(runs, monkeypatch):
    import asyncio

    import torch

    from minigpt_tui.widgets.tensor_detail import TensorDetail
    from tests.app_support import static_text

    path = write_tensors(runs.parent / "two.safetensors", first=torch.ones(200_000), second=torch.zeros(3_000))
    read = slow_pieces(monkeypatch, 0.02)
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        await pilot.press("c")
        await settle(pilot)
        screen = app.screen
        screen.open_path(path, loud=True)
        await settle(pilot)
        await choose_tensor(pilot, screen, "first")
        await asyncio.sleep(0.3)
        await choose_tensor(pilot, screen, "second")
        await settle(pilot)
        moved_at = len(read)
        await asyncio.sleep(0.2)
        assert len(read) == moved_at and moved_at < 200  # the first tensor's reading stopped
        assert "every finite value equals 0" in static_text(screen, "#detail-stats")
        assert not screen.query_one(TensorDetail).reading
        assert not [message for message, severity in seen if severity == "error"]


# -- attach: a missing live.json and a step outside the plan ----------------------------------------
def attachable_run(folder: Path, steps: int = 4) -> Path:
    """A run folder as another process leaves it mid-run: config and metrics, no live.json."""
    import json

    from minigpt_tui.engine.core.config import load_config

    config = load_config("tiny").to_dict()
    config["train"]["steps"] = steps
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    lines = [{"kind": "update", "step": 1, "loss": 5.0}, {"kind": "update", "step": 999_999_999, "loss": 1.0},
             {"kind": "update", "step": 2, "loss": 4.0}]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return folder


def write_live(folder: Path, state: str, step: int, steps: int) -> None:
    import json
    import os
    import socket

    from minigpt_tui.engine.session.run_control import LIVE_FILE

    (folder / LIVE_FILE).write_text(json.dumps({"state": state, "step": step, "steps": steps, "pid": os.getpid(),
                                                "host": socket.gethostname(), "listening": False}))


def test_following_reads_a_missing_live_file_as_unreadable_and_ignores_steps_outside_the_plan(tmp_path):
    import threading
    import time

    from minigpt_tui.engine.session.attach import RunFollower
    from minigpt_tui.engine.session.events import Finished, Refused, UpdateDone

    run = attachable_run(tmp_path / "run")
    events: list[object] = []
    follower = RunFollower(run, events.append, interval=0.02)
    worker = threading.Thread(target=follower.run_reporting_failures)
    worker.start()
    try:
        time.sleep(0.4)
        assert worker.is_alive()  # still following: a missing live.json is not the run's end
        assert not [e for e in events if isinstance(e, Finished)]
        notes = [(e.action, e.message) for e in events if isinstance(e, Refused)]
        assert ("live status", "cannot read live status (live.json is missing); following run by its metrics") in notes
        outside = [message for action, message in notes if action == "metrics"]
        assert len(outside) == 1 and "999,999,999" in outside[0] and "plan of 4 updates" in outside[0]
        assert [e.record.step for e in events if isinstance(e, UpdateDone)] == [1, 2]
        write_live(run, "stopped", 2, 4)  # the writer ends as it says
        worker.join(timeout=5)
        assert not worker.is_alive()
    finally:
        follower.detach()
        worker.join(timeout=5)
    finished = [e for e in events if isinstance(e, Finished)]
    assert len(finished) == 1 and finished[0].step == 2


@run_async
async def test_the_app_attached_to_a_run_without_live_file_keeps_following(tmp_path):
    import asyncio

    from minigpt_tui.app import LaunchSettings, MiniGPTApp
    from minigpt_tui.widgets.event_log import EventLog

    runs = tmp_path / "runs"
    run = attachable_run(runs / "elsewhere")
    app = MiniGPTApp(LaunchSettings(runs_dir=runs, attach=run), preload_engine=False)
    async with app.run_test(size=SIZE) as pilot:
        seen = record_notifications(app)
        screen = app.training_screen
        for _ in range(40):
            await asyncio.sleep(0.05)
            await pilot.pause()
            if screen.run is not None and any("live.json is missing" in m for _, m in screen.query_one(EventLog).entries):
                break
        entries = screen.query_one(EventLog).entries
        assert any("cannot read live status (live.json is missing)" in message for _, message in entries)
        assert any("999,999,999" in message for _, message in entries)
        assert screen.run.state not in ("stopped", "finished")
        assert not [message for _, message in entries if "stopped at" in message or "999999999" in message]
        assert not [message for message, severity in seen if severity == "error"]
        screen.run.session.detach()


# -- one line for any failure -----------------------------------------------------------------------
def real_tokenizers_panic() -> None:
    """A catastrophic-backtracking Split regex: the tokenizers library panics (a BaseException)."""
    import json

    from tokenizers import Tokenizer

    spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated",
                              "invert": False},
            "post_processor": None, "decoder": None,
            "model": {"type": "WordLevel", "vocab": {"a": 0, "[UNK]": 1}, "unk_token": "[UNK]"}}
    Tokenizer.from_str(json.dumps(spec)).encode("a" * 40 + "b")


def test_any_failure_becomes_one_bounded_line_and_interpreter_exits_pass_on():
    from minigpt_tui.engine.core.errors import CheckpointError
    from minigpt_tui.engine.session.worker_failures import LINE_LIMIT, WorkFailed, attempt, failure_line

    panic = attempt(real_tokenizers_panic, "tok.json")
    assert isinstance(panic, WorkFailed) and not panic.expected
    assert panic.line.startswith("could not open tok.json: PanicException: ") and "\n" not in panic.line
    assert failure_line(CheckpointError("bad file")) == "bad file"
    assert failure_line(PermissionError(13, "Permission denied", "x.json")) == "x.json Permission denied"
    long = failure_line(ValueError("v" * 5_000 + "\nsecond line"))
    assert long.startswith("ValueError: vvv") and len(long) <= LINE_LIMIT + 20 and "second" not in long
    assert failure_line(ZeroDivisionError()) == "ZeroDivisionError"
    assert attempt(lambda: 7) == 7
    with pytest.raises(KeyboardInterrupt):
        attempt(lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
