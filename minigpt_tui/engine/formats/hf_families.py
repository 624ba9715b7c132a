"""Five transformers families as settings of our model's parts, and their tensors as ours.

=============  ======================  =====================================================
family         transformers class      what its config sets
=============  ======================  =====================================================
``gpt2``       GPT2LMHeadModel         LayerNorm, learned positions, Conv1D ([in, out])
                                       weights with q, k, v side by side, biases, GELU
``gpt_neo``    GPTNeoForCausalLM       as gpt2 with nn.Linear weights, no 1/sqrt(d) scaling,
                                       a bias on the attention output only, local layers
                                       that see the last ``window_size`` positions
``gpt_neox``   GPTNeoXForCausalLM      parallel residual, partial rotary
                                       (``partial_rotary_factor``), q, k, v interleaved per
                                       head in one ``query_key_value``, an untied head
``llama``      LlamaForCausalLM        RMSNorm, rotary, SwiGLU, grouped kv heads, tied or not
``qwen2``      Qwen2ForCausalLM        as llama, with biases on q, k and v
=============  ======================  =====================================================

:func:`model_config` reads config.json into a :class:`ModelConfig` and refuses, in one
line naming the field, what our model does not compute; :func:`our_tensors` renames and
reshapes the folder's tensors into our parameter names. Every move is a rename, a
transpose or a split: the values are the folder's, widened to the compute dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import GIGA, ROPE_SCALINGS, ModelConfig
from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.formats.foreign_entries import shown

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.core.config import ModelConfig

ARCHITECTURES = {
    "gpt2": "GPT2LMHeadModel",
    "gpt_neo": "GPTNeoForCausalLM",
    "gpt_neox": "GPTNeoXForCausalLM",
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
}
SUPPORTED = ", ".join(ARCHITECTURES.values())
GELU = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "none"}
TIED_BY_DEFAULT = {"gpt2": True, "gpt_neo": True, "gpt_neox": False, "llama": False, "qwen2": False}
Getter = Callable[[str], "torch.Tensor"]


class _Config:
    """config.json's fields, each read with its type checked and the file named."""

    def __init__(self, data: dict[str, Any], where: str, family: str) -> None:
        self.data, self.where, self.family = data, where, family

    def refuse(self, what: str) -> CheckpointError:
        return CheckpointError(f"{self.where}: unsupported {ARCHITECTURES[self.family]} setting: {what}")

    def int(self, key: str, default: int | None = None) -> int:
        value = self.data.get(key, default)
        if value is None and default is not None:
            value = default
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CheckpointError(f"{self.where}: {key} must be a positive integer, got {shown(value)}")
        return value

    def float(self, key: str, default: float) -> float:
        value = self.data.get(key, default)
        if not _positive_number(value):
            raise CheckpointError(f"{self.where}: {key} must be a positive number, got {shown(value)}")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise CheckpointError(f"{self.where}: {key} must be true or false, got {shown(value)}")
        return value

    def text(self, key: str, default: str) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str):
            raise CheckpointError(f"{self.where}: {key} must be a string, got {shown(value)}")
        return value

    def gelu(self, key: str) -> str:
        name = self.text(key, "gelu_new")
        if name not in GELU:
            raise self.refuse(f"{key} {shown(name)} (supported: {', '.join(GELU)})")
        return GELU[name]

    def rope(self, theta_key: str = "rope_theta", fraction_key: str | None = None) -> tuple[float, float]:
        """RoPE's base and rotated share; scaling other than none, linear or llama3 is refused."""
        params = self.data.get("rope_parameters")
        params = params if isinstance(params, dict) else {}
        kind = self._rope_kind(params)
        if kind not in ("default", None, *ROPE_SCALINGS[1:]):
            raise self.refuse(f"rope scaling {shown(kind)} (supported: none, linear, llama3)")
        theta = params.get("rope_theta", self.data.get(theta_key, 10000.0))
        fraction = params.get("partial_rotary_factor", self.data.get(fraction_key, 1.0) if fraction_key else 1.0)
        if not _positive_number(theta):
            raise CheckpointError(f"{self.where}: rope_theta must be a positive number, got {shown(theta)}")
        if not _positive_number(fraction) or not fraction <= 1:
            raise CheckpointError(f"{self.where}: the rotary share must be in (0, 1], got {shown(fraction)}")
        return float(theta), float(fraction)

    def rope_scaling(self) -> dict[str, Any]:
        """Our rope_scaling settings for the config's linear or llama3 scaling ({} for none)."""
        params = self.data.get("rope_parameters")
        params = dict(params) if isinstance(params, dict) else {}
        scaling = self.data.get("rope_scaling")
        if isinstance(scaling, dict):
            params.update(scaling)
        kind = self._rope_kind(params)
        if kind not in ROPE_SCALINGS[1:]:
            return {}

        def number(key: str, default: float | None = None) -> float:
            value = params.get(key, default)
            if not _positive_number(value):
                raise CheckpointError(f"{self.where}: rope scaling {kind} needs a positive {key}, got {shown(value)}")
            return float(value)

        values: dict[str, Any] = {"rope_scaling": kind, "rope_factor": number("factor")}
        if kind == "llama3":
            values.update(rope_low_freq_factor=number("low_freq_factor"),
                          rope_high_freq_factor=number("high_freq_factor"),
                          rope_original_context=self._positions(params, "original_max_position_embeddings"))
            if values["rope_high_freq_factor"] <= values["rope_low_freq_factor"]:
                raise CheckpointError(f"{self.where}: rope scaling llama3 needs high_freq_factor over low_freq_factor")
        return values

    def _positions(self, params: dict[str, Any], key: str) -> int:
        """A count of positions in rope scaling: a whole number up to a billion (JSON may
        write it 8192.0; Infinity or 1e30 is no context a model was trained on)."""
        value = params.get(key)
        if not _positive_number(value) or value != int(value) or value > GIGA:
            raise CheckpointError(f"{self.where}: rope scaling needs {key} to be a whole number from 1 to "
                                  f"{GIGA:,}, got {shown(value)}")
        return int(value)

    def _rope_kind(self, params: dict[str, Any]) -> Any:
        """The RoPE type: rope_scaling's when it is an object, else rope_parameters'."""
        kind = params.get("rope_type", params.get("type", "default"))
        scaling = self.data.get("rope_scaling")
        if isinstance(scaling, dict):
            kind = scaling.get("rope_type", scaling.get("type", kind))
        return kind


