"""Following a run another process writes: the control file, the live state, the tail that
waits for a line being written, ``attach`` on a folder that is not a run, and the Training
screen attached to a headless ``train`` in another process (Pilot)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from minigpt_tui.app import LaunchSettings, MiniGPTApp
from minigpt_tui.engine.core.errors import ConfigError
from minigpt_tui.engine.session.events import Command, Refused
from minigpt_tui.engine.session.run_control import (
    CONTROL_FILE,
    LIVE_FILE,
    RunControl,
    TailReader,
    parse_command,
    read_live,
    send_command,
)
from minigpt_tui.screens.confirm_stop import ConfirmStopScreen
from minigpt_tui.widgets.loss_table import LossTable
from textual.widgets import Label
from tests import polling
from tests.app_support import run_async
from tests.conftest import cli_command, cli_env
from tests.training_support import key, press_button, wait_until


def test_a_line_still_being_written_is_waited_for(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"ste')
    reader = TailReader(path)
    assert reader.read_lines() == ['{"step": 1}']
    assert reader.read_lines() == []
    with path.open("a") as fh:
        fh.write('p": 2}\n')
    assert reader.read_lines() == ['{"step": 2}']


def test_garbage_in_the_control_file_is_reported_and_skipped(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    control = RunControl(tmp_path)
    (tmp_path / CONTROL_FILE).write_text('{"command": "pause"}\nrm -rf /\n{"command": "launch"}\n{"command": "save"}\n')
    reports: list[object] = []
    assert control.poll(reports.append) == [Command.PAUSE, Command.SAVE]
    assert [type(r) for r in reports] == [Refused, Refused]
    assert all("\n" not in r.message for r in reports)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="not a command"):
        parse_command('{"command": 3}')


def test_commands_written_before_the_trainer_started_are_not_replayed(tmp_path):
    (tmp_path / CONTROL_FILE).write_text('{"command": "stop"}\n')
    assert RunControl(tmp_path).poll(lambda _event: None) == []


def test_a_run_that_is_not_listening_says_so(tmp_path):
    with pytest.raises(ConfigError, match="is not a run folder"):
        send_command(tmp_path, Command.PAUSE)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="is not listening"):
        send_command(tmp_path, Command.PAUSE)
    # A writer that died while running: its live file names a process that is gone.
    (tmp_path / LIVE_FILE).write_text(json.dumps({"state": "running", "step": 3, "steps": 9, "pid": 2**22 + 7,
                                                  "host": __import__("socket").gethostname(), "listening": True}))
    live = read_live(tmp_path)
    assert live is not None and not live.listening and live.state == "ended"
    with pytest.raises(ConfigError, match="is not listening"):
        send_command(tmp_path, Command.PAUSE)
    assert not (tmp_path / CONTROL_FILE).exists()


def test_attach_to_a_folder_that_is_not_a_run_is_refused_in_one_line(tmp_path):
    done = subprocess.run(cli_command("attach", str(tmp_path)), capture_output=True, text=True,
                          env=cli_env(tmp_path), timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == f"minigpt-tui: error: {tmp_path} is not a run folder (it has no config.json)"


def _live_state(run_dir: Path) -> str | None:
    live = read_live(run_dir)
    return live.state if live is not None else None


def _start_headless(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """A long headless mini run in another process, once its live state says running."""
    trainer = subprocess.Popen(
        cli_command("train", "--preset", "mini", "--steps", "200000", "--run", "headless", "--json"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=cli_env(tmp_path))
    run_dir = tmp_path / "runs" / "headless"
    polling.wait_until(lambda: _live_state(run_dir) == "running" or trainer.poll() is not None, timeout=60,
                       what="the headless run to say running (or end)", interval=0.1)
    return trainer, run_dir


@run_async
async def test_the_app_follows_and_steers_a_headless_run_in_another_process(tmp_path):
    runs = tmp_path / "runs"
    trainer, run_dir = _start_headless(tmp_path)
    try:
        assert _live_state(run_dir) == "running"
        app = MiniGPTApp(LaunchSettings(runs_dir=runs, attach=run_dir), preload_engine=False)
        async with app.run_test(size=(100, 30)) as pilot:
            screen = app.training_screen
            await wait_until(pilot, lambda: screen.run is not None and screen.run.state == "running")
            live = read_live(run_dir)
            assert live is not None and live.parameter_scalars > 0 and live.parameter_tensors > 0
            summary = screen.run.summary
            assert summary is not None
            assert (summary.parameter_tensors, summary.parameter_scalars) == (live.parameter_tensors, live.parameter_scalars)
            table = screen.query_one(LossTable)
            await wait_until(pilot, lambda: len(table.rows) >= 5)  # live rows from the metrics file
            seen = screen.run.step
            await wait_until(pilot, lambda: screen.run.step > seen)  # still following
            await key(pilot, "space")
            await wait_until(pilot, lambda: _live_state(run_dir) == "paused")
            await wait_until(pilot, lambda: screen.run.state == "paused")
            paused_at = read_live(run_dir).step  # type: ignore[union-attr]
            await pilot.pause(0.5)
            metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
            assert max(r["step"] for r in metrics if r["kind"] == "update") == paused_at  # the trainer holds
            await key(pilot, "space")
            await wait_until(pilot, lambda: _live_state(run_dir) == "running")
            await wait_until(pilot, lambda: screen.run.step > paused_at)
            await key(pilot, "x")  # a run this app did not start: asked first, naming it and its process
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmStopScreen))
            asked = " ".join(str(label.render()) for label in app.screen.query(Label))
            assert "headless" in asked and f"process {trainer.pid}" in asked
            await key(pilot, "escape")  # keep following: nothing sent
            await pilot.pause(0.5)
            assert _live_state(run_dir) == "running" and screen.run.state == "running"
            await key(pilot, "x")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmStopScreen))
            await press_button(pilot, "#act")  # a click can land before the dialog is laid out on a busy machine
            await wait_until(pilot, lambda: screen.run.state == "stopped")
        assert trainer.wait(timeout=60) == 0
        said = trainer.stderr.read()  # type: ignore[union-attr]
        assert f"paused after update {paused_at} through the run's control file" in said
        assert "resumed at update" in said and "Traceback" not in said
        assert _live_state(run_dir) == "stopped"
        assert list((run_dir / "checkpoints").glob("step-*/manifest.json"))  # the stop saved
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()


@run_async
async def test_quitting_an_attached_app_leaves_the_run_training(tmp_path):
    """q, and the app ending however it ends (its unmount), only detach from a followed run."""
    runs = tmp_path / "runs"
    trainer, run_dir = _start_headless(tmp_path)
    try:
        for quit_key in ("q", None):  # None: the app exits by other means (a crash, SIGINT)
            app = MiniGPTApp(LaunchSettings(runs_dir=runs, attach=run_dir), preload_engine=False)
            async with app.run_test(size=(100, 30)) as pilot:
                screen = app.training_screen
                await wait_until(pilot, lambda: screen.run is not None and screen.run.state == "running")
                if quit_key:
                    await key(pilot, quit_key)
                    await wait_until(pilot, lambda: not app.is_running)
                else:
                    app.exit()
            at_quit = polling.last_update_step(run_dir / "metrics.jsonl")
            time.sleep(1.0)
            live = read_live(run_dir)
            assert live is not None and live.state == "running"
            assert polling.last_update_step(run_dir / "metrics.jsonl") > at_quit
            assert trainer.poll() is None
        assert not (run_dir / "control.jsonl").exists() or "stop" not in (run_dir / "control.jsonl").read_text()
    finally:
        trainer.kill()
        trainer.wait()


@pytest.mark.parametrize("line", ['{"command": ["pause"]}', "[" * 100_000 + "]" * 100_000, "1" * 5000,
                                  '{"command": {"a": 1}}', '{"command": "pause", "x": ' + "9" * 5000 + "}",
                                  "\x1b[2J" + "x" * 10_000])
def test_a_hostile_control_line_is_reported_in_one_line_and_never_raises(tmp_path, line):
    (tmp_path / "config.json").write_text("{}")
    control = RunControl(tmp_path)
    (tmp_path / CONTROL_FILE).write_text(line + '\n{"command": "save"}\n')
    reports: list[Refused] = []
    assert control.poll(reports.append) == [Command.SAVE]
    (report,) = reports
    assert "\n" not in report.message and len(report.message) < 200 and "\x1b" not in report.message


def test_a_huge_control_file_is_read_in_bounded_steps(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    control = RunControl(tmp_path)
    with (tmp_path / CONTROL_FILE).open("ab") as fh:
        fh.truncate(8 << 30)  # 8 GB of zeros, sparse: no newline anywhere
    reports: list[Refused] = []
    started = time.monotonic()
    assert control.poll(reports.append) == []
    assert time.monotonic() - started < 5 and control.control.offset <= 64 << 20
    assert reports and "longer than" in reports[0].message


@pytest.mark.parametrize("content", ["", "{trunc", "[" * 100_000, '{"state": ["running"], "step": 1, "steps": 2}',
                                     '{"state": "running", "step": "7", "steps": 9}', "x" * 300_000])
def test_a_damaged_live_file_reads_as_unreadable_never_as_ended(tmp_path, content):
    (tmp_path / LIVE_FILE).write_text(content)
    live = read_live(tmp_path)
    assert live is not None and live.state == "unreadable" and live.text.startswith("cannot read live status (")
    assert not live.listening


def test_a_live_file_that_is_a_fifo_or_a_device_never_blocks(tmp_path):
    import os

    os.mkfifo(tmp_path / LIVE_FILE)
    live = read_live(tmp_path)
    assert live is not None and live.state == "unreadable" and "FIFO" in live.reason
    (tmp_path / LIVE_FILE).unlink()
    (tmp_path / LIVE_FILE).symlink_to("/dev/zero")
    live = read_live(tmp_path)
    assert live is not None and live.state == "unreadable" and "device" in live.reason


def test_the_follower_draws_nan_infinite_and_mistyped_metrics_as_gaps(tmp_path):
    from minigpt_tui.engine.session.attach import RunFollower
    from minigpt_tui.engine.session.events import UpdateDone

    lines = ['{"kind": "update", "step": 1, "loss": NaN, "lr": 0.1}',
             '{"kind": "update", "step": 2, "loss": Infinity, "grad_norm": "big"}',
             '{"kind": "update", "step": 3, "loss": [1], "loss_scale": -Infinity}',
             '{"kind": "update", "step": true, "loss": 1.0}',
             '{"kind": "update", "step": 4, "loss": 2.5}']
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    events: list[object] = []
    follower = RunFollower(tmp_path, events.append)
    follower._emit_metrics(10)
    updates = [e.record for e in events if isinstance(e, UpdateDone)]
    assert [(u.step, u.loss) for u in updates] == [(1, None), (2, None), (3, None), (4, 2.5)]
    assert updates[1].grad_norm is None and updates[2].loss_scale == 1.0


def test_the_runs_tree_marks_live_runs(tmp_path):
    import os
    import socket

    from minigpt_tui.engine.session.run_store import RunStore
    from minigpt_tui.widgets.run_tree import run_label

    for name in ("live-run", "ended-run"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"preset": "mini"}))
    (tmp_path / "live-run" / LIVE_FILE).write_text(json.dumps(
        {"state": "running", "step": 1, "steps": 9, "pid": os.getpid(), "host": socket.gethostname(), "listening": True}))
    (tmp_path / "ended-run" / LIVE_FILE).write_text(json.dumps(
        {"state": "finished", "step": 9, "steps": 9, "pid": os.getpid(), "host": socket.gethostname(), "listening": False}))
    listings = {listing.name: listing for listing in RunStore(tmp_path).scan()}
    assert listings["live-run"].live and not listings["ended-run"].live
    assert "● live" in run_label(listings["live-run"]).plain
    assert "live" not in run_label(listings["ended-run"]).plain


@run_async
async def test_attached_to_a_long_finished_run_the_table_shows_its_newest_rows(tmp_path):
    """The history arrives before the table's first layout: the view must still end on the
    newest row (it stayed at the top of the kept rows, update 2511 of 3000)."""
    runs = tmp_path / "runs"
    done = subprocess.run(cli_command("train", "--preset", "mini", "--steps", "700", "--run", "long", "--json"),
                          capture_output=True, text=True, env=cli_env(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr
    app = MiniGPTApp(LaunchSettings(runs_dir=runs, attach=runs / "long"), preload_engine=False)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.training_screen
        await wait_until(pilot, lambda: screen.run is not None and screen.run.state == "finished")
        table = screen.query_one(LossTable)
        await wait_until(pilot, lambda: len(table.rows) == table.max_rows)
        # The scroll follows the layout, which a busy machine may make late: wait for the view
        # to reach the end (it never did when it stayed at the top).
        await wait_until(pilot, lambda: table.max_scroll_y > 0 and table.scroll_y == table.max_scroll_y, timeout=10)
        assert table.rows[-1].cells[0] == "eval 700"
