"""The portable model file: entries, metadata, identity, tied restore, backbone export."""

from __future__ import annotations

import json
import struct

import pytest
import torch
import torch.nn.functional as F

from minigpt_tui.engine.formats.portable import CONSTANTS, MERGES, save_portable_model
from minigpt_tui.engine.models.model_file import load_backbone, load_portable_model, save_backbone
from minigpt_tui.engine.formats.safetensors_read import load_file, read_header
from minigpt_tui.engine.formats.safetensors_write import encode_header, write_safetensors
from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer
from tests.checkpoint_support import data_offset, flip_bit, make_trainer


@pytest.fixture(scope="module")
def tiny():
    return make_trainer("tiny", updates=2)


def test_the_tiny_model_file_has_31_entries_with_constants_and_merges(tiny, tmp_path):
    path = tmp_path / "model.safetensors"
    identity = save_portable_model(tiny.model, tiny.tokenizer, path)
    header = read_header(path)
    assert len(header.entries) == 31
    learned = [e for e in header.entries if e.name not in (CONSTANTS, MERGES)]
    assert len(learned) == 29 and sum(e.elements for e in learned) == 1572
    assert {e.name for e in learned} == {n for n, _ in tiny.model.named_parameters()}
    assert all(e.dtype == "F64" for e in learned)
    assert "head.weight" not in header.names  # the tied table is stored once
    constants = header.entry(CONSTANTS)
    assert (constants.dtype, constants.shape) == ("F64", (2,))
    merges = header.entry(MERGES)
    assert (merges.dtype, merges.shape) == ("U32", (8, 2))
    loaded = load_file(path)
    assert loaded.tensor(CONSTANTS).tolist() == [10000.0, 1e-5]
    assert loaded.tensor(MERGES).to(torch.int64).tolist() == [list(p) for p in tiny.tokenizer.merges]
    records = {k: json.loads(v) for k, v in header.metadata.items()}
    assert all(isinstance(v, str) for v in header.metadata.values())
    assert records["format"] == {"name": "minigpt-tui/portable-model", "version": 1}
    assert records["special_ids"] == {"bos": 0, "eos": 1, "byte_offset": 2, "first_merge_id": 258}
    assert records["composition"]["head"] == {"kind": "tied-table-transpose", "table": "token_embedding.weight"}
    assert records["composition"]["encoder"]["vocab_size"] == 266
    assert records["aliases"][0]["target"] == "token_embedding.weight"
    assert records["aliases"][0]["transform"] == "transpose"
    assert records["identity"]["model"] == identity
    assert records["model_config"]["family"] == "llama" and records["constants"]["layout"] == ["rope_base", "norm_eps"]
    assert "optimizer" not in records and "envelope" not in records  # nothing about training


def test_a_gpt2_file_holds_its_layernorm_epsilon_as_the_one_constant(tmp_path):
    mini = make_trainer("mini")
    path = tmp_path / "model.safetensors"
    save_portable_model(mini.model, mini.tokenizer, path)
    header = read_header(path)
    assert len(header.entries) == mini.parameter_counts[0] + 2
    assert header.entry(CONSTANTS).shape == (1,)
    assert load_file(path).tensor(CONSTANTS).tolist() == [1e-5]
    restored = load_portable_model(path)
    ids = torch.tensor([[0, 40, 41, 42, 43]])
    with torch.no_grad():
        mini.model.eval()
        assert torch.equal(restored.model(ids).logits, mini.model(ids).logits)
        mini.model.train()
    assert restored.tied_alias


def test_restore_builds_one_shared_table_whose_gradient_combines_both_uses(tiny, tmp_path):
    path = tmp_path / "model.safetensors"
    save_portable_model(tiny.model, tiny.tokenizer, path)
    restored = load_portable_model(path)
    model = restored.model
    assert not model.training and restored.tied_alias
    assert model.head_weight is model.token_embedding.weight
    assert len(list(model.parameters())) == 29
    assert next(model.parameters()).device.type == "cpu" and model.dtype == torch.float64
    ids = torch.tensor([[0, 99, 100, 101, 1]])
    tiny.model.eval()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, tiny.model(ids).logits)  # same values, bit for bit
    tiny.model.train()

    table = model.token_embedding.weight
    inputs, targets = ids[:, :-1], ids[:, 1:]

    def loss_from(lookup_table: torch.Tensor, head_table: torch.Tensor) -> torch.Tensor:
        hidden = model(None, inputs_embeds=F.embedding(inputs, lookup_table), skip_head=True).hidden
        logits = hidden @ head_table.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    with torch.enable_grad():
        model.zero_grad()
        out = model(inputs).logits
        F.cross_entropy(out.reshape(-1, out.shape[-1]), targets.reshape(-1)).backward()
        combined = table.grad.clone()
        model.zero_grad()
        loss_from(table, table.detach()).backward()
        lookup_only = table.grad.clone()
        model.zero_grad()
        loss_from(table.detach(), table).backward()
        head_only = table.grad.clone()
    assert lookup_only.abs().sum() > 0 and head_only.abs().sum() > 0
    assert torch.allclose(combined, lookup_only + head_only, rtol=0, atol=1e-15)
    assert not torch.allclose(combined, head_only, rtol=0, atol=1e-15)  # the lookup use counts too


