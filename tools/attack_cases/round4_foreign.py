"""Round four, files from elsewhere: transformers config.json values of the wrong type or
size, weights for more layers than the config declares, pickled tensors that are sparse,
meta, complex or stride-0 views, and model files that link to a system file."""

from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

from attack_cases import Case, link

VOCAB = "abcdefghijklmnop"
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
SYSTEM_FILE = "/etc/shadow" if os.path.exists("/etc/shadow") else "/etc/passwd"


def _llama(**changes: Any) -> dict[str, Any]:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 16, "hidden_size": 8,
            "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
            "max_position_embeddings": 16, "tie_word_embeddings": True, "bos_token_id": 0, "eos_token_id": 1,
            **changes}


def _gpt2(**changes: Any) -> dict[str, Any]:
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 16, "n_embd": 8,
            "n_layer": 1, "n_head": 2, "n_positions": 16, "bos_token_id": 0, "eos_token_id": 1, **changes}


def _llama_tensors(layers: int) -> dict[str, Any]:
    import torch

    out = {"model.embed_tokens.weight": torch.randn(16, 8) * 0.1, "model.norm.weight": torch.ones(8)}
    for i in range(layers):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": torch.ones(8), p + "post_attention_layernorm.weight": torch.ones(8),
                    **{f"{p}self_attn.{x}_proj.weight": torch.randn(8, 8) * 0.1 for x in "qkvo"},
                    p + "mlp.gate_proj.weight": torch.randn(16, 8) * 0.1, p + "mlp.up_proj.weight": torch.randn(16, 8) * 0.1,
                    p + "mlp.down_proj.weight": torch.randn(8, 16) * 0.1})
    return out


def _folder(root: Path, config: dict[str, Any], tensors: dict[str, Any] | None = None, *,
            pickled: bool = False) -> Path:
    """A transformers folder with a tokenizer, so that a refusal of the weights is the one
    reached (not a missing tokenizer)."""
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models

    folder = root / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    tensors = _llama_tensors(1) if tensors is None else tensors
    if pickled:
        torch.save(tensors, folder / "pytorch_model.bin")
    else:
        save_file(tensors, str(folder / "model.safetensors"))
    Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(VOCAB)}, merges=[])).save(str(folder / "tokenizer.json"))
    return folder


def _weights_with(make: Any) -> dict[str, Any]:
    import torch

    tensors = _llama_tensors(1)
    tensors["model.embed_tokens.weight"] = make(torch, (16, 8))
    return tensors


def _pickle(root: Path, make: Any) -> Path:
    import torch

    path = root / "odd.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's notes on sparse tensors, not the case's output
        torch.save({"w": make(torch), "fine": torch.ones(3)}, path)
    return path


def _nanogpt(root: Path, change: Any) -> Path:
    """A nanoGPT ckpt.pt of one layer with meta.pkl, one weight replaced by ``change``."""
    import torch

    state = {"transformer.wte.weight": torch.randn(16, 8), "transformer.wpe.weight": torch.randn(16, 8),
             "transformer.ln_f.weight": torch.ones(8), "transformer.ln_f.bias": torch.zeros(8)}
    for name, shape in (("ln_1", (8,)), ("ln_2", (8,)), ("attn.c_attn", (24, 8)), ("attn.c_proj", (8, 8)),
                        ("mlp.c_fc", (32, 8)), ("mlp.c_proj", (8, 32))):
        state[f"transformer.h.0.{name}.weight"] = torch.randn(*shape) * 0.1
        state[f"transformer.h.0.{name}.bias"] = torch.zeros(shape[0])
    change(torch, state)
    folder = root / "nano"
    folder.mkdir()
    args = {"n_layer": 1, "n_head": 2, "n_embd": 8, "block_size": 16, "bias": True, "vocab_size": 16}
    torch.save({"model": state, "model_args": args, "iter_num": 1}, folder / "ckpt.pt")
    itos = dict(enumerate(VOCAB))
    (folder / "meta.pkl").write_bytes(pickle.dumps({"itos": itos, "stoi": {c: i for i, c in itos.items()}}))
    return folder / "ckpt.pt"


def _extra_layer(torch: Any, state: dict[str, Any]) -> None:
    for name in [n for n in state if n.startswith("transformer.h.0.")]:
        state[name.replace(".h.0.", ".h.1.")] = state[name].clone()


def _generate(model: Path) -> list[str]:
    return ["generate", "--model", str(model), "--prompt", "abc", "--max-new-tokens", "2"]


