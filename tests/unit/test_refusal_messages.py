"""Each refusal of a malformed manifest, transformers folder or transformers config names
its first fault in one line, word for word: the checks run in a fixed order, so a file
with several faults is always refused for the same one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from minigpt_tui.engine.formats.checkpoint_folder import read_manifest
from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.formats.hf_import import read_hf_folder
from minigpt_tui.engine.formats.hf_families import model_config
from minigpt_tui.engine.models.hf_models import with_recorded_settings

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny-format1" / "step-000002"
SHA = "0" * 64


def _manifest() -> dict[str, Any]:
    return json.loads((FIXTURE / "manifest.json").read_text())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(format={"name": "other"}), "not a minigpt-tui checkpoint manifest"),
        (lambda m: m.update(format={"name": "minigpt-tui/checkpoint", "version": 2}),
         "checkpoint format version 2 is not supported"),
        (lambda m: m.update(files={}), "the manifest lists no files"),
        (lambda m: m["files"].update({"a/b": {"size": 1, "sha256": SHA}}), "the manifest record for 'a/b' is malformed"),
        (lambda m: m["files"].update({".x": {"size": 1, "sha256": SHA}}), "the manifest record for '.x' is malformed"),
        (lambda m: m["files"].update(x={"size": -1, "sha256": SHA}), "the manifest record for 'x' is malformed"),
        (lambda m: m["files"].update(x={"size": 1, "sha256": "ABC"}), "the manifest record for 'x' is malformed"),
        (lambda m: m.update(step=True), "the manifest has no valid step"),
        (lambda m: m.update(reason=3, saved_at="now"), "the manifest field 'reason' is malformed (int)"),
        (lambda m: m.update(saved_at=float("inf")), "the manifest field 'saved_at' is malformed (float)"),
        (lambda m: m.update(provenance={"run": [1]}), "the manifest field 'provenance' is malformed (dict)"),
    ],
)
def test_a_malformed_manifest_is_refused_for_its_first_fault(tmp_path, edit, message):
    folder = tmp_path / "step-000002"
    folder.mkdir()
    manifest = _manifest()
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError) as err:
        read_manifest(folder)
    assert str(err.value) == f"{folder / 'manifest.json'}: {message}"


def test_a_manifest_that_is_not_json_is_damaged_and_the_fixture_s_reads_whole(tmp_path):
    assert read_manifest(FIXTURE) == _manifest()
    folder = tmp_path / "step-000001"
    folder.mkdir()
    (folder / "manifest.json").write_bytes(b"\xff{")
    with pytest.raises(CheckpointError, match=r"manifest.json: the manifest is damaged \(not UTF-8 JSON\)$"):
        read_manifest(folder)


# -- transformers folders ------------------------------------------------------------------
def _hf_folder(path: Path, shards: dict[str, list[str]], index: Any = None) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    for shard, names in shards.items():
        save_file({name: torch.zeros(2) for name in names}, str(path / shard))
    if index is not None:
        (path / "model.safetensors.index.json").write_text(json.dumps(index))
    return path


def test_transformers_folders_are_refused_for_their_first_fault(tmp_path):
    cases = [
        (_hf_folder(tmp_path / "none", {}), "{p}: no model.safetensors and no model.safetensors.index.json"),
        (_hf_folder(tmp_path / "no-map", {}, {"weight_map": {}}), "{p}/model.safetensors.index.json: no weight_map"),
        (_hf_folder(tmp_path / "missing", {}, {"weight_map": {"w": "a.safetensors"}}),
         "{p}: the index lists a.safetensors, which is missing"),
        (_hf_folder(tmp_path / "twice", {"a.safetensors": ["w"], "b.safetensors": ["w"]},
                    {"weight_map": {"w": "a.safetensors", "x": "b.safetensors"}}),
         "{p}: tensor 'w' is in both a.safetensors and b.safetensors"),
        (_hf_folder(tmp_path / "unlisted", {"a.safetensors": ["w", "v"]}, {"weight_map": {"w": "a.safetensors"}}),
         "{p}/model.safetensors.index.json: a.safetensors holds 'v', which the index does not list"),
    ]
    pickled = _hf_folder(tmp_path / "pickled", {})
    (pickled / "pytorch_model.bin").write_bytes(b"")
    cases.append((pickled, "{p}: the weights are pickled (pytorch_model.bin); only safetensors folders are supported"))
    for folder, message in cases:
        with pytest.raises(CheckpointError) as err:
            read_hf_folder(folder)
        assert str(err.value) == message.format(p=folder)


def test_an_index_that_disagrees_is_read_with_its_problems_listed_when_not_strict(tmp_path):
    index = {"metadata": {"total_size": 3}, "weight_map": {"w": "b.safetensors", "ghost": "a.safetensors"}}
    folder = read_hf_folder(_hf_folder(tmp_path / "f", {"a.safetensors": ["w"], "b.safetensors": ["v"]}, index),
                            strict=False)
    assert folder.locations == {"w": "a.safetensors", "v": "b.safetensors"}
    assert [s.name for s in folder.shards] == ["a.safetensors", "b.safetensors"]
    assert folder.problems == (
        "the index puts 'w' in b.safetensors, which does not hold it",
        "the index puts 'ghost' in a.safetensors, which does not hold it",
        "b.safetensors holds 'v', which the index does not list",
        "the index declares total_size 3, the shards hold 16 bytes",
    )


# -- transformers configs ------------------------------------------------------------------
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_attention_heads": 2, "hidden_size": 8,
         "intermediate_size": 16, "num_hidden_layers": 1, "max_position_embeddings": 8}
GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 8, "n_head": 2, "n_layer": 1,
        "n_positions": 8}


@pytest.mark.parametrize(
    ("base", "change", "message"),
    [
        (LLAMA, {"head_dim": 3}, "unsupported LlamaForCausalLM setting: head_dim 3 × 2 heads is not hidden_size 8"),
        (LLAMA, {"hidden_act": "gelu", "mlp_bias": True}, "unsupported LlamaForCausalLM setting: hidden_act 'gelu' "
                                                          "(supported: silu)"),
        (LLAMA, {"rope_parameters": {"rope_type": "yarn"}},
         "unsupported LlamaForCausalLM setting: rope scaling 'yarn' (supported: none, linear, llama3)"),
        (LLAMA, {"intermediate_size": 1.5}, "intermediate_size must be a positive integer, got 1.5"),
        (GPT2, {"activation_function": "relu"}, "unsupported GPT2LMHeadModel setting: activation_function 'relu' "
                                                "(supported: gelu_new, gelu_pytorch_tanh, gelu)"),
        (GPT2, {"scale_attn_by_inverse_layer_idx": True},
         "unsupported GPT2LMHeadModel setting: attention scaling other than 1/sqrt(head width)"),
        (GPT2, {"add_cross_attention": True},
         "unsupported GPT2LMHeadModel setting: reorder_and_upcast_attn or cross-attention"),
        (GPT2, {"n_embd": 9}, "unsupported GPT2LMHeadModel setting: 2 heads over width 9 and 2 kv heads"),
    ],
)
def test_a_config_our_model_does_not_compute_is_refused_naming_the_setting(base, change, message):
    with pytest.raises(CheckpointError) as err:
        model_config({**base, **change}, "cfg")
    assert str(err.value) == f"cfg: {message}"


def test_configs_read_as_our_settings():
    llama = model_config({**LLAMA, "num_key_value_heads": 1, "rope_parameters": {"rope_theta": 500.0},
                          "rms_norm_eps": 1e-5}, "cfg")
    assert (llama.family, llama.width, llama.heads, llama.kv_heads, llama.ffn, llama.layers, llama.context,
            llama.rope_base, llama.norm_eps) == ("llama", 8, 2, 1, 16, 1, 8, 500.0, 1e-5)
    assert model_config({**LLAMA, "rope_theta": 20.0}, "cfg").rope_base == 20.0
    assert model_config({**LLAMA, "attention_bias": True}, "cfg").attention_bias == "all"  # biases are computed
    data = {**GPT2, "activation_function": "gelu", "minigpt_tui": {"model_config": {"dropout": 0.25, "rope_base": 7.0,
                                                                                     "norm_eps": 0.5}}}
    gpt2 = with_recorded_settings(model_config(data, "cfg"), data, "cfg")
    # Our export's record gives back what config.json has no field for (a gpt2's rope_base,
    # the dropout), never a setting the config itself says (norm_eps).
    assert (gpt2.family, gpt2.width, gpt2.kv_heads, gpt2.ffn, gpt2.norm_eps, gpt2.gelu_approximation, gpt2.dropout,
            gpt2.rope_base) == ("gpt2", 8, 2, 32, 1e-5, "none", 0.25, 7.0)
