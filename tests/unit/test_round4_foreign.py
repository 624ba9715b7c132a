"""Hostile and unlucky files from elsewhere, round four: transformers configs of the wrong
type or size, extra layers, pickled tensors that are sparse, meta, complex or stride-0
views, and a model file that links to a file of another kind. Each is refused with one line
of our error family, before anything large is allocated."""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.formats.foreign import inspect_foreign, read_foreign_tensor
from minigpt_tui.engine.formats.hf_families import model_config
from minigpt_tui.engine.formats.hf_import import conversion_refusal
from minigpt_tui.engine.formats.safetensors_read import read_header
from minigpt_tui.engine.models.hf_models import open_hf_model
from minigpt_tui.engine.models.nanogpt import open_nanogpt

VOCAB = "abcdefghijklmnop"


def llama_config(**changes) -> dict:
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 16, "hidden_size": 8,
              "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
              "num_key_value_heads": 2, "max_position_embeddings": 16, "rms_norm_eps": 1e-6,
              "tie_word_embeddings": True, "bos_token_id": 0, "eos_token_id": 1}
    config.update(changes)
    return config


def gpt2_config(**changes) -> dict:
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 16, "n_embd": 8,
              "n_layer": 1, "n_head": 2, "n_positions": 16, "bos_token_id": 0, "eos_token_id": 1}
    config.update(changes)
    return config


def llama_tensors(layers: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator) * 0.1

    out = {"model.embed_tokens.weight": rand(16, 8), "model.norm.weight": torch.ones(8)}
    for i in range(layers):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": torch.ones(8), p + "post_attention_layernorm.weight": torch.ones(8),
                    **{f"{p}self_attn.{x}_proj.weight": rand(8, 8) for x in "qkvo"},
                    p + "mlp.gate_proj.weight": rand(16, 8), p + "mlp.up_proj.weight": rand(16, 8),
                    p + "mlp.down_proj.weight": rand(8, 16)})
    return out


def write_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, models

    Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(VOCAB)}, merges=[])).save(str(folder / "tokenizer.json"))


def llama_folder(folder: Path, config: dict, tensors: dict[str, torch.Tensor]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(folder / "model.safetensors"))
    write_tokenizer(folder)
    return folder


# -- config.json --------------------------------------------------------------------------
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}


@pytest.mark.parametrize("original", [float("inf"), 1e30, 8192.5, "8192", [8192]])
def test_llama3_original_context_out_of_range_is_one_line_naming_the_key(original):
    config = llama_config(rope_scaling={**LLAMA3, "original_max_position_embeddings": original})
    with pytest.raises(CheckpointError, match="original_max_position_embeddings") as caught:
        model_config(config, "config.json")
    assert "\n" not in str(caught.value)


def test_llama3_original_context_as_a_whole_float_is_read():
    config = llama_config(rope_scaling={**LLAMA3, "original_max_position_embeddings": 8192.0})
    assert model_config(config, "config.json").rope_original_context == 8192


@pytest.mark.parametrize("make", [
    lambda: llama_config(model_type=["llama"]),
    lambda: gpt2_config(model_type=["gpt2"]),
    lambda: gpt2_config(activation_function=["gelu"]),
    lambda: gpt2_config(activation_function={"gelu": 1}),
    lambda: llama_config(hidden_act=["silu"]),
    lambda: llama_config(head_dim=[4]),
    lambda: llama_config(rms_norm_eps="tiny"),
    lambda: llama_config(rope_theta=[10000]),
    lambda: llama_config(num_attention_heads=0),
    lambda: gpt2_config(layer_norm_epsilon=float("inf")),
])
def test_config_values_of_the_wrong_type_are_refused_by_the_reader_and_by_convert(make, tmp_path):
    config = make()
    with pytest.raises(CheckpointError) as caught:
        model_config(config, "config.json")
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    save_file({"model.embed_tokens.weight": torch.zeros(16, 8)}, str(folder / "model.safetensors"))
    refusal = conversion_refusal(folder)
    assert refusal is not None and "\n" not in refusal and len(refusal) < 300


def test_inspect_and_convert_of_a_list_activation_name_one_line(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(gpt2_config(activation_function=["gelu"])))
    save_file({"transformer.wte.weight": torch.zeros(16, 8)}, str(folder / "model.safetensors"))
    assert "activation_function" in conversion_refusal(folder)
    assert inspect_foreign(folder).state.get("model")["convertible"] is False


def test_architectures_of_the_wrong_type_do_not_break_inspect(tmp_path):
    folder = llama_folder(tmp_path / "hf", llama_config(architectures={"not": "a list"}), llama_tensors(1))
    assert inspect_foreign(folder).state.get("model")["architecture"] is None
    assert open_hf_model(folder).metadata["architecture"] is None


