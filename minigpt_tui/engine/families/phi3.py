"""Phi-3 (``Phi3ForCausalLM``, GGUF ``phi3``): llama's parts with q, k and v fused into one
``qkv_proj`` and gate and up into one ``gate_up_proj`` in its files (split into ours on
reading, joined back on writing), a leading share of each head rotated
(``partial_rotary_factor``, Phi-4-mini's 0.75), and a sliding window over every block where
``sliding_window`` says. Long-rope scaling (``longrope``, the older ``su`` and ``yarn``) is
refused."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import FAMILY_PARTS
from minigpt_tui.engine.families.declaration import Family, GGUFLayout, TokenizerDefaults
from minigpt_tui.engine.families.gguf_names import shared_from, shared_to
from minigpt_tui.engine.families.llama import config_like_llama, shaped_like_llama
from minigpt_tui.engine.families.transformers_config import shown, sliding_window, window_config

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.core.config import ModelConfig
    from minigpt_tui.engine.families.declaration import Getter, Tensors
    from minigpt_tui.engine.families.transformers_config import ConfigReader


def _scaling(c: "ConfigReader") -> Any:
    """The rope scaling type config.json names (rope_scaling over rope_parameters), or None."""
    for key in ("rope_scaling", "rope_parameters"):
        value = c.data.get(key)
        if isinstance(value, dict):
            kind = value.get("rope_type", value.get("type"))
            if kind not in (None, "default"):
                return kind
    return None


def settings_from(c: "ConfigReader") -> dict[str, Any]:
    kind = _scaling(c)
    if kind is not None:
        raise c.refuse(f"rope scaling {shown(kind)} (Phi-3's long-rope scaling is not built; supported: none)")
    values = shaped_like_llama(c, "none")
    _, fraction = c.rope(fraction_key="partial_rotary_factor")
    head_dim = values["width"] // values["heads"]
    rotated = int(head_dim * fraction)
    if rotated % 2 or rotated < 2:
        raise c.refuse(f"partial_rotary_factor {fraction} rotates {rotated} of {head_dim} dimensions per head "
                       "(an even number from 2 is needed)")
    every = tuple(range(values["layers"]))
    return {**values, "rotary_fraction": fraction, **sliding_window(c, every, values["context"])}


def config_to(config: "ModelConfig", activation: str) -> dict[str, Any]:
    out = {**config_like_llama(config), "sliding_window": window_config(config),
           "original_max_position_embeddings": config.context,
           "pad_token_id": None}  # transformers' default (32000) may lie past a small vocabulary
    out["rope_parameters"] = {**out["rope_parameters"], "partial_rotary_factor": config.rotary_fraction}
    out.pop("head_dim")  # Phi-3's head width is hidden_size / heads
    return out


def _split(tensor: "torch.Tensor", sizes: list[int]) -> list["torch.Tensor"]:
    return [part.clone() for part in tensor.split(sizes, dim=0)]


def _qkv_sizes(config: "ModelConfig") -> list[int]:
    return [config.heads * config.head_dim, config.kv_heads * config.head_dim, config.kv_heads * config.head_dim]


def _fused_from(get: "Getter", config: "ModelConfig", i: int, qkv: str, gate_up: str) -> "Tensors":
    """Block ``i``'s q, k, v and gate, up weights, split from the fused tensors named."""
    ours = f"blocks.{i}."
    q, k, v = _split(get(qkv), _qkv_sizes(config))
    gate, up = _split(get(gate_up), [config.ffn, config.ffn])
    return {ours + "attn.q_proj.weight": q, ours + "attn.k_proj.weight": k, ours + "attn.v_proj.weight": v,
            ours + "ffn.gate_proj.weight": gate, ours + "ffn.up_proj.weight": up}


def _fused_to(ours: Mapping[str, "torch.Tensor"], i: int) -> tuple["torch.Tensor", "torch.Tensor"]:
    """Block ``i``'s q, k, v weights joined (in that order), and gate, up joined."""
    import torch  # deferred: imports torch

    mine = f"blocks.{i}."
    qkv = torch.cat([ours[f"{mine}attn.{p}_proj.weight"] for p in "qkv"])
    return qkv, torch.cat([ours[mine + "ffn.gate_proj.weight"], ours[mine + "ffn.up_proj.weight"]])


