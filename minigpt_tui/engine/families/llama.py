"""Llama (``LlamaForCausalLM``, GGUF ``llama``): RMSNorm, rotary positions, SwiGLU, grouped
kv heads, a head tied or not; llama.cpp stores q and k rows interleaved for its rotary.
Qwen2 (:mod:`qwen2`) is shaped like it, and reads and writes through these functions."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import FAMILY_PARTS
from minigpt_tui.engine.families.declaration import Family, GGUFLayout, TokenizerDefaults
from minigpt_tui.engine.families.gguf_names import BLOCK_NAMES, interleaved, rotate_half, shared_from, shared_to
from minigpt_tui.engine.families.transformers_config import rope_parameters, shown

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.core.config import ModelConfig
    from minigpt_tui.engine.families.declaration import Getter, Tensors
    from minigpt_tui.engine.families.transformers_config import ConfigReader


def shaped_like_llama(c: "ConfigReader", attention_bias: str, *, free_head_dim: bool = False) -> dict[str, Any]:
    """The settings of llama and the families shaped like it (SiLU, RMS norm, RoPE); with
    ``free_head_dim`` a head_dim other than hidden_size / heads is the model's own."""
    width, heads = c.int("hidden_size"), c.int("num_attention_heads")
    head_dim = c.int("head_dim") if c.data.get("head_dim") else width // heads
    free = {"head_dim_override": head_dim} if free_head_dim and head_dim * heads != width else {}
    if head_dim * heads != width and not free:
        raise c.refuse(f"head_dim {head_dim} × {heads} heads is not hidden_size {width}")
    if c.text("hidden_act", "silu") != "silu":
        raise c.refuse(f"hidden_act {shown(c.data.get('hidden_act'))} (supported: silu)")
    theta, _ = c.rope()
    return {**free, "width": width, "heads": heads, "kv_heads": c.int("num_key_value_heads", heads),
            "ffn": c.int("intermediate_size"), "layers": c.int("num_hidden_layers"),
            "context": c.int("max_position_embeddings", 2048), "norm_eps": c.float("rms_norm_eps", 1e-6),
            "rope_base": theta, "attention_bias": attention_bias, "ffn_bias": c.flag("mlp_bias", False),
            **c.rope_scaling()}


def settings_from(c: "ConfigReader") -> dict[str, Any]:
    biased = c.flag("attention_bias", False)
    return shaped_like_llama(c, "all" if biased else "none")


def config_like_llama(config: "ModelConfig") -> dict[str, Any]:
    return {
        "hidden_size": config.width, "num_attention_heads": config.heads, "num_key_value_heads": config.kv_heads,
        "head_dim": config.head_dim, "intermediate_size": config.ffn, "num_hidden_layers": config.layers,
        "max_position_embeddings": config.context, "rms_norm_eps": config.norm_eps, "hidden_act": "silu",
        "rope_parameters": rope_parameters(config), "rope_theta": config.rope_base, "attention_dropout": 0.0}


def config_to(config: "ModelConfig", activation: str) -> dict[str, Any]:
    """``activation`` unused: SwiGLU's is SiLU."""
    return {**config_like_llama(config), "attention_bias": config.attention_bias == "all",
            "mlp_bias": bool(config.ffn_bias)}


def tensors_from(get: "Getter", config: "ModelConfig") -> "Tensors":
    out = {"token_embedding.weight": get("embed_tokens.weight")}
    for i in range(config.layers):
        ours, theirs = f"blocks.{i}.", f"layers.{i}."
        out[ours + "attn_norm.weight"] = get(theirs + "input_layernorm.weight")
        out[ours + "ffn_norm.weight"] = get(theirs + "post_attention_layernorm.weight")
        for proj in "qkvo":
            out[f"{ours}attn.{proj}_proj.weight"] = get(f"{theirs}self_attn.{proj}_proj.weight")
            if config.biased(proj):
                out[f"{ours}attn.{proj}_proj.bias"] = get(f"{theirs}self_attn.{proj}_proj.bias")
        for proj in ("gate", "up", "down"):
            out[f"{ours}ffn.{proj}_proj.weight"] = get(f"{theirs}mlp.{proj}_proj.weight")
            if config.ffn_bias:
                out[f"{ours}ffn.{proj}_proj.bias"] = get(f"{theirs}mlp.{proj}_proj.bias")
    out["final_norm.weight"] = get("norm.weight")
    if config.qk_norm:  # qwen3's per-head query and key norms
        for i in range(config.layers):
            for part in ("q_norm", "k_norm"):
                out[f"blocks.{i}.attn.{part}.weight"] = get(f"layers.{i}.self_attn.{part}.weight")
    return out