def test_gpt_neo_attention_types_are_counted_before_they_are_expanded():
    config = {"architectures": ["GPTNeoForCausalLM"], "model_type": "gpt_neo", "hidden_size": 8, "num_heads": 2,
              "num_layers": 2, "attention_types": [[["global"], 10**12]]}
    started = time.perf_counter()
    with pytest.raises(CheckpointError, match="attention_types names 1,000,000,000,000 layers, the config has 2"):
        model_config(config, "config.json")
    assert time.perf_counter() - started < 1.0
    for pairs in ([[["global"], -1], [["local"], 3]], [[["global"], True], [["local"], 1]], "global"):
        with pytest.raises(CheckpointError, match="attention_types"):
            model_config({**config, "attention_types": pairs}, "config.json")
    good = model_config({**config, "attention_types": [[["global", "local"], 1]]}, "config.json")
    assert good.local_layers == (1,)


# -- extra layers ---------------------------------------------------------------------------
def test_a_layer_past_num_hidden_layers_is_refused_not_dropped(tmp_path):
    folder = llama_folder(tmp_path / "hf", llama_config(num_hidden_layers=1), llama_tensors(2))
    with pytest.raises(CheckpointError, match=r"unexpected tensor 'model\.layers\.1\..*LlamaForCausalLM of 1 layer,"):
        open_hf_model(folder)
    exact = llama_folder(tmp_path / "exact", llama_config(num_hidden_layers=2), llama_tensors(2))
    assert open_hf_model(exact).config.layers == 2


def test_saved_buffers_and_a_tied_head_copy_are_not_extra(tmp_path):
    tensors = llama_tensors(1)
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(2)
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    folder = llama_folder(tmp_path / "hf", llama_config(), tensors)
    assert open_hf_model(folder).config.layers == 1


# -- pickles -----------------------------------------------------------------------------------
def sparse_coo() -> torch.Tensor:
    return torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0]), (2, 2))


@pytest.mark.filterwarnings("ignore:Sparse")
@pytest.mark.parametrize("make, label", [
    (sparse_coo, "sparse_coo"),
    (lambda: torch.eye(3).to_sparse_csr(), "sparse_csr"),
    (lambda: torch.empty(4, 4, device="meta"), "meta"),
])
def test_sparse_and_meta_tensors_are_listed_and_their_values_refused(tmp_path, make, label):
    path = tmp_path / "odd.pt"
    torch.save({"w": make(), "fine": torch.ones(3)}, path)
    inspection = inspect_foreign(path)
    assert {e.name: e.dtype for e in inspection.entries}["w"] == f"F32 ({label})"
    with pytest.raises(CheckpointError, match="tensor 'w' (is a sparse tensor|holds no data)"):
        read_foreign_tensor(path, "w")
    assert read_foreign_tensor(path, "fine").tensor.sum().item() == 3.0


def test_a_one_element_meta_tensor_is_no_record_value(tmp_path):
    path = tmp_path / "meta.pt"
    torch.save({"step": torch.empty((), device="meta")}, path)
    assert [e.name for e in inspect_foreign(path).entries] == ["step"]


def test_a_stride_zero_view_is_refused_before_it_is_materialized(tmp_path):
    path = tmp_path / "expanded.pt"
    torch.save({"w": torch.zeros(1).expand(10**10)}, path)
    assert path.stat().st_size < 20_000
    assert inspect_foreign(path).entries[0].elements == 10**10  # listing allocates nothing
    with pytest.raises(CheckpointError, match="10,000,000,000 elements over 1 stored"):
        read_foreign_tensor(path, "w")


def test_a_small_overlapping_view_within_its_storage_is_still_read(tmp_path):
    path = tmp_path / "view.pt"
    base = torch.arange(6.0)
    torch.save({"w": base[2:], "base": base}, path)
    assert read_foreign_tensor(path, "w").tensor.tolist() == [2.0, 3.0, 4.0, 5.0]


def hf_pickle_folder(folder: Path, table: torch.Tensor) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(llama_config()))
    tensors = llama_tensors(1)
    tensors["model.embed_tokens.weight"] = table
    torch.save(tensors, folder / "pytorch_model.bin")
    write_tokenizer(folder)
    return folder


@pytest.mark.parametrize("table, reason", [
    (torch.zeros(16, 8, dtype=torch.complex64), "is complex64; weights must be real numbers"),
    (torch.empty(16, 8, device="meta"), "holds no data"),
    (torch.zeros(1, 1).expand(16, 8), "repeats its stored values"),
])
def test_a_pytorch_model_bin_with_unusable_weights_is_refused(tmp_path, table, reason):
    folder = hf_pickle_folder(tmp_path / "hf", table)
    with _no_warnings():
        with pytest.raises(CheckpointError, match=f"tensor 'model.embed_tokens.weight' {reason}"):
            open_hf_model(folder)


class _no_warnings:
    """Fails the test when a warning (such as torch's complex-to-real cast) is raised inside."""

    def __enter__(self):
        import warnings

        self._catcher = warnings.catch_warnings(record=True)
        self._seen = self._catcher.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        self._catcher.__exit__(*exc)
        assert not [w for w in self._seen if "complex" in str(w.message).lower()]
        return False