def tensors_from(get: "Getter", config: "ModelConfig") -> "Tensors":
    out = {"token_embedding.weight": get("embed_tokens.weight"), "final_norm.weight": get("norm.weight")}
    for i in range(config.layers):
        ours, theirs = f"blocks.{i}.", f"layers.{i}."
        out[ours + "attn_norm.weight"] = get(theirs + "input_layernorm.weight")
        out[ours + "ffn_norm.weight"] = get(theirs + "post_attention_layernorm.weight")
        out[ours + "attn.o_proj.weight"] = get(theirs + "self_attn.o_proj.weight")
        out[ours + "ffn.down_proj.weight"] = get(theirs + "mlp.down_proj.weight")
        out.update(_fused_from(get, config, i, theirs + "self_attn.qkv_proj.weight", theirs + "mlp.gate_up_proj.weight"))
    return out


def tensors_to(ours: Mapping[str, "torch.Tensor"], config: "ModelConfig") -> "Tensors":
    out = {"embed_tokens.weight": ours["token_embedding.weight"]}
    for i in range(config.layers):
        mine, theirs = f"blocks.{i}.", f"layers.{i}."
        qkv, gate_up = _fused_to(ours, i)
        out.update({theirs + "input_layernorm.weight": ours[mine + "attn_norm.weight"],
                    theirs + "post_attention_layernorm.weight": ours[mine + "ffn_norm.weight"],
                    theirs + "self_attn.qkv_proj.weight": qkv, theirs + "self_attn.o_proj.weight":
                    ours[mine + "attn.o_proj.weight"], theirs + "mlp.gate_up_proj.weight": gate_up,
                    theirs + "mlp.down_proj.weight": ours[mine + "ffn.down_proj.weight"]})
    out["norm.weight"] = ours["final_norm.weight"]
    return out


# (ours, llama.cpp's phi3) where a block's tensor moves unchanged.
GGUF_BLOCK = (("attn_norm", "attn_norm"), ("ffn_norm", "ffn_norm"), ("attn.o_proj", "attn_output"),
              ("ffn.down_proj", "ffn_down"))


def gguf_from(get: "Getter", config: "ModelConfig") -> "Tensors":
    """llama.cpp's phi3: q, k, v fused as attn_qkv, gate and up as ffn_up (gate first), rows
    in rotate-half order (its rotary is NeoX style)."""
    out = shared_from(get, config)
    for i in range(config.layers):
        ours, theirs = f"blocks.{i}.", f"blk.{i}."
        out.update({f"{ours}{mine}.weight": get(f"{theirs}{file}.weight") for mine, file in GGUF_BLOCK})
        out.update(_fused_from(get, config, i, theirs + "attn_qkv.weight", theirs + "ffn_up.weight"))
    return out


def gguf_to(ours: Mapping[str, "torch.Tensor"], config: "ModelConfig") -> "Tensors":
    out = shared_to(ours, config)
    for i in range(config.layers):
        mine, theirs = f"blocks.{i}.", f"blk.{i}."
        out.update({f"{theirs}{file}.weight": ours[f"{mine}{name}.weight"] for name, file in GGUF_BLOCK})
        out[theirs + "attn_qkv.weight"], out[theirs + "ffn_up.weight"] = _fused_to(ours, i)
    return out


FAMILY = Family(
    name="phi3", parts=FAMILY_PARTS["phi3"], architecture="Phi3ForCausalLM", tied_by_default=False,
    settings_from=settings_from, config_to=config_to, base_prefix="model.", table="embed_tokens.weight",
    head="lm_head.weight", tensors_from=tensors_from, tensors_to=tensors_to,
    constants=("rope_base", "norm_eps", "rotary_fraction"),
    gguf=GGUFLayout(architecture="phi3", norm_eps_key="attention.layer_norm_rms_epsilon", norm_eps_default=1e-5,
                    grouped_kv=True, implied={}, tensors_from=gguf_from, tensors_to=gguf_to,
                    metadata=("rotary_share", "sliding_window")),
    tokenizer=TokenizerDefaults(kind="metaspace", bos="<s>", eos="</s>"),
    # Half of each head rotated, a window (6) shorter than the test prompts, grouped kv heads.
    example={"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
             "num_hidden_layers": 2, "max_position_embeddings": 64, "rope_theta": 1000.0,
             "partial_rotary_factor": 0.5, "sliding_window": 6, "pad_token_id": 0},
)