def _relaid(path, target, reverse_metadata: bool) -> None:
    """The same tensors and records, written in another byte layout and metadata order."""
    loaded = load_file(path)
    entries = list(reversed(loaded.header.entries))
    metadata = dict(loaded.metadata)
    if reverse_metadata:
        metadata = {k: metadata[k] for k in reversed(list(metadata))}
        metadata = {k: json.dumps(json.loads(v), sort_keys=False, indent=1) for k, v in metadata.items()}
    blobs, offset, placed = [], 0, []
    for e in entries:
        data = bytes(loaded.buffer[loaded.header.data_start + e.begin : loaded.header.data_start + e.end])
        placed.append(type(e)(e.name, e.dtype, e.shape, offset, offset + len(data)))
        blobs.append(data)
        offset += len(data)
    header = encode_header(placed, metadata)
    target.write_bytes(struct.pack("<Q", len(header)) + header + b"".join(blobs))


def test_model_identity_ignores_metadata_order_and_byte_layout(tiny, tmp_path):
    path = tmp_path / "model.safetensors"
    identity = save_portable_model(tiny.model, tiny.tokenizer, path)
    other = tmp_path / "other" / "model.safetensors"
    other.parent.mkdir()
    _relaid(path, other, reverse_metadata=True)
    assert other.read_bytes() != path.read_bytes()
    assert read_header(other).entries[0].name != read_header(path).entries[0].name
    assert load_portable_model(other).identity == identity == load_portable_model(path).identity
    # One changed weight value is a different model.
    changed = make_trainer("tiny", updates=2)
    with torch.no_grad():
        changed.model.final_norm.weight[0] += 1e-12
    assert save_portable_model(changed.model, changed.tokenizer, tmp_path / "changed.safetensors") != identity


def test_a_flipped_data_bit_is_a_model_identity_mismatch(tiny, tmp_path):
    path = tmp_path / "model.safetensors"
    save_portable_model(tiny.model, tiny.tokenizer, path)
    flip_bit(path, data_offset(path) + 100, bit=3)
    read_header(path)  # the header is still valid: only the data changed
    with pytest.raises(CheckpointError, match="model identity mismatch"):
        load_portable_model(path)


def test_a_changed_constant_is_refused(tiny, tmp_path):
    path = tmp_path / "model.safetensors"
    save_portable_model(tiny.model, tiny.tokenizer, path)
    loaded = load_file(path)
    tensors = [(e.name, loaded.tensor(e.name).clone()) for e in loaded.header.entries]
    tensors = [(n, torch.tensor([10000.0, 1e-6], dtype=torch.float64) if n == CONSTANTS else t) for n, t in tensors]
    write_safetensors(path, tensors, dict(loaded.metadata))
    with pytest.raises(CheckpointError, match="constant norm_eps"):
        load_portable_model(path)


def test_a_backbone_export_restores_alone_and_returns_hidden_features(tiny, tmp_path):
    path = tmp_path / "backbone.safetensors"
    identity = save_backbone(tiny.model, path)
    header = read_header(path)
    assert len(header.entries) == 29  # 28 learned backbone tensors and the constants
    assert not header.has("token_embedding.weight") and not header.has(MERGES)
    records = {k: json.loads(v) for k, v in header.metadata.items()}
    assert records["composition"]["kind"] == "backbone" and records["tokenizer"] is None
    restored = load_backbone(path)
    assert restored.identity == identity
    assert sum(1 for _ in restored.backbone.parameters()) == 28
    vectors = tiny.model.token_embedding.weight.detach()[torch.tensor([[0, 99, 100]])]
    tiny.model.eval()
    with torch.no_grad():
        expected = tiny.model(None, inputs_embeds=vectors, skip_head=True).hidden
        hidden = restored.backbone(vectors)
    tiny.model.train()
    assert hidden.shape == (1, 3, 4)
    assert torch.equal(hidden, expected)
    with pytest.raises(CheckpointError, match="no vocabulary or tokenizer"):
        load_portable_model(path)


def test_saving_with_a_tokenizer_of_another_vocabulary_is_refused(tiny, tmp_path):
    with pytest.raises(CheckpointError, match="vocabulary"):
        save_portable_model(tiny.model, ByteBPETokenizer(()), tmp_path / "model.safetensors")


def test_a_foreign_safetensors_file_is_not_taken_for_a_model(tmp_path):
    path = tmp_path / "foreign.safetensors"
    write_safetensors(path, [("w", torch.zeros(2))], {"format": "pt"})
    with pytest.raises(CheckpointError, match="not a minigpt-tui model file"):
        load_portable_model(path)
    write_safetensors(path, [("w", torch.zeros(2))])
    with pytest.raises(CheckpointError, match="no format record"):
        load_portable_model(path)
