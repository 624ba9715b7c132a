"""Round four, deletion: retention, clean-up and the app's delete remove only the files
minigpt-tui wrote (file by file; a folder holding a user's file stays, and the run's log
says so); no user output is written inside a checkpoint folder; a resume of a run another
process trains is refused as in use, not as a missing folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.core.errors import CheckpointError, RunLocked, WriteRefused
from minigpt_tui.engine.core.files import (
    CHECKPOINT_FILES,
    check_new_output,
    check_user_output,
    enclosing_checkpoint,
    refuse_inside_checkpoint,
    remove_files_then_folder,
)
from minigpt_tui.engine.formats.checkpoint_folder import MANIFEST, TRAINING_FILE, list_checkpoints
from minigpt_tui.engine.formats.portable import MODEL_FILE
from minigpt_tui.engine.session.plans import NewRun, ResumeRun, prepare
from minigpt_tui.engine.session.run_store import RunStore, RunStoreError, remove_run_files
from minigpt_tui.engine.session.runs import RunDirectory, lock_run, refuse_if_in_use, resolve_checkpoint
from minigpt_tui.engine.session.training import TrainingSession
from minigpt_tui.engine.training.checkpoints import (
    Checkpointer,
    KeptFolder,
    prune_checkpoints,
    recover_interrupted,
    save_checkpoint,
)
from tests.checkpoint_support import make_trainer
from tests.conftest import run_cli

NOTE = "what I saw at this step"
OURS = sorted(CHECKPOINT_FILES)


@pytest.fixture(scope="module")
def trainer():
    return make_trainer("tiny", updates=1)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run ``kept`` trained for two updates (its checkpoint at step 2), built once."""
    root = tmp_path_factory.mktemp("round4-deletion") / "runs"
    TrainingSession(NewRun(load_config("tiny"), root, "kept", until=2), lambda _event: None).run()
    return root


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_the_checkpoint_names_the_output_rule_knows_are_the_formats():
    assert sorted(CHECKPOINT_FILES) == sorted([MANIFEST, MODEL_FILE, TRAINING_FILE])


# -- retention ----------------------------------------------------------------------------------
def test_pruning_removes_our_files_and_keeps_a_users_note_in_its_folder(tmp_path, trainer):
    checkpoints = tmp_path / "checkpoints"
    old = save_checkpoint(trainer, checkpoints)
    (old / "note.txt").write_text(NOTE)
    trainer.update()
    new = save_checkpoint(trainer, checkpoints)
    kept: list[KeptFolder] = []
    assert prune_checkpoints(checkpoints, 1, None, kept=kept.append) == [old]
    assert _listing(old) == ["note.txt"] and (old / "note.txt").read_text() == NOTE
    assert [info.path for info in list_checkpoints(checkpoints)] == [new]  # no longer a checkpoint
    assert _listing(checkpoints) == [old.name, new.name]  # no hidden trash left behind
    assert kept == [KeptFolder(old, ("note.txt",))]
    assert "\n" not in kept[0].line() and "note.txt" in kept[0].line() and str(old) in kept[0].line()


def test_pruning_a_folder_of_our_own_files_leaves_nothing(tmp_path, trainer):
    checkpoints = tmp_path / "checkpoints"
    old = save_checkpoint(trainer, checkpoints)
    trainer.update()
    save_checkpoint(trainer, checkpoints)
    kept: list[KeptFolder] = []
    prune_checkpoints(checkpoints, 1, None, kept=kept.append)
    assert not old.exists() and kept == [] and len(_listing(checkpoints)) == 1


def test_a_users_subfolder_in_a_checkpoint_is_never_entered(tmp_path):
    folder = tmp_path / "step-000001"
    (folder / "plots").mkdir(parents=True)
    (folder / "plots" / "loss.png").write_bytes(b"png")
    for name in OURS:
        (folder / name).write_bytes(b"x")
    assert remove_files_then_folder(folder, lambda name: name in OURS or name == "plots") == ("plots",)
    assert (folder / "plots" / "loss.png").read_bytes() == b"png" and _listing(folder) == ["plots"]


