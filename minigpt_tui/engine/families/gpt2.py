"""GPT-2 (``GPT2LMHeadModel``, GGUF ``gpt2``): LayerNorm, learned positions, GELU, biases
everywhere; transformers' Conv1D stores [in, out] weights, with q, k and v side by side in
one ``c_attn``, and llama.cpp keeps them side by side in ``attn_qkv``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import FAMILY_PARTS
from minigpt_tui.engine.families.declaration import Family, GGUFLayout, TokenizerDefaults
from minigpt_tui.engine.families.gguf_names import BLOCK_NAMES, shared_from, shared_to

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.core.config import ModelConfig
    from minigpt_tui.engine.families.declaration import Getter, Tensors
    from minigpt_tui.engine.families.transformers_config import ConfigReader


def settings_from(c: "ConfigReader") -> dict[str, Any]:
    width = c.int("n_embd")
    if not c.flag("scale_attn_weights", True) or c.flag("scale_attn_by_inverse_layer_idx", False):
        raise c.refuse("attention scaling other than 1/sqrt(head width)")
    if c.flag("reorder_and_upcast_attn", False) or c.flag("add_cross_attention", False):
        raise c.refuse("reorder_and_upcast_attn or cross-attention")
    heads = c.int("n_head")
    return {"width": width, "heads": heads, "kv_heads": heads, "ffn": c.int("n_inner", 4 * width),
            "layers": c.int("n_layer"), "context": c.int("n_positions", 1024),
            "norm_eps": c.float("layer_norm_epsilon", 1e-5), "gelu_approximation": c.gelu("activation_function")}


def config_to(config: "ModelConfig", activation: str) -> dict[str, Any]:
    return {
        "n_embd": config.width, "n_head": config.heads, "n_layer": config.layers, "n_positions": config.context,
        "n_inner": config.ffn, "layer_norm_epsilon": config.norm_eps, "activation_function": activation,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}


def _conv1d(get: "Getter", name: str) -> "torch.Tensor":
    return get(name).t()  # Conv1D stores [in, out]; nn.Linear [out, in]


def tensors_from(get: "Getter", config: "ModelConfig") -> "Tensors":
    width = config.width
    out = {"token_embedding.weight": get("wte.weight"), "position_embedding.weight": get("wpe.weight")}
    for i in range(config.layers):
        ours, theirs = f"blocks.{i}.", f"h.{i}."
        q, k, v = _conv1d(get, theirs + "attn.c_attn.weight").split([width] * 3, dim=0)
        qb, kb, vb = get(theirs + "attn.c_attn.bias").split([width] * 3, dim=0)
        out.update({
            ours + "attn_norm.weight": get(theirs + "ln_1.weight"), ours + "attn_norm.bias": get(theirs + "ln_1.bias"),
            ours + "attn.q_proj.weight": q, ours + "attn.k_proj.weight": k, ours + "attn.v_proj.weight": v,
            ours + "attn.q_proj.bias": qb, ours + "attn.k_proj.bias": kb, ours + "attn.v_proj.bias": vb,
            ours + "attn.o_proj.weight": _conv1d(get, theirs + "attn.c_proj.weight"),
            ours + "attn.o_proj.bias": get(theirs + "attn.c_proj.bias"),
            ours + "ffn_norm.weight": get(theirs + "ln_2.weight"), ours + "ffn_norm.bias": get(theirs + "ln_2.bias"),
            ours + "ffn.up_proj.weight": _conv1d(get, theirs + "mlp.c_fc.weight"),
            ours + "ffn.up_proj.bias": get(theirs + "mlp.c_fc.bias"),
            ours + "ffn.down_proj.weight": _conv1d(get, theirs + "mlp.c_proj.weight"),
            ours + "ffn.down_proj.bias": get(theirs + "mlp.c_proj.bias"),
        })
    out.update({"final_norm.weight": get("ln_f.weight"), "final_norm.bias": get("ln_f.bias")})
    return out


def tensors_to(ours: Mapping[str, "torch.Tensor"], config: "ModelConfig") -> "Tensors":
    import torch  # deferred: imports torch

    out = {"wte.weight": ours["token_embedding.weight"], "wpe.weight": ours["position_embedding.weight"]}
    for i in range(config.layers):
        mine, theirs = f"blocks.{i}.", f"h.{i}."
        qkv = torch.cat([ours[f"{mine}attn.{p}_proj.weight"] for p in "qkv"], dim=0)
        out.update({
            theirs + "ln_1.weight": ours[mine + "attn_norm.weight"], theirs + "ln_1.bias": ours[mine + "attn_norm.bias"],
            theirs + "attn.c_attn.weight": qkv.t(),  # Conv1D stores [in, out]
            theirs + "attn.c_attn.bias": torch.cat([ours[f"{mine}attn.{p}_proj.bias"] for p in "qkv"]),
            theirs + "attn.c_proj.weight": ours[mine + "attn.o_proj.weight"].t(),
            theirs + "attn.c_proj.bias": ours[mine + "attn.o_proj.bias"],
            theirs + "ln_2.weight": ours[mine + "ffn_norm.weight"], theirs + "ln_2.bias": ours[mine + "ffn_norm.bias"],
            theirs + "mlp.c_fc.weight": ours[mine + "ffn.up_proj.weight"].t(),
            theirs + "mlp.c_fc.bias": ours[mine + "ffn.up_proj.bias"],
            theirs + "mlp.c_proj.weight": ours[mine + "ffn.down_proj.weight"].t(),
            theirs + "mlp.c_proj.bias": ours[mine + "ffn.down_proj.bias"],
        })
    out.update({"ln_f.weight": ours["final_norm.weight"], "ln_f.bias": ours["final_norm.bias"]})
    return out


GGUF_GLOBALS = (("position_embedding.weight", "position_embd.weight"), ("final_norm.bias", "output_norm.bias"))


def gguf_from(get: "Getter", config: "ModelConfig") -> "Tensors":
    out = shared_from(get, config)
    out.update({ours: get(theirs) for ours, theirs in GGUF_GLOBALS})
    for i in range(config.layers):
        ours, theirs = f"blocks.{i}.", f"blk.{i}."
        for mine, file in BLOCK_NAMES:
            out[f"{ours}{mine}.weight"] = get(f"{theirs}{file}.weight")
            out[f"{ours}{mine}.bias"] = get(f"{theirs}{file}.bias")
        for kind in ("weight", "bias"):
            for proj, rows in zip("qkv", get(f"{theirs}attn_qkv.{kind}").split(config.width, dim=0)):
                out[f"{ours}attn.{proj}_proj.{kind}"] = rows
    return out


def gguf_to(ours: Mapping[str, "torch.Tensor"], config: "ModelConfig") -> "Tensors":
    import torch  # deferred: imports torch

    out = shared_to(ours, config)
    out.update({theirs: ours[mine] for mine, theirs in GGUF_GLOBALS})
    for i in range(config.layers):
        mine, theirs = f"blocks.{i}.", f"blk.{i}."
        for name, file in BLOCK_NAMES:
            out[f"{theirs}{file}.weight"] = ours[f"{mine}{name}.weight"]
            out[f"{theirs}{file}.bias"] = ours[f"{mine}{name}.bias"]
        for kind in ("weight", "bias"):
            out[f"{theirs}attn_qkv.{kind}"] = torch.cat([ours[f"{mine}attn.{p}_proj.{kind}"] for p in "qkv"])
    return out


FAMILY = Family(
    name="gpt2", parts=FAMILY_PARTS["gpt2"], architecture="GPT2LMHeadModel", tied_by_default=True,
    settings_from=settings_from, config_to=config_to, base_prefix="transformer.", table="wte.weight",
    head="lm_head.weight", tensors_from=tensors_from, tensors_to=tensors_to, constants=("norm_eps",),
    gguf=GGUFLayout(architecture="gpt2", norm_eps_key="attention.layer_norm_epsilon", norm_eps_default=1e-5,
                    grouped_kv=False, implied={"gelu_approximation": "tanh"}, tensors_from=gguf_from,
                    tensors_to=gguf_to),
    tokenizer=TokenizerDefaults(kind="byte_level", bos="<|endoftext|>", eos="<|endoftext|>"),
    example={"n_embd": 32, "n_head": 4, "n_layer": 2, "n_positions": 64},
)
