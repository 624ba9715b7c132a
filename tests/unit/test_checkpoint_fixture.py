"""A checkpoint written by an earlier release (format 1, tiny preset, step 2 of 4, kept in
``tests/fixtures``) still loads, and resumes bit for bit: the state read back is the state
written, and updates 3 and 4 are the same whether the resumed run stops and resumes again
between them or not. On a CPU whose kernels give the fixture's bits (the fixture's own kind),
they also equal those of a run that never stopped since update 0.

The fixture was written before the training state became a table of parts; if a change to
the config, the corpus identity or the state layout breaks old checkpoints, this fails."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from minigpt_tui.engine.formats.checkpoint_folder import TRAINING_FILE
from minigpt_tui.engine.formats.state_groups import StateGroup, group_of
from minigpt_tui.engine.session.events import Saved
from minigpt_tui.engine.session.plans import ResumeRun
from minigpt_tui.engine.session.training import TrainingSession
from minigpt_tui.engine.training.checkpoints import (
    load_checkpoint,
    restore_trainer,
    save_checkpoint,
)
from minigpt_tui.engine.training.state_parts import STATE_PARTS
from minigpt_tui.engine.training.trainer import apply_precision
from minigpt_tui.engine.training.training_state import (
    capture_state,
    read_training_state,
)
from tests.checkpoint_support import make_trainer

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny-format1" / "step-000002"


def _resumed():
    # The environment may have moved on since the fixture was written (torch, Python):
    # the test still expects the same bits on the CPU this suite runs on.
    trainer = restore_trainer(FIXTURE, allow_environment_change=True)
    apply_precision(trainer.config.train)
    return trainer


def test_the_format_1_fixture_reads_back_as_exactly_the_state_it_holds():
    trainer = _resumed()
    assert trainer.step == 2
    saved = read_training_state(FIXTURE / TRAINING_FILE)
    assert capture_state(trainer).content_digest() == saved.metadata["content_sha256"]
    assert load_checkpoint(FIXTURE).state.step == 2


def test_the_format_1_fixture_resumes_bit_for_bit(tmp_path):
    straight = _resumed()
    stopped = _resumed()
    assert stopped.update().exact_fields() == straight.update().exact_fields()
    again = restore_trainer(save_checkpoint(stopped, tmp_path / "checkpoints", "stop"))
    assert again.state_digest() == straight.state_digest()
    assert again.update().exact_fields() == straight.update().exact_fields()
    assert again.state_digest() == straight.state_digest()
    assert again.progress() == straight.progress()


def test_on_the_fixture_s_cpu_kind_a_resumed_run_equals_one_never_stopped():
    resumed = _resumed()
    fresh = make_trainer("tiny", updates=2)
    if fresh.state_digest() != resumed.state_digest():
        pytest.skip("this CPU's kernels give other bits than the fixture's from update 1 on")
    for _ in range(2):
        assert resumed.update().exact_fields() == fresh.update().exact_fields()
    assert resumed.state_digest() == fresh.state_digest()


def test_a_session_resumes_the_fixture_to_the_end_of_its_schedule(tmp_path):
    folder = tmp_path / "loose" / "step-000002"
    shutil.copytree(FIXTURE, folder)
    events: list = []
    session = TrainingSession(ResumeRun(folder, tmp_path / "runs", allow_environment_change=True), events.append)
    finished = session.run()
    straight = _resumed()
    straight.update()
    straight.update()
    assert finished.step == 4 and finished.state_digest == straight.state_digest()
    assert [e.step for e in events if isinstance(e, Saved)] == [4]


def test_every_tensor_of_the_fixture_belongs_to_a_declared_part_and_a_group():
    tensors = read_training_state(FIXTURE / TRAINING_FILE).tensors
    declared = {spec.name for part in STATE_PARTS for spec in part.specs}
    undeclared = {n for n in tensors if n not in declared and not n.startswith("optimizer.state.")}
    assert undeclared == set()
    assert all(group_of(name) is not StateGroup.OTHER for name in tensors)


def test_integrity_has_one_shape_for_our_folders_and_transformers_folders(tmp_path):
    from minigpt_tui.engine.formats.checkpoint_folder import verify_checkpoint
    from minigpt_tui.engine.formats.integrity import Integrity, IntegrityScope

    ours = verify_checkpoint(FIXTURE, hashes=True)
    assert ours.ok and ours.step == 2 and ours.hashes_checked and [f.name for f in ours.files] == [
        "model.safetensors", "training.safetensors"]
    foreign = Integrity(IntegrityScope.INDEX, "headers and index", ("model.ghost.weight is not in any shard",))
    assert not foreign.ok and foreign.problem == "model.ghost.weight is not in any shard"
    assert ours.to_json().keys() == foreign.to_json().keys()
    damaged = tmp_path / "step-000002"
    shutil.copytree(FIXTURE, damaged)
    (damaged / "training.safetensors").write_bytes(b"")
    found = verify_checkpoint(damaged, hashes=False)
    assert not found.ok and "bytes, the manifest records" in found.problem and found.files[1].size_ok is False