def test_the_checkpointer_records_a_kept_folder_in_the_runs_log_once(tmp_path):
    run = RunDirectory.create(tmp_path / "runs", "noted", "tiny")
    trainer = make_trainer("tiny", updates=1)
    checkpointer = Checkpointer(run, keep_last=1)
    first = checkpointer.save(trainer, "interval")
    (first / "note.txt").write_text(NOTE)
    for _ in range(2):
        trainer.update()
        checkpointer.save(trainer, "interval")
    notes = [json.loads(line) for line in run.metrics_path.read_text().splitlines()]
    assert [(n["kind"], n["step"]) for n in notes] == [("note", 2)] and "note.txt" in notes[0]["note"]
    assert checkpointer.take_notes() == [notes[0]["note"]] and checkpointer.take_notes() == []
    assert (first / "note.txt").read_text() == NOTE


def test_the_session_shows_the_kept_folder_as_a_notice(tmp_path):
    from minigpt_tui.engine.session.events import KEPT_FILES, Refused, Saved

    root = tmp_path / "runs"
    events: list = []

    def sink(event):
        events.append(event)
        if isinstance(event, Saved) and event.step == 1:
            (event.path / "note.txt").write_text(NOTE)

    config = load_config("tiny", overrides={"train": {"save_every": 1, "keep_last": 1}})
    TrainingSession(NewRun(config, root, "shown", until=2), sink).run()
    notices = [e for e in events if isinstance(e, Refused) and e.action == KEPT_FILES]
    assert len(notices) == 1 and "note.txt" in notices[0].message
    assert (root / "shown" / "checkpoints" / "step-000001" / "note.txt").read_text() == NOTE


def test_saving_a_step_again_keeps_a_users_note_in_the_new_checkpoint(tmp_path, trainer):
    checkpoints = tmp_path / "checkpoints"
    first = save_checkpoint(trainer, checkpoints, "interval")
    (first / "note.txt").write_text(NOTE)
    kept: list[KeptFolder] = []
    again = save_checkpoint(trainer, checkpoints, "best", kept=kept.append)
    assert again == first and _listing(again) == sorted([*OURS, "note.txt"])
    assert _listing(checkpoints) == [first.name] and kept == [KeptFolder(again, ("note.txt",))]
    assert list_checkpoints(checkpoints)[0].reason == "best"


# -- clean-up of interrupted and failed saves -----------------------------------------------------
DEAD = 2**22 + 12345  # no such process


def test_recovery_puts_a_users_file_back_and_removes_only_our_files(tmp_path, trainer):
    checkpoints = tmp_path / "checkpoints"
    folder = save_checkpoint(trainer, checkpoints)
    (folder / "note.txt").write_text(NOTE)
    trash = folder.with_name(f".{folder.name}.trash-{DEAD}-0123abcd")
    os.rename(folder, trash)  # a process killed while pruning it
    partial = checkpoints / f".step-000009.partial-{DEAD}-0123abce"
    partial.mkdir()
    (partial / MODEL_FILE).write_bytes(b"half")
    (partial / "mine.txt").write_text("not minigpt-tui's")
    kept: list[KeptFolder] = []
    actions = recover_interrupted(checkpoints, kept=kept.append)
    assert sorted(actions) == [f"kept {partial.name}", f"kept {folder.name}"]
    assert _listing(folder) == ["note.txt"] and not trash.exists()
    assert _listing(partial) == ["mine.txt"]
    assert sorted(k.folder for k in kept) == sorted([folder, partial])


def test_a_failed_save_removes_its_own_files_and_leaves_a_users(tmp_path, trainer):
    checkpoints = tmp_path / "checkpoints"

    def progress(event: str) -> None:
        if event == f"{TRAINING_FILE}:fsynced":
            (work,) = [p for p in checkpoints.iterdir() if p.name.startswith(".step-")]
            (work / "mine.txt").write_text("not minigpt-tui's")
        if event == "folder-fsynced":
            raise OSError(28, "No space left on device")

    with pytest.raises(CheckpointError, match="No space left on device"):
        save_checkpoint(trainer, checkpoints, progress=progress)
    (work,) = list(checkpoints.iterdir())
    assert _listing(work) == ["mine.txt"]


