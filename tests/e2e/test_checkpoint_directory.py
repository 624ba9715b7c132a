"""Checkpoint folders: layout and manifest, saving that survives kill -9 at any moment,
retention, run-name resolution, and clean stops on SIGTERM / Ctrl+C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from minigpt_tui.engine.training.checkpoints import (
    Checkpointer,
    load_checkpoint,
    prune_checkpoints,
    recover_interrupted,
    restore_trainer,
    save_checkpoint,
)
from minigpt_tui.engine.formats.checkpoint_folder import MANIFEST, list_checkpoints
from minigpt_tui.engine.formats.portable import MODEL_FILE
from minigpt_tui.engine.formats.checkpoint_folder import TRAINING_FILE
from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.session.runs import RunDirectory, resolve_checkpoint, resolve_model_file
from minigpt_tui.engine.session.events import Command, Paused, Saved, UpdateDone
from minigpt_tui.engine.session.training import TrainingSession
from tests.checkpoint_support import make_trainer
from tests.conftest import cli_command, cli_env
from tests.polling import wait_until


def test_a_checkpoint_folder_holds_two_files_and_a_manifest_of_their_hashes(tmp_path):
    trainer = make_trainer("tiny", updates=2)
    folder = save_checkpoint(trainer, tmp_path / "checkpoints", "interval")
    assert folder.name == "step-000002"
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST, MODEL_FILE, TRAINING_FILE]
    assert [p.name for p in folder.parent.iterdir()] == ["step-000002"]  # no work folders left
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["step"] == 2 and manifest["reason"] == "interval"
    import hashlib

    for name in (MODEL_FILE, TRAINING_FILE):
        data = (folder / name).read_bytes()
        assert manifest["files"][name] == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _kill_at(event_number: int, trainer, checkpoints: Path) -> list[str]:
    """Save in a forked child that SIGKILLs itself at its ``event_number``-th save event."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: save, and die mid-way
        os.close(read_end)
        seen = 0
        lock = threading.Lock()  # the two files are written on two threads

        def hook(event: str) -> None:
            nonlocal seen
            with lock:
                seen += 1
                os.write(write_end, (event + "\n").encode())
                if seen == event_number:
                    os.kill(os.getpid(), signal.SIGKILL)

        try:
            save_checkpoint(trainer, checkpoints, "interval", progress=hook)
        finally:
            os._exit(0)
    os.close(write_end)
    events = b""
    while chunk := os.read(read_end, 65536):
        events += chunk
    os.close(read_end)
    os.waitpid(pid, 0)
    return events.decode().split()


