"""Qwen3 (``Qwen3ForCausalLM``, GGUF ``qwen3``): llama's parts without biases, an RMSNorm on
each query and key head before rotary (``qk_norm``), a head width of its own (``head_dim``,
not hidden_size / heads), a head tied or not, and sliding windows on the blocks from
``max_window_layers`` on where ``use_sliding_window`` (or ``layer_types``) says."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import FAMILY_PARTS
from minigpt_tui.engine.families.declaration import Family, TokenizerDefaults
from minigpt_tui.engine.families.llama import config_like_llama, gguf_layout, shaped_like_llama, tensors_from, tensors_to
from minigpt_tui.engine.families.transformers_config import shown, sliding_window, window_config

if TYPE_CHECKING:
    from minigpt_tui.engine.core.config import ModelConfig
    from minigpt_tui.engine.families.transformers_config import ConfigReader

LAYER_KINDS = ("full_attention", "sliding_attention")


def _typed_layers(c: "ConfigReader", kinds: Any, layers: int) -> tuple[int, ...]:
    """The sliding blocks ``layer_types`` names, each entry checked."""
    if not isinstance(kinds, list) or len(kinds) != layers or any(k not in LAYER_KINDS for k in kinds):
        raise c.refuse(f"layer_types {shown(kinds)} (one of {', '.join(LAYER_KINDS)} per layer)")
    return tuple(i for i, kind in enumerate(kinds) if kind == "sliding_attention")


def _sliding_layers(c: "ConfigReader", layers: int) -> tuple[int, ...]:
    """The blocks config.json makes sliding: ``layer_types`` where it is written, else those
    from ``max_window_layers`` on (transformers' rule; only ``use_sliding_window`` turns the
    window on)."""
    kinds = c.data.get("layer_types")
    if kinds is not None:
        return _typed_layers(c, kinds, layers)
    first = c.data.get("max_window_layers", 28)
    if isinstance(first, bool) or not isinstance(first, int) or first < 0:
        raise c.refuse(f"max_window_layers {shown(first)} (a whole number from 0)")
    return tuple(range(first, layers))


def settings_from(c: "ConfigReader") -> dict[str, Any]:
    if c.flag("attention_bias", False):
        raise c.refuse("attention_bias true (Qwen3 has no q, k, v or o bias)")
    if not isinstance(c.data.get("head_dim"), int):
        raise c.refuse(f"head_dim {shown(c.data.get('head_dim'))} (each head's width, a positive integer, "
                       "must be written)")
    values = shaped_like_llama(c, "none", free_head_dim=True)
    sliding = _sliding_layers(c, values["layers"])
    if not c.flag("use_sliding_window", False):
        sliding = ()
    return {**values, **sliding_window(c, sliding, values["context"])}


def config_to(config: "ModelConfig", activation: str) -> dict[str, Any]:
    windowed = bool(config.attention_window)
    kinds = ["sliding_attention" if windowed and i in config.local_layers else "full_attention"
             for i in range(config.layers)]
    return {**config_like_llama(config), "attention_bias": False, "use_sliding_window": windowed,
            "sliding_window": window_config(config), "max_window_layers": config.layers,
            "layer_types": kinds}


FAMILY = Family(
    name="qwen3", parts=FAMILY_PARTS["qwen3"], architecture="Qwen3ForCausalLM", tied_by_default=False,
    settings_from=settings_from, config_to=config_to, base_prefix="model.", table="embed_tokens.weight",
    head="lm_head.weight", tensors_from=tensors_from, tensors_to=tensors_to, constants=("rope_base", "norm_eps"),
    # llama.cpp's qwen3: qwen2's layout (rotate-half rows, unpermuted) without biases, with the
    # per-head norms (attn_q_norm, attn_k_norm) and the head width of its own
    gguf=gguf_layout("qwen3", permuted=False, qkv_bias=False, metadata=("head_dim",)),
    tokenizer=TokenizerDefaults(kind="byte_level_split", bos="<|endoftext|>", eos="<|endoftext|>"),
    # A head width (12) apart from hidden_size / heads (8), grouped kv heads, a tied head.
    example={"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12,
             "intermediate_size": 48, "num_hidden_layers": 2, "max_position_embeddings": 64,
             "rope_theta": 1000.0, "tie_word_embeddings": True},
)