# -- the app's delete of a run ------------------------------------------------------------------
def test_delete_refuses_a_run_with_a_note_inside_a_checkpoint_folder(trained, tmp_path):
    import shutil

    root = tmp_path / "runs"
    shutil.copytree(trained, root)
    checkpoint = resolve_checkpoint("kept:latest", root)
    (checkpoint / "note.txt").write_text(NOTE)
    with pytest.raises(RunStoreError, match=r"checkpoints/step-000002/note.txt\).*nothing was deleted"):
        RunStore(root).delete(root / "kept")
    assert (checkpoint / "note.txt").read_text() == NOTE and (checkpoint / MANIFEST).is_file()


def test_removing_a_run_deletes_file_by_file_and_keeps_what_arrived_late(trained, tmp_path):
    import shutil

    root = tmp_path / "runs"
    shutil.copytree(trained, root)
    run = root / "kept"
    checkpoint = resolve_checkpoint("kept:latest", root)
    (checkpoint / "note.txt").write_text(NOTE)  # as if written after delete's check
    (run / "tensorboard").mkdir()
    (run / "tensorboard" / "events.out.tfevents.1.host").write_bytes(b"e")
    assert remove_run_files(run) == ["checkpoints/step-000002/note.txt"]
    assert _listing(run) == ["checkpoints"] and _listing(run / "checkpoints") == [checkpoint.name]
    assert _listing(checkpoint) == ["note.txt"]
    (checkpoint / "note.txt").unlink()
    assert remove_run_files(run) == [] and not run.exists()


def test_delete_of_a_run_of_our_files_only_removes_it(trained, tmp_path):
    import shutil

    root = tmp_path / "runs"
    shutil.copytree(trained, root)
    RunStore(root).delete(root / "kept")
    assert _listing(root) == []


# -- one rule for every output a user names -------------------------------------------------------
def test_the_rule_finds_a_checkpoint_folder_through_links_and_copies(trained, tmp_path):
    checkpoint = resolve_checkpoint("kept:latest", trained)
    assert enclosing_checkpoint(checkpoint / "trace.json") == checkpoint
    assert enclosing_checkpoint(checkpoint / "a" / "b" / "new-folder") == checkpoint  # not made yet
    (tmp_path / "link").symlink_to(checkpoint)
    assert enclosing_checkpoint(tmp_path / "link" / "trace.json") == checkpoint
    hidden = checkpoint.parent / f".{checkpoint.name}.partial-1-0123abcd"
    assert enclosing_checkpoint(hidden / "x") == hidden  # a save in progress is one too
    copy = tmp_path / "copied"
    copy.mkdir()
    (copy / MANIFEST).write_text("{}")
    (copy / MODEL_FILE).write_bytes(b"x")
    assert enclosing_checkpoint(copy / "trace.json") == copy
    assert enclosing_checkpoint(tmp_path / "trace.json") is None
    assert enclosing_checkpoint(checkpoint.parent / "trace.json") is None  # the run's checkpoints/ itself


@pytest.mark.parametrize("check", [
    lambda path: check_user_output(path),
    lambda path: check_user_output(path, replace=True),
    lambda path: check_new_output(path),
    lambda path: refuse_inside_checkpoint(path, "TensorBoard event files"),
])
def test_every_output_check_refuses_a_path_in_a_checkpoint_folder(trained, check):
    checkpoint = resolve_checkpoint("kept:latest", trained)
    before = _listing(checkpoint)
    with pytest.raises(WriteRefused, match="is inside the checkpoint folder") as refused:
        check(checkpoint / "trace.json")
    assert "\n" not in str(refused.value) and str(checkpoint) in str(refused.value)
    assert _listing(checkpoint) == before


