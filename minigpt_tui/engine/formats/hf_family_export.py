"""Our model back in the transformers class of its family: the inverse of
:mod:`hf_families`' reading, for a model that came from elsewhere (or any model of the
five families with its own tokenizer.json).

:func:`family_tensors` renames, transposes and joins our parameters into the class's state
dict names (every move undoes one of the reader's, so reading the export back gives our
tensors bit for bit); :func:`family_config` writes the config.json fields the reader and
transformers read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.formats.hf_families import ARCHITECTURES, BASE_PREFIX, HEAD

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.core.config import ModelConfig

Tensors = dict[str, "torch.Tensor"]
ACTIVATION = {"tanh": "gelu_new", "none": "gelu"}


def _gpt2(ours: Tensors, config: "ModelConfig") -> Tensors:
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


def _gpt_neo(ours: Tensors, config: "ModelConfig") -> Tensors:
    out = {"wte.weight": ours["token_embedding.weight"], "wpe.weight": ours["position_embedding.weight"]}
    for i in range(config.layers):
        mine, theirs = f"blocks.{i}.", f"h.{i}."
        attention = theirs + "attn.attention."
        out.update({
            theirs + "ln_1.weight": ours[mine + "attn_norm.weight"], theirs + "ln_1.bias": ours[mine + "attn_norm.bias"],
            **{f"{attention}{p}_proj.weight": ours[f"{mine}attn.{p}_proj.weight"] for p in "qkv"},
            attention + "out_proj.weight": ours[mine + "attn.o_proj.weight"],
            attention + "out_proj.bias": ours[mine + "attn.o_proj.bias"],
            theirs + "ln_2.weight": ours[mine + "ffn_norm.weight"], theirs + "ln_2.bias": ours[mine + "ffn_norm.bias"],
            theirs + "mlp.c_fc.weight": ours[mine + "ffn.up_proj.weight"],
            theirs + "mlp.c_fc.bias": ours[mine + "ffn.up_proj.bias"],
            theirs + "mlp.c_proj.weight": ours[mine + "ffn.down_proj.weight"],
            theirs + "mlp.c_proj.bias": ours[mine + "ffn.down_proj.bias"],
        })
    out.update({"ln_f.weight": ours["final_norm.weight"], "ln_f.bias": ours["final_norm.bias"]})
    return out


def _neox_join(parts: list["torch.Tensor"], config: "ModelConfig") -> "torch.Tensor":
    """q, k and v interleaved per head ([q, k, v] of each head in turn), as query_key_value."""
    import torch  # deferred: imports torch

    rest = parts[0].shape[1:]
    per_head = torch.stack([p.reshape(config.heads, config.head_dim, *rest) for p in parts], dim=1)
    return per_head.reshape(3 * config.heads * config.head_dim, *rest)


def _gpt_neox(ours: Tensors, config: "ModelConfig") -> Tensors:
    out = {"embed_in.weight": ours["token_embedding.weight"]}
    for i in range(config.layers):
        mine, theirs = f"blocks.{i}.", f"layers.{i}."
        out.update({
            theirs + "input_layernorm.weight": ours[mine + "attn_norm.weight"],
            theirs + "input_layernorm.bias": ours[mine + "attn_norm.bias"],
            theirs + "post_attention_layernorm.weight": ours[mine + "ffn_norm.weight"],
            theirs + "post_attention_layernorm.bias": ours[mine + "ffn_norm.bias"],
            theirs + "attention.query_key_value.weight": _neox_join([ours[f"{mine}attn.{p}_proj.weight"] for p in "qkv"], config),
            theirs + "attention.dense.weight": ours[mine + "attn.o_proj.weight"],
            theirs + "mlp.dense_h_to_4h.weight": ours[mine + "ffn.up_proj.weight"],
            theirs + "mlp.dense_h_to_4h.bias": ours[mine + "ffn.up_proj.bias"],
            theirs + "mlp.dense_4h_to_h.weight": ours[mine + "ffn.down_proj.weight"],
            theirs + "mlp.dense_4h_to_h.bias": ours[mine + "ffn.down_proj.bias"],
        })
        if config.attention_bias == "all":
            out[theirs + "attention.query_key_value.bias"] = _neox_join(
                [ours[f"{mine}attn.{p}_proj.bias"] for p in "qkv"], config)
            out[theirs + "attention.dense.bias"] = ours[mine + "attn.o_proj.bias"]
    out.update({"final_layer_norm.weight": ours["final_norm.weight"], "final_layer_norm.bias": ours["final_norm.bias"]})
    return out


def _llama(ours: Tensors, config: "ModelConfig") -> Tensors:
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
    return out


_TENSORS = {"gpt2": _gpt2, "gpt_neo": _gpt_neo, "gpt_neox": _gpt_neox, "llama": _llama, "qwen2": _llama}


TABLE = {"gpt2": "transformer.wte.weight", "gpt_neo": "transformer.wte.weight", "gpt_neox": "gpt_neox.embed_in.weight",
         "llama": "model.embed_tokens.weight", "qwen2": "model.embed_tokens.weight"}


def dropped_head(config: "ModelConfig") -> dict[str, str]:
    """A tied head as safetensors.torch.save_model records the alias it leaves out."""
    return {HEAD[config.family]: TABLE[config.family]} if config.tied_head else {}


def family_tensors(ours: Tensors, config: "ModelConfig") -> list[tuple[str, "torch.Tensor"]]:
    """The causal-LM class's state dict (a tied head left out: transformers ties it again)."""
    family = config.family
    out = {BASE_PREFIX[family] + name: tensor.contiguous() for name, tensor in _TENSORS[family](ours, config).items()}
    if not config.tied_head:
        out[HEAD[family]] = ours["lm_head.weight"].contiguous()
    return sorted(out.items())


