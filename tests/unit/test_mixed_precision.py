"""bf16 and fp16: autocast over float32 master weights; fp16 always scales its loss."""

from __future__ import annotations

import math

import pytest
import torch

from minigpt_tui.engine.training.checkpoints import restore_trainer, save_checkpoint
from minigpt_tui.engine.formats.portable import MODEL_FILE
from minigpt_tui.engine.formats.safetensors_read import load_file
from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.core.errors import ConfigError
from minigpt_tui.engine.training.trainer import autocast_for, mixed_precision_note
from tests.checkpoint_support import make_trainer

MIXED = {"steps": 6, "eval_every": 3}


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_float32_master_weights_and_resumes_on_the_cpu(tmp_path, precision):
    trainer = make_trainer("mini", updates=0, train={**MIXED, "precision": precision})
    records = [trainer.update() for _ in range(3)]
    assert all(math.isfinite(r.loss) and r.applied for r in records)
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    # fp16 gradients would underflow unscaled: its loss is always scaled (bounded scaler).
    assert trainer.scaler.enabled is (precision == "fp16")
    assert records[0].loss_scale == (65536.0 if precision == "fp16" else 1.0)
    folder = save_checkpoint(trainer, tmp_path / "checkpoints")
    assert {t.dtype for t in load_file(folder / MODEL_FILE).tensors().values() if t.is_floating_point()} <= {
        torch.float32, torch.float64}
    restored = restore_trainer(folder)
    assert restored.config.train.precision == precision
    assert restored.weights_digest() == trainer.weights_digest()
    assert not restored.checkpoint_continuation.bitwise_promised  # only exact precision promises bits
    assert restored.update().step == 4


def test_autocast_only_in_the_mixed_precisions():
    with autocast_for("exact", torch.device("cpu")):
        assert not torch.is_autocast_enabled("cpu")
    with autocast_for("bf16", torch.device("cpu")):
        assert torch.is_autocast_enabled("cpu")
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16


def test_a_note_only_for_bf16_on_a_cpu_without_native_bf16():
    assert mixed_precision_note("fp16", "cpu") is None
    assert mixed_precision_note("bf16", "cuda") is None
    native = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    note = mixed_precision_note("bf16", "cpu")
    assert (note is None) == native
    if note is not None:
        assert "no native bf16" in note


def test_an_unknown_precision_is_refused():
    with pytest.raises(ConfigError, match="train.precision must be one of"):
        load_config("mini", overrides={"train": {"precision": "fp8"}})