def _positive_number(value: Any) -> bool:
    """A JSON number above 0 and finite (not a bool, NaN or Infinity)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value < float("inf")


def architecture_names(data: dict[str, Any]) -> list[str]:
    """config.json's architectures that are strings (none when it is not a list)."""
    architectures = data.get("architectures")
    return [a for a in architectures if isinstance(a, str)] if isinstance(architectures, list) else []


def family_of(data: dict[str, Any], where: str) -> str:
    """The family config.json names (model_type, checked against architectures)."""
    model_type = data.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise CheckpointError(f"{where}: model_type must be a string, got {shown(model_type)}")
    known = architecture_names(data)
    if model_type in ARCHITECTURES:
        if known and ARCHITECTURES[model_type] not in known:
            raise CheckpointError(f"{where}: unsupported architecture {shown(known[0])} (supported: {SUPPORTED})")
        return model_type
    named = known[0] if known else model_type
    raise CheckpointError(f"{where}: unsupported architecture {shown(named)} (supported: {SUPPORTED})")


def _refuse_experts(c: _Config) -> None:
    for key in ("num_experts", "num_local_experts", "moe_intermediate_size"):
        if c.data.get(key):
            raise c.refuse(f"a mixture of experts ({key})")


def _gpt2(c: _Config) -> dict[str, Any]:
    width = c.int("n_embd")
    if not c.flag("scale_attn_weights", True) or c.flag("scale_attn_by_inverse_layer_idx", False):
        raise c.refuse("attention scaling other than 1/sqrt(head width)")
    if c.flag("reorder_and_upcast_attn", False) or c.flag("add_cross_attention", False):
        raise c.refuse("reorder_and_upcast_attn or cross-attention")
    heads = c.int("n_head")
    return {"width": width, "heads": heads, "kv_heads": heads, "ffn": c.int("n_inner", 4 * width),
            "layers": c.int("n_layer"), "context": c.int("n_positions", 1024),
            "norm_eps": c.float("layer_norm_epsilon", 1e-5), "gelu_approximation": c.gelu("activation_function")}


