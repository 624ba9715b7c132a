"""One tensor's statistics and checkpoint comparison on other tools' formats: a sharded
transformers folder (the shard found through the index, that tensor read alone), plain
state-dict ``.pt``/``.pth`` files and nanoGPT ``ckpt.pt`` (weights-only, memory-mapped),
with the same numbers a safetensors file of the same tensor gives."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: never reach the hub

import pytest
import safetensors.torch
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from minigpt_tui.cli import main
from minigpt_tui.engine.formats import safetensors_read
from minigpt_tui.engine.formats.inspect import inspect_path, tensor_statistics
from minigpt_tui.engine.formats.compare import compare_checkpoints
from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.formats import foreign_hf, foreign_pickle
from tests.foreign_support import RunsAShellCommand, nanogpt_checkpoint
from conftest import patch_everywhere

INDEX = "model.safetensors.index.json"


def tiny_llama(seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=40, hidden_size=8, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=16, tie_word_embeddings=True)).eval()


@pytest.fixture(scope="module")
def llamas(tmp_path_factory):
    """The same random llama sharded two ways and in one file, and a copy with one tensor changed."""
    root = tmp_path_factory.mktemp("llamas")
    model = tiny_llama(5)
    model.save_pretrained(root / "sharded", max_shard_size="2KB")
    model.save_pretrained(root / "resharded", max_shard_size="3KB")
    model.save_pretrained(root / "single")
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight[2, 3] += 0.25
    model.save_pretrained(root / "changed", max_shard_size="2KB")
    return root


def reference_statistics(tmp_path: Path, tensor: torch.Tensor, bins: int = 20) -> dict:
    """The statistics of the same tensor saved as a safetensors file."""
    path = tmp_path / "reference.safetensors"
    safetensors.torch.save_file({"t": tensor.contiguous()}, path)
    return tensor_statistics(path, "t", bins=bins)


def same_numbers(stats: dict, reference: dict) -> None:
    for key in ("elements", "nan", "inf", "min", "max", "mean", "std", "zero_fraction", "histogram", "shape"):
        assert stats[key] == reference[key], key


# -- sharded transformers folders -------------------------------------------------------------
def test_statistics_of_a_tensor_in_a_later_shard_read_alone(llamas, tmp_path, monkeypatch):
    folder = llamas / "sharded"
    weight_map = json.loads((folder / INDEX).read_text())["weight_map"]
    shards = sorted(set(weight_map.values()))
    assert len(shards) > 2
    name = next(n for n, shard in weight_map.items() if shard == shards[-1])
    expected = safetensors.torch.load_file(folder / shards[-1])[name]
    reference = reference_statistics(tmp_path, expected, bins=7)

    # The index says where; nothing scans the other shards or reads a whole file.
    def refuse(*args, **kwargs):
        raise AssertionError("read more than the index, one header and one tensor")

    monkeypatch.setattr(foreign_hf, "read_hf_folder", refuse)
    patch_everywhere(monkeypatch, safetensors_read, "load_file", refuse)
    opened: list[str] = []
    original = foreign_hf.read_header
    monkeypatch.setattr(foreign_hf, "read_header", lambda path: opened.append(Path(path).name) or original(path))
    for target, asked in ((folder, name), (folder / INDEX, name), (folder, f"{shards[-1]}:{name}")):
        opened.clear()
        stats = tensor_statistics(target, asked, bins=7)
        assert opened == [shards[-1]]
        assert stats["file"] == str(folder / shards[-1]) and stats["name"] == name
        assert stats["dtype"] == "F32" and stats["bytes_read"] == expected.numel() * 4
        same_numbers(stats, reference)


def test_statistics_when_the_index_puts_a_tensor_in_the_wrong_shard(llamas, tmp_path):
    folder = tmp_path / "misindexed"
    shutil.copytree(llamas / "sharded", folder)
    index = json.loads((folder / INDEX).read_text())
    shards = sorted(set(index["weight_map"].values()))
    name = next(n for n, shard in index["weight_map"].items() if shard == shards[0])
    index["weight_map"][name] = shards[1]
    (folder / INDEX).write_text(json.dumps(index))
    stats = tensor_statistics(folder, name)
    assert stats["file"] == str(folder / shards[0])
    assert stats["max"] == float(safetensors.torch.load_file(folder / shards[0])[name].max())
    with pytest.raises(CheckpointError, match="no tensor named 'model.ghost'") as caught:
        tensor_statistics(folder, "model.ghost")
    assert "\n" not in str(caught.value)


def test_comparison_of_transformers_folders_matches_tensors_across_shards(llamas):
    changed_name = "model.layers.1.mlp.up_proj.weight"
    result = compare_checkpoints(llamas / "sharded", llamas / "changed")
    assert result["kinds"] == ["hf-model", "hf-model"]
    changed = [t for t in result["tensors"] if t["status"] != "same"]
    assert [(t["name"], t["status"]) for t in changed] == [(changed_name, "changed")]
    assert changed[0]["max_abs_diff"] == pytest.approx(0.25, abs=1e-6)
    assert result["unchanged"] == len(inspect_path(llamas / "sharded").entries) - 1
    assert result["state_differences"] == []
    # Sharded differently or not at all: the same tensors, matched by name.
    for other in ("resharded", "single"):
        again = compare_checkpoints(llamas / "sharded" / INDEX, llamas / other)
        assert again["changed"] == [] and again["unchanged"] == result["unchanged"] + 1
        assert any(t.get("file_b") for t in again["tensors"])
        assert {d["record"] for d in again["state_differences"]} >= {"shards"}


def test_a_folder_with_pickled_weights(llamas, tmp_path):
    folder = tmp_path / "pickled"
    folder.mkdir()
    shutil.copy(llamas / "single" / "config.json", folder / "config.json")
    state = safetensors.torch.load_file(llamas / "single" / "model.safetensors")
    torch.save(state, folder / "pytorch_model.bin")
    name = "model.norm.weight"
    stats = tensor_statistics(folder, f"pytorch_model.bin:{name}")
    assert stats["name"] == name and stats["file"] == str(folder / "pytorch_model.bin")
    assert stats["min"] == float(state[name].min()) and stats["max"] == float(state[name].max())
    result = compare_checkpoints(folder, llamas / "single")
    assert result["changed"] == [] and result["unchanged"] == len(state)


# -- PyTorch pickles ------------------------------------------------------------------------
def state_dict(scale: float) -> dict:
    torch.manual_seed(3)
    base = torch.randn(4, 6, dtype=torch.float64)
    return {
        "encoder.weight": base * scale,
        "encoder.bias": torch.zeros(6),
        "layers.0.w": torch.randn(3, 3).to(torch.bfloat16),
        "ids": torch.tensor([0, 7, 7, 9], dtype=torch.int64),
        "epoch": int(scale),
    }


def test_statistics_of_state_dict_tensors_equal_those_of_safetensors(tmp_path):
    state = state_dict(1.0)
    path = tmp_path / "weights.pth"
    torch.save(state, path)
    legacy = tmp_path / "legacy.pt"
    torch.save(state, legacy, _use_new_zipfile_serialization=False)
    for name in ("encoder.weight", "encoder.bias", "layers.0.w", "ids"):
        reference = reference_statistics(tmp_path, state[name], bins=5)
        stats = tensor_statistics(path, name, bins=5)
        same_numbers(stats, reference)
        assert stats["dtype"] == reference["dtype"] and stats["bytes_read"] == reference["bytes_read"]
        assert stats["file"] == str(path) and stats["name"] == name
        # A legacy (non-zip) pickle cannot be mapped: read whole, and said so.
        old = tensor_statistics(legacy, name, bins=5)
        same_numbers(old, reference)
        assert old["bytes_read"] == legacy.stat().st_size
    assert tensor_statistics(path, "encoder.bias")["zero_fraction"] == 1.0
    with pytest.raises(CheckpointError, match="no tensor named 'epoch'"):
        tensor_statistics(path, "epoch")


def test_statistics_load_the_pickle_memory_mapped_and_weights_only(tmp_path, monkeypatch):
    path = tmp_path / "weights.pt"
    torch.save(state_dict(1.0), path)
    calls: list[dict] = []
    original = torch.load
    monkeypatch.setattr(torch, "load", lambda *args, **kwargs: calls.append(kwargs) or original(*args, **kwargs))
    tensor_statistics(path, "encoder.weight")
    assert calls == [{"weights_only": True, "map_location": "cpu", "mmap": True}]


def test_comparison_of_state_dicts(tmp_path):
    first, second = state_dict(1.0), state_dict(2.0)
    second["ids"] = torch.tensor([0, 7, 8, 9], dtype=torch.int64)
    second["extra"] = torch.ones(2)
    del second["encoder.bias"]
    second["layers.0.w"] = second["layers.0.w"].to(torch.float32)
    torch.save(first, tmp_path / "a.pt")
    torch.save(second, tmp_path / "b.pth")
    result = compare_checkpoints(tmp_path / "a.pt", tmp_path / "b.pth")
    status = {t["name"]: t["status"] for t in result["tensors"]}
    assert status == {"encoder.weight": "changed", "encoder.bias": "only_a", "extra": "only_b", "ids": "changed",
                      "layers.0.w": "reshaped"}
    diffs = {t["name"]: t["max_abs_diff"] for t in result["tensors"]}
    assert diffs["encoder.weight"] == float(first["encoder.weight"].abs().max())
    assert diffs["ids"] == 1.0
    assert {(d["group"], d["record"], d["a"], d["b"]) for d in result["state_differences"]} >= {
        ("records", "epoch", 1, 2)}
    assert result["unchanged"] == 0
    same = compare_checkpoints(tmp_path / "a.pt", tmp_path / "a.pt")
    assert same["changed"] == [] and same["state_differences"] == []


def test_nanogpt_statistics_and_comparison(tmp_path):
    model = nanogpt_checkpoint(tmp_path / "ckpt.pt")
    name = "model.transformer.wte.weight"
    stats = tensor_statistics(tmp_path / "ckpt.pt", name, bins=6)
    same_numbers(stats, reference_statistics(tmp_path, model.state_dict()["transformer.wte.weight"], bins=6))
    assert stats["bytes_read"] == 11 * 4 * 4
    step = tensor_statistics(tmp_path / "ckpt.pt", "best_val_loss")
    assert (step["min"], step["max"], step["elements"]) == (1.8125, 1.8125, 1)
    later = tmp_path / "later" / "ckpt.pt"
    later.parent.mkdir()
    checkpoint = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    checkpoint["iter_num"] = 500
    checkpoint["model"]["transformer.wpe.weight"] = checkpoint["model"]["transformer.wpe.weight"] + 0.5
    torch.save(checkpoint, later)
    result = compare_checkpoints(tmp_path / "ckpt.pt", later)
    assert result["kinds"] == ["nanogpt", "nanogpt"]
    assert result["changed"] == ["ckpt.pt:model.transformer.wpe.weight"]
    assert result["tensors"][[t["name"] for t in result["tensors"]].index("model.transformer.wpe.weight")][
        "max_abs_diff"] == pytest.approx(0.5)
    assert [(d["group"], d["record"], d["a"], d["b"]) for d in result["state_differences"]] == [
        ("training", "iter_num", 250, 500)]


def test_code_executing_pickles_stay_refused_for_statistics_and_comparison(tmp_path):
    target = tmp_path / "pwned"
    evil = tmp_path / "ckpt.pt"
    torch.save({"model": {"w": torch.zeros(2)}, "iter_num": 1, "payload": RunsAShellCommand(target)}, evil)
    torch.save({"model": {"w": torch.zeros(2)}, "iter_num": 1}, tmp_path / "fine.pt")
    for attempt in (lambda: tensor_statistics(evil, "model.w"), lambda: compare_checkpoints(tmp_path / "fine.pt", evil),
                    lambda: foreign_pickle.pickle_tensors(evil)):
        with pytest.raises(CheckpointError, match="refused") as caught:
            attempt()
        assert "code execution" in str(caught.value) and "\n" not in str(caught.value)
    assert not target.exists()


# -- the inspect command ------------------------------------------------------------------------
def test_cli_inspect_tensor_and_compare_on_foreign_formats(llamas, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich tables at a width that keeps titles on one line
    nanogpt_checkpoint(tmp_path / "ckpt.pt")
    assert main(["inspect", str(tmp_path / "ckpt.pt"), "--tensor", "model.transformer.ln_f.weight", "--bins", "3",
                 "--compare", str(tmp_path / "ckpt.pt"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["statistics"]["name"] == "model.transformer.ln_f.weight"
    assert sum(result["statistics"]["histogram"]["counts"]) == 4
    assert result["comparison"]["changed"] == [] and result["comparison"]["unchanged"] == len(result["entries"])
    assert main(["inspect", str(llamas / "sharded" / INDEX), "--tensor", "model.embed_tokens.weight",
                 "--compare", str(llamas / "changed"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["statistics"]["elements"] == 40 * 8
    assert result["comparison"]["changed"][0].endswith(":model.layers.1.mlp.up_proj.weight")
    # On a terminal: the statistics and the comparison tables.
    assert main(["inspect", str(tmp_path / "ckpt.pt"), "--tensor", "model.transformer.wte.weight",
                 "--compare", str(tmp_path / "ckpt.pt")]) == 0
    text = capsys.readouterr().out
    assert "statistics:" in text and "zero_fraction" in text and "0 tensors differ, 15 equal" in text
    assert main(["inspect", str(llamas / "sharded"), "--tensor", "model.norm.weight"]) == 0
    text = capsys.readouterr().out
    assert "statistics:" in text and "bytes_read" in text and "integrity" not in text  # the statistics alone


def test_cli_statistics_of_a_missing_tensor_is_one_line(tmp_path, capsys):
    torch.save(state_dict(1.0), tmp_path / "w.pt")
    assert main(["inspect", str(tmp_path / "w.pt"), "--tensor", "nope"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no tensor named 'nope'" in err
