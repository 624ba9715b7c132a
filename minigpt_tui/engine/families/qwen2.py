"""Qwen2 (``Qwen2ForCausalLM``, GGUF ``qwen2``): llama's parts with biases on q, k and v;
llama.cpp keeps its q and k rows in rotate-half order. A sliding window is refused."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import FAMILY_PARTS
from minigpt_tui.engine.families.declaration import Family, TokenizerDefaults
from minigpt_tui.engine.families.llama import (
    config_like_llama,
    gguf_layout,
    shaped_like_llama,
    tensors_from,
    tensors_to,
)

if TYPE_CHECKING:
    from minigpt_tui.engine.core.config import ModelConfig
    from minigpt_tui.engine.families.transformers_config import ConfigReader


def settings_from(c: "ConfigReader") -> dict[str, Any]:
    if c.flag("use_sliding_window", False):
        raise c.refuse("use_sliding_window")
    return shaped_like_llama(c, "qkv")


def config_to(config: "ModelConfig", activation: str) -> dict[str, Any]:
    return {**config_like_llama(config), "use_sliding_window": False, "sliding_window": None}


FAMILY = Family(
    name="qwen2", parts=FAMILY_PARTS["qwen2"], architecture="Qwen2ForCausalLM", tied_by_default=False,
    settings_from=settings_from, config_to=config_to, base_prefix="model.", table="embed_tokens.weight",
    head="lm_head.weight", tensors_from=tensors_from, tensors_to=tensors_to, constants=("norm_eps",),
    gguf=gguf_layout("qwen2", permuted=False, qkv_bias=True),
    tokenizer=TokenizerDefaults(kind="byte_level_split", bos="<|endoftext|>", eos="<|endoftext|>"),
    example={"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
             "num_hidden_layers": 2, "max_position_embeddings": 64},
)