def test_kill_minus_9_at_every_moment_of_a_save_never_loses_or_half_writes(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    trainer = make_trainer("tiny", updates=1)
    first = save_checkpoint(trainer, checkpoints)
    trainer.update()
    events = _kill_at(10_000, trainer, tmp_path / "probe")  # an uninterrupted save lists every event
    assert events[-1] == "parent-fsynced" and len(events) > 100
    # Every event that is not one tensor's bytes, and every 9th tensor write.
    points = [i + 1 for i, e in enumerate(events) if ":tensor:" not in e or i % 9 == 0]
    assert len(points) >= 20
    for point in points:
        seen = _kill_at(point, trainer, checkpoints)
        assert len(seen) == point  # the lock holds the other thread until the kill lands
        complete = list_checkpoints(checkpoints)
        assert [c.step for c in complete][0] == 1
        assert load_checkpoint(first).state.step == 1  # the earlier checkpoint always loads
        second = checkpoints / "step-000002"
        if second.exists():
            assert load_checkpoint(second).state.step == 2  # never a half checkpoint in place
            assert point >= events.index("installed") + 1
        else:
            assert [c.step for c in complete] == [1]
        recover_interrupted(checkpoints)  # what the next Checkpointer does first
        assert sorted(p.name for p in checkpoints.iterdir() if p.name.startswith(".")) == []
        if second.exists():
            import shutil

            shutil.rmtree(second)
    # Killed while replacing an existing checkpoint of the same step: one of the two is in place.
    save_checkpoint(trainer, checkpoints)
    for point in [i + 1 for i, e in enumerate(events) if ":tensor:" not in e]:
        _kill_at(point, trainer, checkpoints)
        recover_interrupted(checkpoints)
        assert load_checkpoint(checkpoints / "step-000002").state.step == 2


def test_a_folder_without_manifest_is_incomplete_and_never_listed(tmp_path):
    trainer = make_trainer("tiny", updates=2)
    folder = save_checkpoint(trainer, tmp_path / "checkpoints")
    (folder / MANIFEST).unlink()
    assert list_checkpoints(tmp_path / "checkpoints") == []
    assert list_checkpoints(tmp_path / "checkpoints", include_incomplete=True)[0].complete is False
    with pytest.raises(CheckpointError, match="incomplete checkpoint"):
        load_checkpoint(folder)
    hidden = tmp_path / "checkpoints" / ".step-000009.partial-1-abcdef12"
    hidden.mkdir()
    assert list_checkpoints(tmp_path / "checkpoints", include_incomplete=True)[0].step == 2


def test_retention_keeps_the_last_k_plus_the_best(tmp_path):
    trainer = make_trainer("mini", train={"steps": 12, "eval_every": 3})
    checkpointer = Checkpointer(tmp_path, keep_last=2)
    saved_steps = []
    from minigpt_tui.engine.training.trainer import UpdateRecord, scheduled_work

    for item in scheduled_work(trainer):
        if isinstance(item, UpdateRecord) and item.step % 2 == 0:
            checkpointer.save(trainer, "interval")
            saved_steps.append(item.step)
    remaining = [c.step for c in list_checkpoints(tmp_path / "checkpoints")]
    best = trainer.best_step
    assert remaining == sorted({10, 12} | ({best} if best in saved_steps else set()))
    assert prune_checkpoints(tmp_path / "checkpoints", 1, None)[0].name.startswith("step-")
    assert [c.step for c in list_checkpoints(tmp_path / "checkpoints")] == [12]


def test_saving_the_same_step_again_replaces_it_whole(tmp_path):
    trainer = make_trainer("mini", train={"steps": 10})
    trainer.update()
    first = save_checkpoint(trainer, tmp_path / "checkpoints", "interval")
    trainer.evaluate()
    again = save_checkpoint(trainer, tmp_path / "checkpoints", "best")
    assert first == again and [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step-000001"]
    loaded = load_checkpoint(again)
    assert loaded.manifest["reason"] == "best" and len(restore_trainer(again).curve) == 1


def test_run_specs_resolve_to_checkpoints(tmp_path):
    runs = tmp_path / "runs"
    run = RunDirectory.create(runs, "alpha", "mini")
    trainer = make_trainer("mini", train={"steps": 6, "eval_every": 2})
    checkpointer = Checkpointer(run, keep_last=10)
    from minigpt_tui.engine.training.trainer import UpdateRecord, scheduled_work

    for item in scheduled_work(trainer):
        if isinstance(item, UpdateRecord):
            checkpointer.save(trainer, "interval")
    checkpointer.save(trainer, "stop")  # after the last evaluation, as at the end of a run
    checkpoints = run.checkpoints
    assert resolve_checkpoint("alpha", runs) == checkpoints / "step-000006"
    assert resolve_checkpoint("alpha:latest", runs) == checkpoints / "step-000006"
    assert resolve_checkpoint("alpha:best", runs) == checkpoints / f"step-{trainer.best_step:06d}"
    assert resolve_checkpoint("alpha:3", runs) == checkpoints / "step-000003"
    assert resolve_checkpoint("alpha:step-000004", runs) == checkpoints / "step-000004"
    assert resolve_checkpoint(str(run.path), runs) == checkpoints / "step-000006"
    assert resolve_checkpoint(str(checkpoints / "step-000002"), runs) == checkpoints / "step-000002"
    assert resolve_checkpoint(str(checkpoints / "step-000002" / MODEL_FILE), runs) == checkpoints / "step-000002"
    assert resolve_model_file("alpha:best", runs).name == MODEL_FILE
    model_file = checkpoints / "step-000002" / MODEL_FILE
    assert resolve_model_file(str(model_file), runs) == model_file
    for spec, message in [
        ("nobody:latest", "no run named 'nobody'"),
        ("alpha:99", "no complete checkpoint at step 99"),
        ("alpha:newest", "not latest, best"),
    ]:
        with pytest.raises(CheckpointError, match=message):
            resolve_checkpoint(spec, runs)
    tiny_run = RunDirectory.create(runs, "beta", "tiny")
    Checkpointer(tiny_run).save(make_trainer("tiny", updates=1), "stop")
    with pytest.raises(CheckpointError, match="no best checkpoint"):
        resolve_checkpoint("beta:best", runs)


def test_an_interrupted_replacement_is_put_back(tmp_path):
    trainer = make_trainer("tiny", updates=1)
    folder = save_checkpoint(trainer, tmp_path / "checkpoints")
    dead = 2**22 + 12345  # no such process
    aside = folder.with_name(f".{folder.name}.replaced-{dead}-0123abcd")
    os.rename(folder, aside)
    partial = folder.with_name(f".{folder.name}.partial-{dead}-0123abce")
    partial.mkdir()
    actions = recover_interrupted(tmp_path / "checkpoints")
    assert sorted(actions) == ["removed .step-000001.partial-4206649-0123abce", "restored step-000001"]
    assert load_checkpoint(folder).state.step == 1


def test_the_session_saves_through_the_checkpointer_at_intervals_pause_and_stop(tmp_path):
    """Commands sent from the sink reach the session before the next update boundary, so
    the pause lands after update 7 and the stop after update 12, every time."""
    run = RunDirectory.create(tmp_path / "runs", "ctl", "mini")
    events: list = []
    session: TrainingSession

    def sink(event):
        events.append(event)
        if isinstance(event, UpdateDone) and event.record.step == 7:
            session.send(Command.PAUSE)
        elif isinstance(event, Paused):
            session.send(Command.RESUME)
        elif isinstance(event, UpdateDone) and event.record.step == 12:
            session.send(Command.STOP)

    trainer = make_trainer("mini", train={"steps": 400, "save_every": 5, "eval_every": 0})
    session = TrainingSession.for_trainer(lambda: trainer, sink, checkpointer=Checkpointer(run, keep_last=10))
    session.run()
    saved = [(e.step, e.reason) for e in events if isinstance(e, Saved)]
    assert saved == [(5, "interval"), (7, "pause"), (10, "interval"), (12, "stop")]
    assert all(load_checkpoint(e.path).state.step == e.step for e in events if isinstance(e, Saved))
    assert list_checkpoints(run.checkpoints)[-1].step == trainer.step == 12


def _wait_for_lines(path: Path, count: int, process: subprocess.Popen, timeout: float = 90) -> None:
    def written() -> bool:
        if path.exists() and path.read_text().count('"kind": "update"') >= count:
            return True
        if process.poll() is not None:
            raise AssertionError(process.stderr.read() if process.stderr else "process ended")
        return False

    wait_until(written, timeout=timeout, what=f"the run to start (update {count} in {path.name})")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_finishes_the_update_saves_and_exits_cleanly(tmp_path, signum):
    runs = tmp_path / "runs"
    command = "train" if signum == signal.SIGTERM else "resume"
    if command == "resume":
        done = subprocess.run(
            cli_command("train", "--preset", "mini", "--steps", "20000", "--until", "3", "--run", "r", "--json"),
            capture_output=True, text=True, env=cli_env(tmp_path), timeout=120,
        )
        assert done.returncode == 0, done.stderr
        args = ["resume", "--checkpoint", "r:latest", "--json"]
    else:
        args = ["train", "--preset", "mini", "--steps", "20000", "--run", "r", "--json"]
    process = subprocess.Popen(cli_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=cli_env(tmp_path))
    _wait_for_lines(runs / "r" / "metrics.jsonl", 8, process)
    process.send_signal(signum)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert "Traceback" not in err
    result = json.loads(out)
    assert result["stopped_by"] == signal.Signals(signum).name
    step = result["step"]
    assert 8 <= step < 20000
    latest = list_checkpoints(runs / "r" / "checkpoints")[-1]
    assert latest.step == step
    # The stop saves unless its step is saved already: a signal that arrives while update N's
    # evaluation and best or interval save run (mini: every 50 and 100 updates) stops at N.
    assert latest.reason == "stop" or (step % 50 == 0 and set(latest.reason.split("+")) <= {"best", "interval"}), latest
    restored = restore_trainer(latest.path)
    assert restored.state_digest() == result["state_digest"]


def test_kill_minus_9_of_a_training_process_leaves_only_loadable_checkpoints(tmp_path):
    runs = tmp_path / "runs"
    args = ["train", "--preset", "mini", "--steps", "20000", "--save-every", "1", "--keep-last", "4", "--run", "k"]
    process = subprocess.Popen(cli_command(*args, "--json"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env=cli_env(tmp_path))
    checkpoints = runs / "k" / "checkpoints"
    _wait_for_lines(runs / "k" / "metrics.jsonl", 6, process)
    _freeze_inside_a_save(process, checkpoints)
    process.kill()
    process.wait(30)
    complete = list_checkpoints(checkpoints)
    assert len(complete) >= 3
    for info in complete:
        assert load_checkpoint(info.path).state.step == info.step
    assert recover_interrupted(checkpoints)  # the save the kill cut short is cleaned up
    assert all(not p.name.startswith(".") for p in checkpoints.iterdir())


def _freeze_inside_a_save(process: subprocess.Popen, checkpoints: Path, timeout: float = 60) -> None:
    """SIGSTOP the process while one of its saves has a work folder (``.step-N.…``) open."""
    def saving() -> bool:
        return any(name.startswith(".") for name in os.listdir(checkpoints))

    def stopped() -> bool:
        """SIGSTOP is delivered asynchronously: the process may run on (on another core) for
        a moment after the signal is sent, and finish the save that was seen."""
        stat = Path(f"/proc/{process.pid}/stat")
        if not stat.exists():  # no /proc: trust the signal
            return True
        return stat.read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")

    def frozen_inside_a_save() -> bool:
        if not saving():
            return False
        process.send_signal(signal.SIGSTOP)
        wait_until(stopped, timeout=timeout, what="the process to stop on SIGSTOP", interval=0.001)
        if saving():
            return True
        process.send_signal(signal.SIGCONT)
        return False

    wait_until(frozen_inside_a_save, timeout=timeout, what="a save in progress", interval=0.001)
