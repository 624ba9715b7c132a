"""Gemma 2 (``Gemma2ForCausalLM``): RMSNorms scaling by (1 + w) before and after attention
and the feed-forward, GELU-tanh gating, token rows times sqrt(width), scores scaled by
``query_pre_attn_scalar`` ** -0.5, attention-logit and final-logit soft-capping, and
sliding-window blocks alternating with global ones. Gemma 3's text model (:mod:`gemma3`)
reads and writes through these functions. llama.cpp's ``gemma2`` GGUF is not read yet."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import FAMILY_PARTS
from minigpt_tui.engine.families.declaration import Family, TokenizerDefaults
from minigpt_tui.engine.families.transformers_config import positive_number, rope_parameters, shown

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.core.config import ModelConfig
    from minigpt_tui.engine.families.declaration import Getter, Tensors
    from minigpt_tui.engine.families.transformers_config import ConfigReader

SLIDING, FULL = "sliding_attention", "full_attention"
# transformers' class defaults where config.json leaves a field out (Gemma2Config, Gemma3TextConfig)
HEAD_DIM, QUERY_SCALAR, WINDOW, EPS = 256, 256, 4096, 1e-6
# Our block names -> Gemma's, under "layers.{i}." (every norm a (1 + w) RMSNorm).
NORM_NAMES = (("attn_norm", "input_layernorm"), ("post_attn_norm", "post_attention_layernorm"),
              ("ffn_norm", "pre_feedforward_layernorm"), ("post_ffn_norm", "post_feedforward_layernorm"))


def cap(c: "ConfigReader", key: str, default: float | None) -> float:
    """A soft-cap: null (or absent, where the class's default is null) is 0, none."""
    value = c.data.get(key, default)
    if value is None:
        return 0.0
    if not positive_number(value):
        raise c.refuse(f"{key} {shown(value)} (a positive number or null)")
    return float(value)


def layer_kinds(c: "ConfigReader", layers: int, pattern: int) -> list[str]:
    """config.json's ``layer_types``, or the class's default: every ``pattern``-th block global."""
    kinds = c.data.get("layer_types")
    if kinds is None:
        return [SLIDING if (i + 1) % pattern else FULL for i in range(layers)]
    if not isinstance(kinds, list) or len(kinds) != layers or any(k not in (SLIDING, FULL) for k in kinds):
        raise c.refuse(f"layer_types {shown(kinds)} (one of {SLIDING!r} or {FULL!r} per layer)")
    return kinds


def shaped_like_gemma(c: "ConfigReader", pattern: int, context: int = 8192) -> dict[str, Any]:
    """The settings Gemma 2 and Gemma 3's text model share (each family adds its rotary)."""
    if c.flag("use_bidirectional_attention", False):
        raise c.refuse("use_bidirectional_attention")
    if c.text("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise c.refuse(f"hidden_activation {shown(c.data.get('hidden_activation'))} (supported: gelu_pytorch_tanh)")
    width, heads, layers = c.int("hidden_size"), c.int("num_attention_heads"), c.int("num_hidden_layers")
    head_dim = c.int("head_dim", HEAD_DIM)
    scalar = c.float("query_pre_attn_scalar", QUERY_SCALAR)
    kinds = layer_kinds(c, layers, pattern)
    local = tuple(i for i, kind in enumerate(kinds) if kind == SLIDING)
    return {"width": width, "heads": heads, "kv_heads": c.int("num_key_value_heads", heads),
            "head_dim_override": 0 if head_dim * heads == width else head_dim,
            "ffn": c.int("intermediate_size"), "layers": layers, "context": c.int("max_position_embeddings", context),
            "norm_eps": c.float("rms_norm_eps", EPS), "attention_bias": "all" if c.flag("attention_bias", False)
            else "none", "attention_scalar": 0.0 if _inverse_sqrt_same(scalar, head_dim) else scalar,
            "attention_window": c.int("sliding_window", WINDOW) if local else 0, "local_layers": local}


def _inverse_sqrt_same(scalar: float, head_dim: int) -> bool:
    """Whether ``scalar ** -0.5`` (transformers') is our 1/sqrt(head width), bit for bit."""
    return scalar == head_dim and scalar ** -0.5 == 1.0 / math.sqrt(head_dim)


def _whole(value: float) -> float | int:
    """transformers declares query_pre_attn_scalar an int: a whole number is written as one."""
    return int(value) if float(value).is_integer() else value


def settings_from(c: "ConfigReader") -> dict[str, Any]:
    theta, fraction = c.rope()
    if fraction != 1 or c.rope_scaling():
        raise c.refuse("rope scaling or a partial rotary factor")
    return {**shaped_like_gemma(c, 2), "rope_base": theta,
            "attention_softcap": cap(c, "attn_logit_softcapping", 50.0),
            "logit_softcap": cap(c, "final_logit_softcapping", 30.0)}


def config_like_gemma(config: "ModelConfig") -> dict[str, Any]:
    kinds = [SLIDING if config.window_of(i) else FULL for i in range(config.layers)]
    return {"hidden_size": config.width, "num_attention_heads": config.heads, "num_key_value_heads": config.kv_heads,
            "head_dim": config.head_dim, "intermediate_size": config.ffn, "num_hidden_layers": config.layers,
            "max_position_embeddings": config.context, "rms_norm_eps": config.norm_eps,
            "hidden_activation": "gelu_pytorch_tanh", "attention_bias": config.attention_bias == "all",
            "attention_dropout": 0.0, "query_pre_attn_scalar": _whole(config.attention_scalar or config.head_dim),
            "sliding_window": config.attention_window or WINDOW, "layer_types": kinds,
            "final_logit_softcapping": config.logit_softcap or None, "use_bidirectional_attention": False}


def config_to(config: "ModelConfig", activation: str) -> dict[str, Any]:
    """``activation`` unused: Gemma's gate is GELU-tanh."""
    return {**config_like_gemma(config), "rope_parameters": rope_parameters(config), "rope_theta": config.rope_base,
            "attn_logit_softcapping": config.attention_softcap or None}


def tensors_from(get: "Getter", config: "ModelConfig") -> "Tensors":
    out = {"token_embedding.weight": get("embed_tokens.weight"), "final_norm.weight": get("norm.weight")}
    for i in range(config.layers):
        ours, theirs = f"blocks.{i}.", f"layers.{i}."
        out.update({f"{ours}{mine}.weight": get(f"{theirs}{name}.weight") for mine, name in NORM_NAMES})
        for proj in "qkvo":
            out[f"{ours}attn.{proj}_proj.weight"] = get(f"{theirs}self_attn.{proj}_proj.weight")
            if config.biased(proj):
                out[f"{ours}attn.{proj}_proj.bias"] = get(f"{theirs}self_attn.{proj}_proj.bias")
        if config.qk_norm:
            for norm in ("q_norm", "k_norm"):
                out[f"{ours}attn.{norm}.weight"] = get(f"{theirs}self_attn.{norm}.weight")
        for proj in ("gate", "up", "down"):
            out[f"{ours}ffn.{proj}_proj.weight"] = get(f"{theirs}mlp.{proj}_proj.weight")
    return out


def tensors_to(ours: Mapping[str, "torch.Tensor"], config: "ModelConfig") -> "Tensors":
    """The inverse of :func:`tensors_from`."""
    names = tensors_from(lambda name: name, config)  # type: ignore[arg-type,return-value]  # ours -> theirs
    return {str(theirs): ours[mine] for mine, theirs in names.items()}


FAMILY = Family(
    name="gemma2", parts=FAMILY_PARTS["gemma2"], architecture="Gemma2ForCausalLM", tied_by_default=True,
    settings_from=settings_from, config_to=config_to, base_prefix="model.", table="embed_tokens.weight",
    head="lm_head.weight", tensors_from=tensors_from, tensors_to=tensors_to,
    constants=("rope_base", "norm_eps", "attention_scalar", "attention_softcap", "logit_softcap"),
    gguf=None, tokenizer=TokenizerDefaults(kind="metaspace", bos="<bos>", eos="<eos>"),
    example={"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
             "intermediate_size": 48, "num_hidden_layers": 3, "max_position_embeddings": 64, "rope_theta": 500.0,
             "sliding_window": 4, "query_pre_attn_scalar": 12, "attn_logit_softcapping": 2.0,
             "final_logit_softcapping": 3.0},
)
