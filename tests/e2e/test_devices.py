"""Device choice, the device kind in the environment envelope, and checkpoints written as CPU
tensors whatever the device (what a CPU-only machine can check of the GPU paths)."""

from __future__ import annotations

import json

import pytest

from minigpt_tui.engine.training.checkpoints import restore_trainer, save_checkpoint
from minigpt_tui.engine.formats.safetensors_read import load_file
from minigpt_tui.engine.training.training_state import capture_state, config_identity, envelope_differences
from minigpt_tui.engine.formats.checkpoint_folder import TRAINING_FILE
from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.core.devices import choose_device
from minigpt_tui.engine.training.distributed import ProcessWorld, rank_seed, world_from_environment
from minigpt_tui.engine.core.errors import ConfigError, ResumeRefused
from tests.checkpoint_support import make_trainer, refresh_manifest, rewrite_metadata, snapshot


@pytest.mark.parametrize(
    ("found", "kind"),
    [(("cuda", "mps", "cpu"), "cuda"), (("mps", "cpu"), "mps"), (("cpu",), "cpu")],
)
def test_auto_picks_cuda_then_mps_then_cpu(found, kind):
    assert choose_device("auto", found=found, cuda_count=1).kind == kind


def test_each_local_rank_takes_its_own_cuda_device():
    assert choose_device("cuda", local_rank=1, found=("cuda", "cpu"), cuda_count=2).name == "cuda:1"
    with pytest.raises(ConfigError, match="local rank 2 has no CUDA device of its own .found 2"):
        choose_device("cuda", local_rank=2, found=("cuda", "cpu"), cuda_count=2)


def test_an_absent_device_is_refused_naming_what_was_found():
    with pytest.raises(ConfigError) as caught:
        choose_device("cuda", found=("cpu",))
    assert str(caught.value) == "device 'cuda' is not available here (found: cpu)"
    with pytest.raises(ConfigError, match=r"device 'mps' is not available here \(found: cuda, cpu\)"):
        choose_device("mps", found=("cuda", "cpu"), cuda_count=1)


def test_an_unknown_device_in_the_config_is_refused():
    with pytest.raises(ConfigError, match="train.device must be one of auto, cpu, cuda, mps, got 'tpu'"):
        load_config("tiny", overrides={"train": {"device": "tpu"}})


def test_the_device_is_not_part_of_the_config_identity():
    """A checkpoint saved before the setting existed keeps its identity, and the same run
    may move between devices (the envelope, not the identity, records where it ran)."""
    cpu = load_config("tiny").to_dict()
    moved = load_config("tiny", overrides={"train": {"device": "auto"}}).to_dict()
    before_the_setting = json.loads(json.dumps(cpu))
    del before_the_setting["train"]["device"]
    assert config_identity(cpu) == config_identity(moved) == config_identity(before_the_setting)


def test_checkpoint_tensors_are_cpu_tensors_and_the_envelope_names_the_device(tmp_path):
    trainer = make_trainer("tiny", updates=1)
    captured = capture_state(trainer)
    assert {tensor.device.type for _, tensor in captured.tensors} == {"cpu"}
    assert {tensor.device.type for _, tensor in trainer.named_weights()} == {"cpu"}
    folder = save_checkpoint(trainer, tmp_path / "checkpoints")
    envelope = json.loads(load_file(folder / TRAINING_FILE).metadata["envelope"])
    assert envelope["device"] == "cpu"


def test_an_envelope_saved_before_devices_were_recorded_means_the_cpu():
    now = {"device": "cpu", "torch": "x"}
    assert envelope_differences({"torch": "x"}, now) == []
    assert envelope_differences({"torch": "x", "device": "cuda"}, now) == ["device: saved 'cuda', now 'cpu'"]


def test_resuming_on_another_device_kind_needs_the_environment_flag(tmp_path):
    trainer = make_trainer("tiny", updates=2)
    folder = save_checkpoint(trainer, tmp_path / "run" / "checkpoints")

    def saved_on_a_gpu(records):
        records["envelope"]["device"] = "cuda"

    rewrite_metadata(folder / TRAINING_FILE, saved_on_a_gpu)
    refresh_manifest(folder)
    before = snapshot(tmp_path / "run")
    with pytest.raises(ResumeRefused, match="environment changed since saving .device: saved 'cuda', now 'cpu'"):
        restore_trainer(folder)
    assert snapshot(tmp_path / "run") == before
    restored = restore_trainer(folder, allow_environment_change=True, device="cpu")
    assert restored.device.type == "cpu" and restored.step == 2
    assert not restored.checkpoint_continuation.bitwise_promised
    assert "device: saved 'cuda', now 'cpu'" in restored.checkpoint_continuation.notes[0]


def test_resume_on_an_absent_device_is_refused_in_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    folder = save_checkpoint(make_trainer("tiny", updates=1), tmp_path / "checkpoints")
    with pytest.raises(ConfigError, match=r"device 'cuda' is not available here \(found: .*cpu\)"):
        restore_trainer(folder, device="cuda")


def test_the_world_comes_from_torchrun_s_environment():
    assert world_from_environment({}) == ProcessWorld()
    world = world_from_environment({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0"})
    assert (world.rank, world.world_size, world.local_rank, world.is_writer) == (1, 2, 0, False)
    with pytest.raises(ConfigError, match="rank 3 does not fit a world of 2 processes"):
        world_from_environment({"RANK": "3", "WORLD_SIZE": "2"})
    with pytest.raises(ConfigError, match="RANK must be a whole number, got 'x'"):
        world_from_environment({"RANK": "x", "WORLD_SIZE": "2"})


def test_rank_zero_keeps_the_single_process_streams():
    assert rank_seed(101, 0) == 101
    assert len({rank_seed(101, r) for r in range(4)}) == 4