def tensors_to(ours: Mapping[str, "torch.Tensor"], config: "ModelConfig") -> "Tensors":
    out = {"embed_tokens.weight": ours["token_embedding.weight"]}
    for i in range(config.layers):
        mine, theirs = f"blocks.{i}.", f"layers.{i}."
        out[theirs + "input_layernorm.weight"] = ours[mine + "attn_norm.weight"]
        out[theirs + "post_attention_layernorm.weight"] = ours[mine + "ffn_norm.weight"]
        for proj in "qkvo":
            out[f"{theirs}self_attn.{proj}_proj.weight"] = ours[f"{mine}attn.{proj}_proj.weight"]
            if config.biased(proj):
                out[f"{theirs}self_attn.{proj}_proj.bias"] = ours[f"{mine}attn.{proj}_proj.bias"]
        for proj in ("gate", "up", "down"):
            out[f"{theirs}mlp.{proj}_proj.weight"] = ours[f"{mine}ffn.{proj}_proj.weight"]
            if config.ffn_bias:
                out[f"{theirs}mlp.{proj}_proj.bias"] = ours[f"{mine}ffn.{proj}_proj.bias"]
    out["norm.weight"] = ours["final_norm.weight"]
    if config.qk_norm:
        for i in range(config.layers):
            for part in ("q_norm", "k_norm"):
                out[f"layers.{i}.self_attn.{part}.weight"] = ours[f"blocks.{i}.attn.{part}.weight"]
    return out


def gguf_from(get: "Getter", config: "ModelConfig", *, permuted: bool, qkv_bias: bool) -> "Tensors":
    """llama.cpp's tensors of a llama-shaped file: q and k rows interleaved where
    ``permuted``, q, k and v biases where ``qkv_bias``."""
    out = shared_from(get, config)
    for i in range(config.layers):
        ours, theirs = f"blocks.{i}.", f"blk.{i}."
        out.update({f"{ours}{mine}.weight": get(f"{theirs}{file}.weight") for mine, file in BLOCK_NAMES})
        out[ours + "ffn.gate_proj.weight"] = get(theirs + "ffn_gate.weight")
        q, k = get(theirs + "attn_q.weight"), get(theirs + "attn_k.weight")
        if permuted:
            q, k = rotate_half(q, config.heads), rotate_half(k, config.kv_heads)
        out.update({ours + "attn.q_proj.weight": q, ours + "attn.k_proj.weight": k,
                    ours + "attn.v_proj.weight": get(theirs + "attn_v.weight")})
        if qkv_bias:
            out.update({f"{ours}attn.{p}_proj.bias": get(f"{theirs}attn_{p}.bias") for p in "qkv"})
    if config.qk_norm:  # qwen3's per-head norms, as attn_q_norm and attn_k_norm
        for i in range(config.layers):
            out[f"blocks.{i}.attn.q_norm.weight"] = get(f"blk.{i}.attn_q_norm.weight")
            out[f"blocks.{i}.attn.k_norm.weight"] = get(f"blk.{i}.attn_k_norm.weight")
    return out


def gguf_to(ours: Mapping[str, "torch.Tensor"], config: "ModelConfig", *, permuted: bool,
            qkv_bias: bool) -> "Tensors":
    """The inverse of :func:`gguf_from`."""
    out = shared_to(ours, config)
    for i in range(config.layers):
        mine, theirs = f"blocks.{i}.", f"blk.{i}."
        out.update({f"{theirs}{file}.weight": ours[f"{mine}{name}.weight"] for name, file in BLOCK_NAMES})
        out[theirs + "ffn_gate.weight"] = ours[mine + "ffn.gate_proj.weight"]
        q, k = ours[mine + "attn.q_proj.weight"], ours[mine + "attn.k_proj.weight"]
        if permuted:
            q, k = interleaved(q, config.heads), interleaved(k, config.kv_heads)
        out.update({theirs + "attn_q.weight": q, theirs + "attn_k.weight": k,
                    theirs + "attn_v.weight": ours[mine + "attn.v_proj.weight"]})
        if qkv_bias:
            out.update({f"{theirs}attn_{p}.bias": ours[f"{mine}attn.{p}_proj.bias"] for p in "qkv"})
    if config.qk_norm:
        for i in range(config.layers):
            out[f"blk.{i}.attn_q_norm.weight"] = ours[f"blocks.{i}.attn.q_norm.weight"]
            out[f"blk.{i}.attn_k_norm.weight"] = ours[f"blocks.{i}.attn.k_norm.weight"]
    return out


def gguf_layout(architecture: str, *, permuted: bool, qkv_bias: bool, metadata: tuple[str, ...] = ()) -> GGUFLayout:
    """A llama-shaped GGUF architecture (llama.cpp's ``llama``, ``qwen2`` and ``qwen3``)."""
    return GGUFLayout(architecture=architecture, norm_eps_key="attention.layer_norm_rms_epsilon",
                      norm_eps_default=1e-6, grouped_kv=True, implied={},
                      tensors_from=partial(gguf_from, permuted=permuted, qkv_bias=qkv_bias),
                      tensors_to=partial(gguf_to, permuted=permuted, qkv_bias=qkv_bias), metadata=metadata)


FAMILY = Family(
    name="llama", parts=FAMILY_PARTS["llama"], architecture="LlamaForCausalLM", tied_by_default=False,
    settings_from=settings_from, config_to=config_to, base_prefix="model.", table="embed_tokens.weight",
    head="lm_head.weight", tensors_from=tensors_from, tensors_to=tensors_to, constants=("rope_base", "norm_eps"),
    gguf=gguf_layout("llama", permuted=True, qkv_bias=False),
    tokenizer=TokenizerDefaults(kind="metaspace", bos="<s>", eos="</s>"),
    example={"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
             "num_hidden_layers": 2, "max_position_embeddings": 64, "rope_theta": 500.0},
)
