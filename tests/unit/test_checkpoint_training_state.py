"""The training-state file: what it holds, capture at a complete boundary, exact restore,
and every refusal (changed corpus, tokenizer, config, model identity, environment)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from minigpt_tui.engine.training.checkpoints import load_checkpoint, restore_trainer, save_checkpoint
from minigpt_tui.engine.formats.portable import MODEL_FILE, save_portable_model
from minigpt_tui.engine.formats.safetensors_read import load_file
from minigpt_tui.engine.training.training_state import capture_training_state
from minigpt_tui.engine.formats.checkpoint_folder import TRAINING_FILE
from minigpt_tui.engine.core.errors import CaptureRefused, ResumeRefused
from minigpt_tui.engine.core.tensors import u64_values
from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer
from tests.checkpoint_support import make_trainer, refresh_manifest, rewrite_metadata, snapshot


def _dtypes(tensors):
    return {name: (str(t.dtype).removeprefix("torch."), tuple(t.shape)) for name, t in tensors}


def test_the_tiny_state_after_two_updates_holds_seed_000s_boundary():
    trainer = make_trainer("tiny", updates=2)
    tensors, metadata = capture_training_state(trainer, "model-identity")
    values = dict(tensors)
    kinds = _dtypes(tensors)
    # Our seeds, counters and cursors are U64; generator states U8; torch's AdamW keeps its dtypes.
    assert kinds["randomness.dropout"] == ("uint64", (2,))
    assert u64_values(values["randomness.dropout"]) == [18446744073709551613, trainer.dropout_counter]
    assert kinds["randomness.sampling_generator_state"][0] == "uint8"
    assert kinds["randomness.seeds"] == ("uint64", (4,))
    assert u64_values(values["data.order"]) == [2, 0, 1]
    assert u64_values(values["data.cursor"]) == [1] and u64_values(values["data.epoch"]) == [1]
    assert u64_values(values["progress.step"]) == [2]
    assert u64_values(values["accumulation.counts"]) == [2, 0, 1]
    assert values["loss_scaler.values"].tolist()[:3] == [8.0, 1.0, 32.0]
    assert u64_values(values["loss_scaler.counters"]) == [1, 3, 2]  # two finite updates toward 3
    assert values["clipping.max_norm"].tolist() == [1.0] and values["recompute.enabled"].tolist() == [1]
    assert kinds["optimizer.state.token_embedding.weight.step"] == ("float32", ())
    assert float(values["optimizer.state.token_embedding.weight.step"]) == 2.0
    assert kinds["optimizer.state.token_embedding.weight.exp_avg"] == ("float64", (266, 4))
    assert kinds["optimizer.groups.hyperparameters"] == ("float64", (2, 5))  # decay, then no-decay group
    assert sum(1 for n in values if n.startswith("optimizer.state.") and n.endswith(".exp_avg_sq")) == 29
    assert not any(t.dtype in (torch.float32, torch.float64) for n, t in tensors if n.startswith(("data.", "randomness.")))
    envelope = metadata["envelope"]
    assert {"python", "torch", "numpy", "safetensors", "minigpt_tui", "precision", "threads", "deterministic", "platform"} <= set(envelope)
    assert not any("textual" in key or "rich" in key for key in envelope)
    assert envelope["threads"] == 1 and envelope["deterministic"] is True
    records = metadata["records"]
    assert records["data_progress"]["next_batch"] == [[0], [1]]  # short/full then long/full
    assert records["schedule"]["next_lr"] == 0.0003250000000000001
    assert set(metadata["identities"]) == {"config", "corpus", "tokenizer", "model"}


def test_a_replacement_sampler_state_is_its_generator_bytes():
    trainer = make_trainer("mini", updates=3, train={"steps": 20})
    tensors, _ = capture_training_state(trainer, "x")
    kinds = _dtypes(tensors)
    assert kinds["data.generator_state"][0] == "uint8"
    assert kinds["data.draws"] == ("uint64", (1,))
    assert "data.cursor" not in kinds


def _pending_gradients(trainer):
    batch = trainer._batch([0]) if hasattr(trainer, "_batch") else None
    inputs = batch.inputs if batch is not None else torch.tensor([list(trainer.train_examples[0].ids[:-1])])
    targets = batch.targets if batch is not None else torch.tensor([list(trainer.train_examples[0].ids[1:])])
    with torch.enable_grad():
        logits = trainer.model(inputs).logits
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1).backward()
    return {n: p.grad.clone() for n, p in trainer.model.named_parameters()}


@pytest.mark.parametrize("pending", [1, 0])
def test_capture_between_updates_is_refused_and_leaves_the_gradients(tmp_path, pending):
    trainer = make_trainer("tiny", updates=1)
    grads = _pending_gradients(trainer)
    trainer.pending_microbatches = pending
    before = snapshot(tmp_path)
    with pytest.raises(CaptureRefused) as caught:
        save_checkpoint(trainer, tmp_path / "checkpoints")
    assert ("microbatches are pending" if pending else "hold gradients") in str(caught.value)
    assert trainer.pending_microbatches == pending
    for name, p in trainer.model.named_parameters():
        assert p.grad is not None and torch.equal(p.grad, grads[name])
    assert snapshot(tmp_path) == before  # nothing written


def test_restore_continues_bit_for_bit_in_process(tmp_path):
    original = make_trainer("tiny", updates=2)
    folder = save_checkpoint(original, tmp_path / "checkpoints")
    restored = restore_trainer(folder)
    assert restored.step == 2 and restored.progress() == original.progress()
    assert restored.state_digest() == original.state_digest()
    for _ in range(2):
        assert restored.update().exact_fields() == original.update().exact_fields()
    assert restored.state_digest() == original.state_digest()
    assert restored.progress() == original.progress()
    assert restored.sampling.get_state().equal(original.sampling.get_state())


def test_a_state_saved_before_the_first_update_restores_too(tmp_path):
    original = make_trainer("mini", train={"steps": 10})
    folder = save_checkpoint(original, tmp_path / "checkpoints")
    assert not any(e.name.startswith("optimizer.state.") for e in load_file(folder / TRAINING_FILE).header.entries)
    restored = restore_trainer(folder)
    for _ in range(3):
        assert restored.update().exact_fields() == original.update().exact_fields()
    assert restored.state_digest() == original.state_digest()


@pytest.fixture
def saved(tmp_path):
    trainer = make_trainer("tiny", updates=2)
    return trainer, save_checkpoint(trainer, tmp_path / "run" / "checkpoints")


def _refused(folder, match, **kwargs):
    root = folder.parent.parent
    before = snapshot(root)
    with pytest.raises(ResumeRefused, match=match) as caught:
        restore_trainer(folder, **kwargs)
    assert "\n" not in str(caught.value)
    assert snapshot(root) == before  # a refused load changes nothing on disk


def test_a_tokenizer_swapped_for_another_of_the_same_size_is_refused(saved):
    trainer, folder = saved
    other = ByteBPETokenizer.train(["zzzz yyyy xxxx wwww", "qqqq pppp"], len(trainer.tokenizer.merges))
    assert other.vocab_size == trainer.tokenizer.vocab_size and other.identity != trainer.tokenizer.identity
    save_portable_model(trainer.model, other, folder / MODEL_FILE)
    refresh_manifest(folder)
    _refused(folder, "tokenizer")


def test_a_model_file_from_another_checkpoint_is_refused(saved, tmp_path):
    trainer, folder = saved
    trainer.update()
    other = save_checkpoint(trainer, tmp_path / "elsewhere")
    (folder / MODEL_FILE).write_bytes((other / MODEL_FILE).read_bytes())
    refresh_manifest(folder)
    _refused(folder, "different model")


def test_a_changed_config_is_refused(saved):
    _, folder = saved

    def edit(records):
        records["config"]["train"]["lr"] = 0.5

    rewrite_metadata(folder / TRAINING_FILE, edit)
    refresh_manifest(folder)
    _refused(folder, "config changed")


def test_a_changed_corpus_is_refused(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("alpha beta gamma\ndelta epsilon\nzeta eta theta\n")
    trainer = make_trainer("tiny", updates=1, corpus={"source": str(corpus)}, train={"document_order": ()})
    folder = save_checkpoint(trainer, tmp_path / "run" / "checkpoints")
    corpus.write_text("alpha beta gamma\ndelta epsilon\nzeta eta iota\n")
    _refused(folder, "corpus changed")
    moved = tmp_path / "moved.txt"
    moved.write_text("alpha beta gamma\ndelta epsilon\nzeta eta theta\n")
    assert restore_trainer(folder, corpus_path_override=moved).step == 1  # same identity, new place


def test_a_changed_environment_is_refused_in_exact_precision_unless_allowed(saved, tmp_path):
    trainer, folder = saved

    def edit(records):
        records["envelope"]["torch"] = "1.0.0"

    rewrite_metadata(folder / TRAINING_FILE, edit)
    refresh_manifest(folder)
    _refused(folder, "environment changed .*torch")
    restored = restore_trainer(folder, allow_environment_change=True)
    assert restored.checkpoint_continuation.bitwise_promised is False
    assert "torch" in restored.checkpoint_continuation.notes[0]
    # The record travels: a later checkpoint says bitwise continuation is no longer promised.
    restored.update()
    later = save_checkpoint(restored, tmp_path / "later")
    continuation = json.loads(load_file(later / TRAINING_FILE).metadata["continuation"])
    assert continuation["bitwise_promised"] is False and "torch" in continuation["notes"][0]
    assert restore_trainer(later).checkpoint_continuation.bitwise_promised is False


def test_a_checkpoint_loads_without_changing_anything(saved):
    _, folder = saved
    before = snapshot(folder)
    loaded = load_checkpoint(folder)
    assert loaded.state.step == 2 and loaded.portable_model().tied_alias
    assert snapshot(folder) == before