def family_config(config: "ModelConfig", vocab_size: int, dtype: str, bos: int | None, eos: list[int]) -> dict[str, Any]:
    """config.json for the family's class, with every setting the model computes with."""
    family = config.family
    common: dict[str, Any] = {
        "architectures": [ARCHITECTURES[family]], "model_type": family, "vocab_size": vocab_size, "dtype": dtype,
        "bos_token_id": bos, "eos_token_id": eos[0] if len(eos) == 1 else (eos or None),
        "tie_word_embeddings": config.tied_head, "use_cache": True,
    }
    activation = ACTIVATION[config.gelu_approximation]
    specific = _SPECIFIC_CONFIG.get(family, _llama_like_config)(config, activation)
    return {**common, **specific}


def _gpt2_config(config: "ModelConfig", activation: str) -> dict[str, Any]:
    return {
        "n_embd": config.width, "n_head": config.heads, "n_layer": config.layers, "n_positions": config.context,
        "n_inner": config.ffn, "layer_norm_epsilon": config.norm_eps, "activation_function": activation,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}


def _gpt_neo_config(config: "ModelConfig", activation: str) -> dict[str, Any]:
    kinds = ["local" if i in config.local_layers else "global" for i in range(config.layers)]
    return {
        "hidden_size": config.width, "num_heads": config.heads, "num_layers": config.layers,
        "max_position_embeddings": config.context, "intermediate_size": config.ffn,
        "window_size": config.attention_window or 256, "attention_layers": kinds,
        "attention_types": [[[kind], 1] for kind in kinds], "layer_norm_epsilon": config.norm_eps,
        "activation_function": activation, "embed_dropout": 0.0, "resid_dropout": 0.0, "attention_dropout": 0.0}


def _gpt_neox_config(config: "ModelConfig", activation: str) -> dict[str, Any]:
    return {
        "hidden_size": config.width, "num_attention_heads": config.heads, "num_hidden_layers": config.layers,
        "intermediate_size": config.ffn, "max_position_embeddings": config.context,
        "layer_norm_eps": config.norm_eps, "hidden_act": activation,
        "use_parallel_residual": config.residual == "parallel", "attention_bias": config.attention_bias == "all",
        "rope_parameters": {**_rope_parameters(config), "partial_rotary_factor": config.rotary_fraction},
        "rotary_pct": config.rotary_fraction, "rotary_emb_base": config.rope_base,
        "hidden_dropout": 0.0, "attention_dropout": 0.0}


def _rope_parameters(config: "ModelConfig") -> dict[str, Any]:
    """transformers' rope_parameters: the base, and the scaling where there is one."""
    if config.rope_scaling == "none":
        return {"rope_type": "default", "rope_theta": config.rope_base}
    out: dict[str, Any] = {"rope_type": config.rope_scaling, "rope_theta": config.rope_base,
                           "factor": config.rope_factor}
    if config.rope_scaling == "llama3":
        out.update(low_freq_factor=config.rope_low_freq_factor, high_freq_factor=config.rope_high_freq_factor,
                   original_max_position_embeddings=config.rope_original_context)
    return out


def _llama_like_config(config: "ModelConfig", activation: str) -> dict[str, Any]:
    """Llama and the families shaped like it (SiLU, RMS norm; ``activation`` unused)."""
    specific: dict[str, Any] = {
        "hidden_size": config.width, "num_attention_heads": config.heads, "num_key_value_heads": config.kv_heads,
        "head_dim": config.head_dim, "intermediate_size": config.ffn, "num_hidden_layers": config.layers,
        "max_position_embeddings": config.context, "rms_norm_eps": config.norm_eps, "hidden_act": "silu",
        "rope_parameters": _rope_parameters(config), "rope_theta": config.rope_base, "attention_dropout": 0.0}
    if config.family == "llama":
        specific.update(attention_bias=config.attention_bias == "all", mlp_bias=bool(config.ffn_bias))
    else:
        specific.update(use_sliding_window=False, sliding_window=None)
    return specific


# The settings only one family's config.json has; any other family is shaped like llama.
_SPECIFIC_CONFIG = {"gpt2": _gpt2_config, "gpt_neo": _gpt_neo_config, "gpt_neox": _gpt_neox_config}