def _gpt_neo(c: _Config) -> dict[str, Any]:
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


def _expand_attention_types(c: _Config, layers: int) -> list[Any]:
    """Each layer's attention kind from attention_types' [[kinds], repeat] pairs (by default
    global and local in turn). The pairs are counted against the layers before any is
    expanded: a repeat of 10**12 is refused, not built."""
    pairs = c.data.get("attention_types") or [[["global", "local"], max(layers // 2, 1)]]
    if not isinstance(pairs, list) or not all(
            isinstance(item, list) and len(item) == 2 and isinstance(item[0], list)
            and isinstance(item[1], int) and not isinstance(item[1], bool) and item[1] >= 0 for item in pairs):
        raise CheckpointError(f"{c.where}: attention_types must be [[kinds], repeat] pairs")
    total = sum(len(kinds) * repeat for kinds, repeat in pairs)
    if total != layers:
        raise CheckpointError(f"{c.where}: attention_types names {total:,} layers, the config has {layers}")
    return [kind for kinds, repeat in pairs for kind in list(kinds) * repeat]


def _gpt_neox(c: _Config) -> dict[str, Any]:
    width, heads = c.int("hidden_size"), c.int("num_attention_heads")
    theta, fraction = c.rope("rotary_emb_base", "rotary_pct")
    if "rotary_pct" not in c.data and not isinstance(c.data.get("rope_parameters"), dict):
        fraction = 0.25  # transformers' default for this family
    return {"width": width, "heads": heads, "kv_heads": heads, "ffn": c.int("intermediate_size", 4 * width),
            "layers": c.int("num_hidden_layers"), "context": c.int("max_position_embeddings", 2048),
            "norm_eps": c.float("layer_norm_eps", 1e-5), "gelu_approximation": c.gelu("hidden_act"),
            "rope_base": theta, "rotary_fraction": fraction, **c.rope_scaling(),
            "residual": "parallel" if c.flag("use_parallel_residual", True) else "sequential",
            "attention_bias": "all" if c.flag("attention_bias", True) else "none"}


def _llama(c: _Config) -> dict[str, Any]:
    width, heads = c.int("hidden_size"), c.int("num_attention_heads")
    head_dim = c.int("head_dim") if c.data.get("head_dim") else width // heads
    if head_dim * heads != width:
        raise c.refuse(f"head_dim {head_dim} × {heads} heads is not hidden_size {width}")
    if c.text("hidden_act", "silu") != "silu":
        raise c.refuse(f"hidden_act {shown(c.data.get('hidden_act'))} (supported: silu)")
    if c.family == "qwen2" and c.flag("use_sliding_window", False):
        raise c.refuse("use_sliding_window")
    theta, _ = c.rope()
    biases = "qkv" if c.family == "qwen2" else ("all" if c.flag("attention_bias", False) else "none")
    return {"width": width, "heads": heads, "kv_heads": c.int("num_key_value_heads", heads),
            "ffn": c.int("intermediate_size"), "layers": c.int("num_hidden_layers"),
            "context": c.int("max_position_embeddings", 2048), "norm_eps": c.float("rms_norm_eps", 1e-6),
            "rope_base": theta, "attention_bias": biases, "ffn_bias": c.flag("mlp_bias", False), **c.rope_scaling()}


_SETTINGS = {"gpt2": _gpt2, "gpt_neo": _gpt_neo, "gpt_neox": _gpt_neox, "llama": _llama, "qwen2": _llama}


def model_config(data: dict[str, Any], where: str) -> "ModelConfig":
    """Our model config for a transformers config.json (refusals name the field)."""
    family = family_of(data, where)
    c = _Config(data, where, family)
    _refuse_experts(c)
    values = _SETTINGS[family](c)
    if values["width"] % values["heads"] or values["heads"] % values["kv_heads"]:
        raise c.refuse(f"{values['heads']} heads over width {values['width']} and {values['kv_heads']} kv heads")
    values["tied_head"] = c.flag("tie_word_embeddings", TIED_BY_DEFAULT[family])
    return ModelConfig(family=family, dropout=0.0, **values)


# -- tensors --------------------------------------------------------------------------------
def _conv1d(get: Getter, name: str) -> "torch.Tensor":
    return get(name).t()  # Conv1D stores [in, out]; nn.Linear [out, in]


def _split_rows(tensor: "torch.Tensor", sizes: list[int]) -> list["torch.Tensor"]:
    return list(tensor.split(sizes, dim=0))


def _gpt2_tensors(get: Getter, config: "ModelConfig") -> dict[str, "torch.Tensor"]:
    width = config.width
    out = {"token_embedding.weight": get("wte.weight"), "position_embedding.weight": get("wpe.weight")}
    for i in range(config.layers):
        ours, theirs = f"blocks.{i}.", f"h.{i}."
        q, k, v = _split_rows(_conv1d(get, theirs + "attn.c_attn.weight"), [width] * 3)
        qb, kb, vb = _split_rows(get(theirs + "attn.c_attn.bias"), [width] * 3)
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


def _gpt_neo_tensors(get: Getter, config: "ModelConfig") -> dict[str, "torch.Tensor"]:
    out = {"token_embedding.weight": get("wte.weight"), "position_embedding.weight": get("wpe.weight")}
    for i in range(config.layers):
        ours, theirs = f"blocks.{i}.", f"h.{i}."
        attention = theirs + "attn.attention."
        out.update({
            ours + "attn_norm.weight": get(theirs + "ln_1.weight"), ours + "attn_norm.bias": get(theirs + "ln_1.bias"),
            ours + "attn.q_proj.weight": get(attention + "q_proj.weight"),
            ours + "attn.k_proj.weight": get(attention + "k_proj.weight"),
            ours + "attn.v_proj.weight": get(attention + "v_proj.weight"),
            ours + "attn.o_proj.weight": get(attention + "out_proj.weight"),
            ours + "attn.o_proj.bias": get(attention + "out_proj.bias"),
            ours + "ffn_norm.weight": get(theirs + "ln_2.weight"), ours + "ffn_norm.bias": get(theirs + "ln_2.bias"),
            ours + "ffn.up_proj.weight": get(theirs + "mlp.c_fc.weight"),
            ours + "ffn.up_proj.bias": get(theirs + "mlp.c_fc.bias"),
            ours + "ffn.down_proj.weight": get(theirs + "mlp.c_proj.weight"),
            ours + "ffn.down_proj.bias": get(theirs + "mlp.c_proj.bias"),
        })
    out.update({"final_norm.weight": get("ln_f.weight"), "final_norm.bias": get("ln_f.bias")})
    return out


def _neox_qkv(tensor: "torch.Tensor", config: "ModelConfig") -> list["torch.Tensor"]:
    """query_key_value's rows are per head [q, k, v] (each head_dim): split into q, k, v."""
    per_head = tensor.reshape(config.heads, 3, config.head_dim, *tensor.shape[1:])
    return [per_head[:, j].reshape(config.heads * config.head_dim, *tensor.shape[1:]) for j in range(3)]


def _gpt_neox_tensors(get: Getter, config: "ModelConfig") -> dict[str, "torch.Tensor"]:
    biased = config.attention_bias == "all"
    out = {"token_embedding.weight": get("embed_in.weight")}
    for i in range(config.layers):
        ours, theirs = f"blocks.{i}.", f"layers.{i}."
        out.update({
            ours + "attn_norm.weight": get(theirs + "input_layernorm.weight"),
            ours + "attn_norm.bias": get(theirs + "input_layernorm.bias"),
            ours + "ffn_norm.weight": get(theirs + "post_attention_layernorm.weight"),
            ours + "ffn_norm.bias": get(theirs + "post_attention_layernorm.bias"),
            ours + "attn.o_proj.weight": get(theirs + "attention.dense.weight"),
            ours + "ffn.up_proj.weight": get(theirs + "mlp.dense_h_to_4h.weight"),
            ours + "ffn.up_proj.bias": get(theirs + "mlp.dense_h_to_4h.bias"),
            ours + "ffn.down_proj.weight": get(theirs + "mlp.dense_4h_to_h.weight"),
            ours + "ffn.down_proj.bias": get(theirs + "mlp.dense_4h_to_h.bias"),
        })
        for proj, tensor in zip("qkv", _neox_qkv(get(theirs + "attention.query_key_value.weight"), config)):
            out[f"{ours}attn.{proj}_proj.weight"] = tensor
        if biased:
            for proj, tensor in zip("qkv", _neox_qkv(get(theirs + "attention.query_key_value.bias"), config)):
                out[f"{ours}attn.{proj}_proj.bias"] = tensor
            out[ours + "attn.o_proj.bias"] = get(theirs + "attention.dense.bias")
    out.update({"final_norm.weight": get("final_layer_norm.weight"), "final_norm.bias": get("final_layer_norm.bias")})
    return out


def _llama_tensors(get: Getter, config: "ModelConfig") -> dict[str, "torch.Tensor"]:
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
    return out


_TENSORS = {"gpt2": _gpt2_tensors, "gpt_neo": _gpt_neo_tensors, "gpt_neox": _gpt_neox_tensors,
            "llama": _llama_tensors, "qwen2": _llama_tensors}
# Where the base model's tensors sit in the causal-LM class's state dict.
BASE_PREFIX = {"gpt2": "transformer.", "gpt_neo": "transformer.", "gpt_neox": "gpt_neox.",
               "llama": "model.", "qwen2": "model."}
# Buffers older transformers versions saved beside the weights (masks and rotary
# frequencies, recomputed on load).
BUFFERS = (".attn.bias", ".attn.masked_bias", ".attention.bias", ".attention.masked_bias", ".rotary_emb.inv_freq")
HEAD = {"gpt2": "lm_head.weight", "gpt_neo": "lm_head.weight", "gpt_neox": "embed_out.weight",
        "llama": "lm_head.weight", "qwen2": "lm_head.weight"}


def our_tensors(tensors: Mapping[str, "torch.Tensor"], config: "ModelConfig") -> dict[str, "torch.Tensor"]:
    """Our named parameters from the folder's tensors by name. A base model saved without the
    causal-LM class's prefix is found too. A tensor the config has no place for (a layer
    past ``num_hidden_layers``) is refused, as llama.cpp refuses it: dropping it silently
    would compute another model than the folder holds."""
    family = config.family
    prefix = BASE_PREFIX[family]
    used: set[str] = set()

    def base(name: str) -> "torch.Tensor":
        for candidate in (prefix + name, name):
            tensor = tensors.get(candidate)
            if tensor is not None:
                used.add(candidate)
                return tensor
        raise CheckpointError(f"the weights have no tensor '{prefix + name}'")

    out = _TENSORS[family](base, config)
    head = tensors.get(HEAD[family])
    if not config.tied_head:
        if head is None:
            raise CheckpointError(f"the config declares an untied head, and the weights have no '{HEAD[family]}'")
        out["lm_head.weight"] = head
    _refuse_unused(tensors, used | {HEAD[family]}, config)
    return out


def _refuse_unused(tensors: Mapping[str, Any], used: set[str], config: "ModelConfig") -> None:
    """Every tensor of the folder is one the model uses, its head, or a buffer transformers
    recomputes on load."""
    extra = [name for name in tensors if name not in used and not name.endswith(BUFFERS)]
    if extra:
        layers = f"{config.layers} layer" + ("s" if config.layers != 1 else "")
        raise CheckpointError(f"unexpected tensor '{extra[0]}' ({len(extra)} in all): config.json declares a "
                              f"{ARCHITECTURES[config.family]} of {layers}, which has no place for it")