def ckpt_from_state(folder: Path, state: dict[str, torch.Tensor], layers: int = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    args = {"n_layer": layers, "n_head": 2, "n_embd": 8, "block_size": 16, "bias": True, "vocab_size": 16,
            "dropout": 0.0}
    torch.save({"model": state, "model_args": args, "iter_num": 1}, folder / "ckpt.pt")
    itos = dict(enumerate(VOCAB))
    (folder / "meta.pkl").write_bytes(pickle.dumps({"itos": itos, "stoi": {c: i for i, c in itos.items()}}))
    return folder / "ckpt.pt"


def nanogpt_state(layers: int) -> dict[str, torch.Tensor]:
    state = {"transformer.wte.weight": torch.randn(16, 8), "transformer.wpe.weight": torch.randn(16, 8),
             "transformer.ln_f.weight": torch.ones(8), "transformer.ln_f.bias": torch.zeros(8)}
    for i in range(layers):
        p = f"transformer.h.{i}."
        for name, shape in (("ln_1", (8,)), ("ln_2", (8,)), ("attn.c_attn", (24, 8)), ("attn.c_proj", (8, 8)),
                            ("mlp.c_fc", (32, 8)), ("mlp.c_proj", (8, 32))):
            state[f"{p}{name}.weight"] = torch.randn(*shape) * 0.1
            state[f"{p}{name}.bias"] = torch.zeros(shape[0])
    state["lm_head.weight"] = state["transformer.wte.weight"]
    return state


def test_nanogpt_checkpoint_with_a_layer_past_n_layer_is_refused(tmp_path):
    assert open_nanogpt(ckpt_from_state(tmp_path / "good", nanogpt_state(1))).config.layers == 1
    with pytest.raises(CheckpointError, match=r"unexpected tensor 'transformer\.h\.1\..*not part of the 1-layer model"):
        open_nanogpt(ckpt_from_state(tmp_path / "extra", nanogpt_state(2)))


@pytest.mark.parametrize("tensor, reason", [
    (torch.zeros(1, 1).expand(8, 8), "repeats its stored values"),
    (torch.empty(8, 8, device="meta"), "holds no data"),
    (torch.zeros(8, 8, dtype=torch.complex64), "is complex64"),
])
def test_nanogpt_checkpoint_with_unusable_weights_is_refused(tmp_path, tensor, reason):
    state = nanogpt_state(1)
    state["transformer.h.0.attn.c_proj.weight"] = tensor
    with pytest.raises(CheckpointError, match=f"tensor 'transformer.h.0.attn.c_proj.weight' {reason}"):
        open_nanogpt(ckpt_from_state(tmp_path / "odd", state))


def test_a_text_file_named_as_a_pickle_is_one_line(tmp_path):
    path = tmp_path / "passwd.pt"
    path.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n")
    with pytest.raises(CheckpointError, match="not a PyTorch checkpoint"):
        inspect_foreign(path)


# -- links -------------------------------------------------------------------------------------
SECRET = b"s3cr3t:$6$saltsalt$hashhashhash:19000:0:99999:7:::\n"


def test_a_model_file_linking_to_a_text_file_never_echoes_its_bytes(tmp_path):
    secret = tmp_path / "elsewhere" / "shadow"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(llama_config()))
    (folder / "model.safetensors").symlink_to(secret)
    echoed = str(int.from_bytes(SECRET[:8], "little"))
    for attempt in (lambda: read_header(folder / "model.safetensors"), lambda: open_hf_model(folder),
                    lambda: inspect_foreign(folder)):
        with pytest.raises(CheckpointError, match="no header length") as caught:
            attempt()
        assert echoed not in str(caught.value)
        assert "s3cr3t" not in str(caught.value) and "$6$" not in str(caught.value)


def test_a_link_into_a_blob_store_of_the_right_kind_is_followed(tmp_path):
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    source = llama_folder(tmp_path / "made", llama_config(), llama_tensors(1))
    (source / "model.safetensors").rename(blobs / "3f2a9c")  # a cache's blob: no extension
    snapshot = tmp_path / "snapshots" / "main"
    snapshot.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json"):
        (snapshot / name).write_bytes((source / name).read_bytes())
    (snapshot / "model.safetensors").symlink_to(blobs / "3f2a9c")
    assert open_hf_model(snapshot).config.layers == 1


def test_a_tokenizer_json_of_the_wrong_shapes_is_summarised_not_a_traceback(tmp_path):
    folder = llama_folder(tmp_path / "hf", llama_config(), llama_tensors(1))
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": 5, "merges": 3},
                                                       "added_tokens": 7}))
    summary = inspect_foreign(folder).state.get("tokenizer")
    assert (summary["vocab"], summary["merges"], summary["added_tokens"]) == (0, 0, [])
