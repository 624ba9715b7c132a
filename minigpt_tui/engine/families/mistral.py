"""Mistral (``MistralForCausalLM``): llama's parts with a sliding window over every block
(config.json's ``sliding_window``; null: none) and a head width of its own where
``head_dim`` says. llama.cpp writes Mistral as ``llama``, so it has no GGUF layout of its own:
a Mistral GGUF file opens as a llama model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import FAMILY_PARTS
from minigpt_tui.engine.families.declaration import Family, TokenizerDefaults
from minigpt_tui.engine.families.llama import config_like_llama, shaped_like_llama, tensors_from, tensors_to
from minigpt_tui.engine.families.transformers_config import shown, sliding_window, window_config

if TYPE_CHECKING:
    from minigpt_tui.engine.core.config import ModelConfig
    from minigpt_tui.engine.families.transformers_config import ConfigReader


def settings_from(c: "ConfigReader") -> dict[str, Any]:
    if c.data.get("layer_types") is not None:
        raise c.refuse(f"layer_types {shown(c.data.get('layer_types'))} (Ministral's alternating attention)")
    values = shaped_like_llama(c, "none", free_head_dim=True)
    every = tuple(range(values["layers"]))
    return {**values, **sliding_window(c, every, values["context"])}


def config_to(config: "ModelConfig", activation: str) -> dict[str, Any]:
    return {**config_like_llama(config), "sliding_window": window_config(config)}


FAMILY = Family(
    name="mistral", parts=FAMILY_PARTS["mistral"], architecture="MistralForCausalLM", tied_by_default=False,
    settings_from=settings_from, config_to=config_to, base_prefix="model.", table="embed_tokens.weight",
    head="lm_head.weight", tensors_from=tensors_from, tensors_to=tensors_to, constants=("rope_base", "norm_eps"),
    gguf=None,
    tokenizer=TokenizerDefaults(kind="metaspace", bos="<s>", eos="</s>"),
    # A window (5) shorter than the test prompts, grouped kv heads, an untied head.
    example={"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
             "num_hidden_layers": 2, "max_position_embeddings": 64, "rope_theta": 1000.0, "sliding_window": 5},
)