def _config_cases() -> list[Case]:
    configs = {
        "llama3 original_max_position_embeddings Infinity":
            _llama(rope_scaling={**LLAMA3, "original_max_position_embeddings": float("inf")}),
        "llama3 original_max_position_embeddings 1e30":
            _llama(rope_scaling={**LLAMA3, "original_max_position_embeddings": 1e30}),
        "model_type a list": _gpt2(model_type=["gpt2"]),
        "gpt2 activation_function a list": _gpt2(activation_function=["gelu"]),
        "llama head_dim a list": _llama(head_dim=[4]),
        "architectures an object": _llama(architectures={"a": 1}),
        "gpt_neo attention_types [[global], 10**12]": {
            "architectures": ["GPTNeoForCausalLM"], "model_type": "gpt_neo", "hidden_size": 8, "num_heads": 2,
            "num_layers": 2, "attention_types": [[["global"], 10**12]]},
    }
    found = []
    for label, config in configs.items():
        found.append(Case(f"r4 foreign: generate, {label}", lambda r, c=config: _generate(_folder(r, c))))
        found.append(Case(f"r4 foreign: inspect, {label}", lambda r, c=config: ["inspect", str(_folder(r, c))]))
        found.append(Case(f"r4 foreign: convert, {label}",
                          lambda r, c=config: ["convert", "--hf", str(_folder(r, c)), "--out", str(r / "o.safetensors")]))
    return found


def _pickle_cases() -> list[Case]:
    makers = {
        "sparse COO": lambda t: t.sparse_coo_tensor(t.tensor([[0, 1], [1, 0]]), t.tensor([1.0, 2.0]), (2, 2)),
        "sparse CSR": lambda t: t.eye(3).to_sparse_csr(),
        "meta": lambda t: t.empty(4, 4, device="meta"),
        "stride-0 10**10": lambda t: t.zeros(1).expand(10**10),
        "stride-0 2-D 8e9": lambda t: t.zeros(1, 1).expand(100_000, 80_000),
    }
    found = []
    for label, make in makers.items():
        for form in ([], ["--json"], ["--tensor", "w"], ["--tensor", "w", "--json"]):
            found.append(Case(f"r4 foreign: inspect {' '.join(form)} a {label} pickled tensor".replace("  ", " "),
                              lambda r, m=make, f=form: ["inspect", str(_pickle(r, m)), *f]))
    weights = {  # (torch, shape) -> a weight of that shape in the hostile kind
        "complex64": lambda t, shape: t.zeros(*shape, dtype=t.complex64),
        "meta": lambda t, shape: t.empty(*shape, device="meta"),
        "stride-0": lambda t, shape: t.zeros(1, 1).expand(*shape),
    }
    for label, make in weights.items():
        found.append(Case(f"r4 foreign: generate, a pytorch_model.bin with a {label} weight",
                          lambda r, m=make: _generate(_folder(r, _llama(), _weights_with(m), pickled=True))))
        found.append(Case(f"r4 foreign: generate, a nanoGPT ckpt.pt with a {label} weight",
                          lambda r, m=make: _generate(_nanogpt(r, lambda t, s, m=m: s.update(
                              {"transformer.h.0.attn.c_proj.weight": m(t, (8, 8))})))))
    found.append(Case("r4 foreign: generate, a nanoGPT ckpt.pt with a layer past n_layer",
                      lambda r: _generate(_nanogpt(r, _extra_layer))))
    return found


def _layer_cases() -> list[Case]:
    return [Case("r4 foreign: generate, a llama folder with a layer past num_hidden_layers",
                 lambda r: _generate(_folder(r, _llama(num_hidden_layers=1), _llama_tensors(2))))]


def _linked(root: Path, name: str, config: dict[str, Any]) -> Path:
    folder = root / "linked"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    link(folder / name, SYSTEM_FILE)
    return folder


def _link_cases() -> list[Case]:
    found = []
    for name in ("model.safetensors", "pytorch_model.bin"):
        found.append(Case(f"r4 foreign: inspect, {name} links to {SYSTEM_FILE}",
                          lambda r, n=name: ["inspect", str(_linked(r, n, _llama()))]))
        found.append(Case(f"r4 foreign: generate, {name} links to {SYSTEM_FILE}",
                          lambda r, n=name: _generate(_linked(r, n, _llama()))))
    found.append(Case(f"r4 foreign: inspect, a .pt linking to {SYSTEM_FILE}",
                      lambda r: ["inspect", str(link(r / "x.pt", SYSTEM_FILE))]))
    return found


def cases() -> list[Case]:
    return [*_config_cases(), *_layer_cases(), *_pickle_cases(), *_link_cases()]
