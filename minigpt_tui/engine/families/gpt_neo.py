"""GPT-Neo (``GPTNeoForCausalLM``; no GGUF architecture): GPT-2's parts with nn.Linear
weights, no 1/sqrt(d) scaling of the scores, a bias on the attention output only, and local
layers that see the last ``window_size`` positions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import FAMILY_PARTS
from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.families.declaration import Family, TokenizerDefaults

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.core.config import ModelConfig
    from minigpt_tui.engine.families.declaration import Getter, Tensors
    from minigpt_tui.engine.families.transformers_config import ConfigReader


def settings_from(c: "ConfigReader") -> dict[str, Any]:
    width, heads, layers = c.int("hidden_size"), c.int("num_heads"), c.int("num_layers")
    kinds = c.data.get("attention_layers")
    if not isinstance(kinds, list) or len(kinds) != layers:
        kinds = _expand_attention_types(c, layers)
    if any(kind not in ("global", "local") for kind in kinds):
        raise CheckpointError(f"{c.where}: attention_layers must name global or local for each of {layers} layers")
    return {"width": width, "heads": heads, "kv_heads": heads, "ffn": c.int("intermediate_size", 4 * width),
            "layers": layers, "context": c.int("max_position_embeddings", 2048),
            "norm_eps": c.float("layer_norm_epsilon", 1e-5), "gelu_approximation": c.gelu("activation_function"),
            "attention_window": c.int("window_size", 256),
            "local_layers": tuple(i for i, kind in enumerate(kinds) if kind == "local")}


def _expand_attention_types(c: "ConfigReader", layers: int) -> list[Any]:
    """Each layer's attention kind from attention_types' [[kinds], repeat] pairs (by default
    global and local in turn). The pairs are counted against the layers before any is
    expanded: a repeat of 10**12 is refused, not built."""
    pairs = c.data.get("attention_types") or [[["global", "local"], max(layers // 2, 1)]]
    if not isinstance(pairs, list) or not all(map(_is_kinds_pair, pairs)):
        raise CheckpointError(f"{c.where}: attention_types must be [[kinds], repeat] pairs")
    total = sum(len(kinds) * repeat for kinds, repeat in pairs)
    if total != layers:
        raise CheckpointError(f"{c.where}: attention_types names {total:,} layers, the config has {layers}")
    return [kind for kinds, repeat in pairs for kind in list(kinds) * repeat]


def _is_kinds_pair(item: Any) -> bool:
    """Whether ``item`` is one ``[[kinds], repeat]`` pair of attention_types."""
    return (isinstance(item, list) and len(item) == 2 and isinstance(item[0], list)
            and isinstance(item[1], int) and not isinstance(item[1], bool) and item[1] >= 0)


def config_to(config: "ModelConfig", activation: str) -> dict[str, Any]:
    kinds = ["local" if i in config.local_layers else "global" for i in range(config.layers)]
    return {
        "hidden_size": config.width, "num_heads": config.heads, "num_layers": config.layers,
        "max_position_embeddings": config.context, "intermediate_size": config.ffn,
        "window_size": config.attention_window or 256, "attention_layers": kinds,
        "attention_types": [[[kind], 1] for kind in kinds], "layer_norm_epsilon": config.norm_eps,
        "activation_function": activation, "embed_dropout": 0.0, "resid_dropout": 0.0, "attention_dropout": 0.0}


# (ours, theirs) under a block's prefixes, moved unchanged ("{a}": the attention's prefix).
_BLOCK = (("attn_norm.weight", "ln_1.weight"), ("attn_norm.bias", "ln_1.bias"),
          ("attn.q_proj.weight", "{a}q_proj.weight"), ("attn.k_proj.weight", "{a}k_proj.weight"),
          ("attn.v_proj.weight", "{a}v_proj.weight"), ("attn.o_proj.weight", "{a}out_proj.weight"),
          ("attn.o_proj.bias", "{a}out_proj.bias"), ("ffn_norm.weight", "ln_2.weight"),
          ("ffn_norm.bias", "ln_2.bias"), ("ffn.up_proj.weight", "mlp.c_fc.weight"),
          ("ffn.up_proj.bias", "mlp.c_fc.bias"), ("ffn.down_proj.weight", "mlp.c_proj.weight"),
          ("ffn.down_proj.bias", "mlp.c_proj.bias"))
_EMBEDDINGS = (("token_embedding.weight", "wte.weight"), ("position_embedding.weight", "wpe.weight"))
_FINAL_NORM = (("final_norm.weight", "ln_f.weight"), ("final_norm.bias", "ln_f.bias"))


def _pairs(config: "ModelConfig") -> list[tuple[str, str]]:
    pairs = list(_EMBEDDINGS)
    for i in range(config.layers):
        pairs += [(f"blocks.{i}.{ours}", f"h.{i}.{theirs.format(a='attn.attention.')}") for ours, theirs in _BLOCK]
    return pairs + list(_FINAL_NORM)


def tensors_from(get: "Getter", config: "ModelConfig") -> "Tensors":
    return {ours: get(theirs) for ours, theirs in _pairs(config)}


def tensors_to(ours: Mapping[str, "torch.Tensor"], config: "ModelConfig") -> "Tensors":
    return {theirs: ours[mine] for mine, theirs in _pairs(config)}


FAMILY = Family(
    name="gpt_neo", parts=FAMILY_PARTS["gpt_neo"], architecture="GPTNeoForCausalLM", tied_by_default=True,
    settings_from=settings_from, config_to=config_to, base_prefix="transformer.", table="wte.weight",
    head="lm_head.weight", tensors_from=tensors_from, tensors_to=tensors_to, constants=("norm_eps",), gguf=None,
    tokenizer=TokenizerDefaults(kind="byte_level", bos="<|endoftext|>", eos="<|endoftext|>"),
    example={"hidden_size": 32, "num_heads": 4, "num_layers": 2, "max_position_embeddings": 64, "window_size": 3,
             "attention_types": [[["global", "local"], 1]]},
)
