"""Gemma 3's text model (``Gemma3ForCausalLM``, model_type ``gemma3_text``): Gemma 2's parts
(:mod:`gemma2`) with a (1 + w) RMSNorm on each query and key head, five sliding-window
blocks to a global one by default, and each kind of block with its own rotary base (local
10k without scaling, global from the config, scaled linearly where it says). transformers
applies no attention-logit soft-cap in Gemma 3 (``attn_logit_softcapping`` is not read), so
neither do we. The multimodal ``gemma3`` folder (a vision tower) is refused by its
architecture; llama.cpp's ``gemma3`` GGUF is not read yet."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import FAMILY_PARTS
from minigpt_tui.engine.families.declaration import Family, TokenizerDefaults
from minigpt_tui.engine.families.gemma2 import (
    FULL,
    SLIDING,
    cap,
    config_like_gemma,
    shaped_like_gemma,
    tensors_from,
    tensors_to,
)
from minigpt_tui.engine.families.transformers_config import (
    ConfigReader,
    positive_number,
    rope_parameters,
    shown,
)

if TYPE_CHECKING:
    from minigpt_tui.engine.core.config import ModelConfig

GLOBAL_BASE, LOCAL_BASE = 1_000_000.0, 10_000.0  # Gemma3TextConfig's default_theta


def _kind_parameters(c: ConfigReader) -> tuple[dict[str, Any], dict[str, Any]]:
    """rope_parameters of the global and of the sliding blocks ({} where config.json has none)."""
    params = c.data.get("rope_parameters")
    if not isinstance(params, dict) or not ({FULL, SLIDING} & set(params)):
        return {}, {}
    full, local = params.get(FULL) or {}, params.get(SLIDING) or {}
    if not isinstance(full, dict) or not isinstance(local, dict):
        raise c.refuse(f"rope_parameters {shown(params)}")
    return full, local


def rotary_settings(c: ConfigReader) -> dict[str, Any]:
    """The global blocks' base and scaling, and the local blocks' own base."""
    full, local = _kind_parameters(c)
    global_reader = ConfigReader({**c.data, "rope_theta": c.data.get("rope_theta", GLOBAL_BASE),
                                  "rope_parameters": full}, c.where, c.architecture)
    theta, fraction = global_reader.rope()
    if fraction != 1:
        raise c.refuse(f"partial_rotary_factor {shown(fraction)}")
    if local.get("rope_type", "default") != "default":
        raise c.refuse(f"rope scaling {shown(local.get('rope_type'))} on the sliding-window layers")
    local_base = local.get("rope_theta", c.data.get("rope_local_base_freq", LOCAL_BASE))
    if not positive_number(local_base):
        raise c.refuse(f"the sliding-window layers' rope_theta {shown(local_base)}")
    return {"rope_base": theta, "local_rope_base": float(local_base), **global_reader.rope_scaling()}


def settings_from(c: ConfigReader) -> dict[str, Any]:
    pattern = c.int("sliding_window_pattern", 6)
    values = {**shaped_like_gemma(c, pattern, 131_072), **rotary_settings(c),
              "logit_softcap": cap(c, "final_logit_softcapping", None)}
    if not values["local_layers"]:
        values["local_rope_base"] = 0.0  # no local block reads it
    return values


def config_to(config: "ModelConfig", activation: str) -> dict[str, Any]:
    """``activation`` unused: Gemma's gate is GELU-tanh."""
    local = {"rope_type": "default", "rope_theta": config.local_rope_base or config.rope_base}
    return {**config_like_gemma(config), "rope_parameters": {FULL: rope_parameters(config), SLIDING: local},
            "attn_logit_softcapping": None}


FAMILY = Family(
    name="gemma3", parts=FAMILY_PARTS["gemma3"], architecture="Gemma3ForCausalLM", tied_by_default=True,
    settings_from=settings_from, config_to=config_to, base_prefix="model.", table="embed_tokens.weight",
    head="lm_head.weight", tensors_from=tensors_from, tensors_to=tensors_to,
    constants=("rope_base", "norm_eps", "attention_scalar", "logit_softcap", "local_rope_base"),
    gguf=None, tokenizer=TokenizerDefaults(kind="metaspace", bos="<bos>", eos="<eos>"),
    example={"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "intermediate_size": 48, "num_hidden_layers": 4, "max_position_embeddings": 64,
             "sliding_window": 4, "sliding_window_pattern": 2, "query_pre_attn_scalar": 12,
             "final_logit_softcapping": 3.0,
             "rope_parameters": {FULL: {"rope_type": "default", "rope_theta": 5000.0},
                                 SLIDING: {"rope_type": "default", "rope_theta": 100.0}}},
    transformers_type="gemma3_text",
)
