"""GPT-NeoX (``GPTNeoXForCausalLM``; no GGUF architecture here): LayerNorm, partial rotary
(``partial_rotary_factor``), a parallel residual, q, k and v interleaved per head in one
``query_key_value``, and an untied head (``embed_out``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import FAMILY_PARTS
from minigpt_tui.engine.families.declaration import Family, TokenizerDefaults
from minigpt_tui.engine.families.transformers_config import rope_parameters

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.core.config import ModelConfig
    from minigpt_tui.engine.families.declaration import Getter, Tensors
    from minigpt_tui.engine.families.transformers_config import ConfigReader


def settings_from(c: "ConfigReader") -> dict[str, Any]:
    width, heads = c.int("hidden_size"), c.int("num_attention_heads")
    theta, fraction = c.rope("rotary_emb_base", "rotary_pct")
    if "rotary_pct" not in c.data and not isinstance(c.data.get("rope_parameters"), dict):
        fraction = 0.25  # transformers' default for this family
    return {"width": width, "heads": heads, "kv_heads": heads, "ffn": c.int("intermediate_size", 4 * width),
            "layers": c.int("num_hidden_layers"), "context": c.int("max_position_embeddings", 2048),
            "norm_eps": c.float("layer_norm_eps", 1e-5), "gelu_approximation": c.gelu("hidden_act"),
            "rope_base": theta, "rotary_fraction": fraction, **c.rope_scaling(),
            "residual": "parallel" if c.flag("use_parallel_residual", True) else "sequential",
            "attention_bias": "all" if c.flag("attention_bias", True) else "none"}


def config_to(config: "ModelConfig", activation: str) -> dict[str, Any]:
    return {
        "hidden_size": config.width, "num_attention_heads": config.heads, "num_hidden_layers": config.layers,
        "intermediate_size": config.ffn, "max_position_embeddings": config.context,
        "layer_norm_eps": config.norm_eps, "hidden_act": activation,
        "use_parallel_residual": config.residual == "parallel", "attention_bias": config.attention_bias == "all",
        "rope_parameters": {**rope_parameters(config), "partial_rotary_factor": config.rotary_fraction},
        "rotary_pct": config.rotary_fraction, "rotary_emb_base": config.rope_base,
        "hidden_dropout": 0.0, "attention_dropout": 0.0}


def _split_qkv(tensor: "torch.Tensor", config: "ModelConfig") -> list["torch.Tensor"]:
    """query_key_value's rows are per head [q, k, v] (each head_dim): split into q, k, v."""
    per_head = tensor.reshape(config.heads, 3, config.head_dim, *tensor.shape[1:])
    return [per_head[:, j].reshape(config.heads * config.head_dim, *tensor.shape[1:]) for j in range(3)]


def _join_qkv(parts: list["torch.Tensor"], config: "ModelConfig") -> "torch.Tensor":
    """q, k and v interleaved per head ([q, k, v] of each head in turn), as query_key_value."""
    import torch  # deferred: imports torch

    rest = parts[0].shape[1:]
    per_head = torch.stack([p.reshape(config.heads, config.head_dim, *rest) for p in parts], dim=1)
    return per_head.reshape(3 * config.heads * config.head_dim, *rest)


# (ours, theirs) under a block's prefixes, moved unchanged.
_BLOCK = (("attn_norm.weight", "input_layernorm.weight"), ("attn_norm.bias", "input_layernorm.bias"),
          ("ffn_norm.weight", "post_attention_layernorm.weight"), ("ffn_norm.bias", "post_attention_layernorm.bias"),
          ("attn.o_proj.weight", "attention.dense.weight"), ("ffn.up_proj.weight", "mlp.dense_h_to_4h.weight"),
          ("ffn.up_proj.bias", "mlp.dense_h_to_4h.bias"), ("ffn.down_proj.weight", "mlp.dense_4h_to_h.weight"),
          ("ffn.down_proj.bias", "mlp.dense_4h_to_h.bias"))
_FINAL_NORM = (("final_norm.weight", "final_layer_norm.weight"), ("final_norm.bias", "final_layer_norm.bias"))


def tensors_from(get: "Getter", config: "ModelConfig") -> "Tensors":
    out = {"token_embedding.weight": get("embed_in.weight")}
    kinds = ("weight", "bias") if config.attention_bias == "all" else ("weight",)
    for i in range(config.layers):
        ours, theirs = f"blocks.{i}.", f"layers.{i}."
        out.update({ours + mine: get(theirs + name) for mine, name in _BLOCK})
        for kind in kinds:
            for proj, tensor in zip("qkv", _split_qkv(get(f"{theirs}attention.query_key_value.{kind}"), config)):
                out[f"{ours}attn.{proj}_proj.{kind}"] = tensor
        if config.attention_bias == "all":
            out[ours + "attn.o_proj.bias"] = get(theirs + "attention.dense.bias")
    out.update({ours: get(theirs) for ours, theirs in _FINAL_NORM})
    return out


def tensors_to(ours: Mapping[str, "torch.Tensor"], config: "ModelConfig") -> "Tensors":
    out = {"embed_in.weight": ours["token_embedding.weight"]}
    kinds = ("weight", "bias") if config.attention_bias == "all" else ("weight",)
    for i in range(config.layers):
        mine, theirs = f"blocks.{i}.", f"layers.{i}."
        out.update({theirs + name: ours[mine + ours_name] for ours_name, name in _BLOCK})
        for kind in kinds:
            out[f"{theirs}attention.query_key_value.{kind}"] = _join_qkv(
                [ours[f"{mine}attn.{p}_proj.{kind}"] for p in "qkv"], config)
        if config.attention_bias == "all":
            out[theirs + "attention.dense.bias"] = ours[mine + "attn.o_proj.bias"]
    out.update({theirs: ours[mine] for mine, theirs in _FINAL_NORM})
    return out


FAMILY = Family(
    name="gpt_neox", parts=FAMILY_PARTS["gpt_neox"], architecture="GPTNeoXForCausalLM", tied_by_default=False,
    settings_from=settings_from, config_to=config_to, base_prefix="gpt_neox.", table="embed_in.weight",
    head="embed_out.weight", tensors_from=tensors_from, tensors_to=tensors_to, constants=("norm_eps",), gguf=None,
    tokenizer=TokenizerDefaults(kind="byte_level", bos="<|endoftext|>", eos="<|endoftext|>"),
    example={"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 64,
             "max_position_embeddings": 64, "rotary_pct": 0.5},
)