def test_replacing_a_checkpoints_own_file_with_force_is_refused(trained, capsys):
    checkpoint = resolve_checkpoint("kept:latest", trained)
    model = (checkpoint / MODEL_FILE).read_bytes()
    code, _out, err = run_cli(capsys, "generate", "--model", "kept:latest", "--runs-dir", str(trained),
                              "--prompt", "a", "--trace-out", str(checkpoint / MODEL_FILE), "--force")
    assert code == 1 and err.count("\n") == 1 and "inside the checkpoint folder" in err
    assert (checkpoint / MODEL_FILE).read_bytes() == model


@pytest.mark.parametrize(("args", "written"), [
    (["generate", "--model", "kept:latest", "--prompt", "a", "--trace-out"], "trace.json"),
    (["probes", "--model", "kept:latest", "--out"], "trace.json"),
    (["contrast", "--model", "kept:latest", "--model", "kept:latest", "--prompt", "a", "--out"], "trace.json"),
    (["export-tensorboard", "kept", "--out"], "events"),
    (["train", "--preset", "tiny", "--until", "1", "--run", "other", "--tensorboard"], "events"),
    (["verify", "--keep"], "runs"),
])
def test_each_output_option_inside_a_checkpoint_folder_is_one_line_and_writes_nothing(trained, capsys, args, written):
    checkpoint = resolve_checkpoint("kept:latest", trained)
    before = _listing(checkpoint)
    code, out, err = run_cli(capsys, "--runs-dir", str(trained), *args, str(checkpoint / written))
    assert code == 1 and err.count("\n") == 1 and err.startswith("minigpt-tui: error:"), err
    assert "inside the checkpoint folder" in err and "Traceback" not in err + out
    assert _listing(checkpoint) == before and not (trained / "other").exists()


def test_the_apps_trace_save_is_refused_in_a_checkpoint_folder(trained):
    from minigpt_tui.engine.session.generation import GenerationSession

    checkpoint = resolve_checkpoint("kept:latest", trained)
    session = GenerationSession.__new__(GenerationSession)  # the rule comes before the stepper is asked
    with pytest.raises(WriteRefused, match="inside the checkpoint folder"):
        session.save_trace(checkpoint / "trace.json")
    assert not (checkpoint / "trace.json").exists()


# -- resume while another process trains the run ---------------------------------------------------
def test_a_resume_whose_checkpoint_the_trainer_pruned_is_refused_as_in_use(trained, tmp_path):
    import shutil

    root = tmp_path / "runs"
    shutil.copytree(trained, root)
    checkpoint = resolve_checkpoint("kept:latest", root)
    with lock_run(root / "kept") as lock:  # the trainer holds the run ...
        lock.announce()
        prune_checkpoints(checkpoint.parent, 0, None)  # ... and prunes what was resolved a moment ago
        assert not checkpoint.exists()
        with pytest.raises(RunLocked, match="is in use by process"):
            refuse_if_in_use(checkpoint)
        with pytest.raises(RunLocked, match="one process writes to a run at a time"):
            prepare(ResumeRun(checkpoint, root))
        before = _listing(root / "kept")
    assert _listing(root / "kept") == before  # the refusals wrote nothing
    refuse_if_in_use(checkpoint)  # released: nothing to refuse
    refuse_if_in_use(tmp_path / "loose" / "step-000001")  # not a run's checkpoint


def test_the_cli_resume_race_gives_the_locked_line(trained, tmp_path, capsys, monkeypatch):
    import shutil

    import minigpt_tui.commands.checkpoints as command

    root = tmp_path / "runs"
    shutil.copytree(trained, root)
    lock = lock_run(root / "kept")
    resolve = command._resolve

    def resolved_then_pruned(spec, runs_dir):
        folder = resolve(spec, runs_dir)
        prune_checkpoints(folder.parent, 0, None)  # the trainer's retention, right after resolving
        return folder

    monkeypatch.setattr(command, "_resolve", resolved_then_pruned)
    try:
        code, _out, err = run_cli(capsys, "resume", "--checkpoint", "kept:latest", "--runs-dir", str(root))
    finally:
        lock.release()
    assert code == 1 and err.count("\n") == 1 and "run 'kept' is in use by" in err
    assert "not a checkpoint directory" not in err
