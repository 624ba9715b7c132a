"""How our two families sit in transformers' ``LlamaForCausalLM`` and ``GPT2LMHeadModel``:
the config fields and the tensor names, in both directions.

Our attention (scores scaled by 1/sqrt(head_dim), causal softmax), llama's rotate-half
RoPE with base ``rope_base``, RMSNorm, SwiGLU, and gpt2's learned positions, LayerNorm and
GELU MLP are the functions those classes compute, so the mapping moves tensors only:

* llama: names change, values are the same arrays (both store ``nn.Linear`` weights
  as [out, in]); the head is the token table (``tie_word_embeddings``).
* gpt2: ``Conv1D`` stores [in, out], the transpose of our ``nn.Linear`` [out, in], and one
  ``c_attn`` projection holds q, k and v concatenated along its output axis. GELU
  ``approximate='tanh'`` is transformers' ``gelu_new``; exact GELU is ``gelu``.

Every move is a transpose, a split or a concatenation: exact, so export followed by
import gives back the same bits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from minigpt_tui import __version__
from minigpt_tui.engine.core.config import ModelConfig, RunConfig
from minigpt_tui.engine.core.errors import CheckpointError, ConfigError
from minigpt_tui.engine.core.tokenizer import BOS, EOS
from minigpt_tui.engine.formats.foreign_entries import shown

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.core.config import ModelConfig

ARCHITECTURES = {"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel"}
MODEL_TYPES = {"llama": "llama", "gpt2": "gpt2"}
GELU_NAMES = {"tanh": "gelu_new", "none": "gelu"}
# Activation names transformers gives the same two functions.
GELU_FROM_HF = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "none"}
# Our own record inside config.json: the settings transformers has no field for.
RECORD_KEY = "minigpt_tui"
TORCH_DTYPE_NAMES = {"F64": "float64", "F32": "float32"}


def table_name(family: str) -> str:
    return "model.embed_tokens.weight" if family == "llama" else "transformer.wte.weight"


HEAD_NAME = "lm_head.weight"


# -- config ---------------------------------------------------------------------------------
def hf_config(config: "ModelConfig", vocab_size: int, dtype: str, record: dict[str, Any]) -> dict[str, Any]:
    """config.json for the family's transformers class, tied head and our special ids."""
    torch_dtype = TORCH_DTYPE_NAMES[dtype]
    common = {
        "architectures": [ARCHITECTURES[config.family]],
        "model_type": MODEL_TYPES[config.family],
        "vocab_size": vocab_size,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": None,
        "tie_word_embeddings": True,
        "initializer_range": config.init_std,
        "use_cache": True,
        "dtype": torch_dtype,
        "torch_dtype": torch_dtype,  # the name transformers 4.x reads
    }
    if config.family == "llama":
        family = {
            "hidden_size": config.width,
            "intermediate_size": config.ffn,
            "num_hidden_layers": config.layers,
            "num_attention_heads": config.heads,
            "num_key_value_heads": config.kv_heads,
            "head_dim": config.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": config.context,
            "rms_norm_eps": config.norm_eps,
            "rope_theta": config.rope_base,  # transformers 4.x
            "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_base},
            "rope_scaling": None,
            "attention_bias": False,
            "mlp_bias": False,
            "attention_dropout": config.dropout,
            "pretraining_tp": 1,
        }
    else:
        if config.kv_heads != config.heads:
            raise CheckpointError(
                f"a gpt2-family model with {config.kv_heads} kv heads for {config.heads} query heads has no "
                "GPT2LMHeadModel form (GPT-2 has no grouped kv heads)"
            )
        family = {
            "n_embd": config.width,
            "n_head": config.heads,
            "n_layer": config.layers,
            "n_positions": config.context,
            "n_inner": config.ffn,
            "activation_function": GELU_NAMES[config.gelu_approximation],
            "layer_norm_epsilon": config.norm_eps,
            "attn_pdrop": config.dropout,
            "embd_pdrop": config.dropout,
            "resid_pdrop": config.dropout,
            "scale_attn_weights": True,
            "scale_attn_by_inverse_layer_idx": False,
            "reorder_and_upcast_attn": False,
            "add_cross_attention": False,
        }
    return {**common, **family, RECORD_KEY: record}


def export_record(config: "ModelConfig", identity: str, tokenizer_identity: str) -> dict[str, Any]:
    return {
        "format_version": 1,
        "producer": f"minigpt-tui {__version__}",
        "model_config": config.declared(),
        "model_identity": identity,
        "tokenizer_identity": tokenizer_identity,
    }


def _need(hf: dict[str, Any], key: str, where: str) -> Any:
    if key not in hf or hf[key] is None:
        raise CheckpointError(f"{where}: config.json has no '{key}'")
    return hf[key]


def _int(hf: dict[str, Any], key: str, where: str) -> int:
    value = _need(hf, key, where)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointError(f"{where}: config.json '{key}' is {shown(value)}, not an integer")
    return value


def _float(hf: dict[str, Any], key: str, default: float, where: str) -> float:
    value = hf.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) < float("inf"):
        raise CheckpointError(f"{where}: config.json '{key}' is {shown(value)}, not a finite number")
    return float(value)


def _text(hf: dict[str, Any], key: str, default: str, where: str) -> str:
    value = hf.get(key, default)
    if not isinstance(value, str):
        raise CheckpointError(f"{where}: config.json '{key}' is {shown(value)}, not a string")
    return value


def family_of(hf: dict[str, Any], where: str) -> str:
    """llama or gpt2, from model_type and architectures; anything else is refused."""
    model_type = hf.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise CheckpointError(f"{where}: config.json 'model_type' is {shown(model_type)}, not a string")
    listed = hf.get("architectures")
    architectures = [a for a in listed if isinstance(a, str)] if isinstance(listed, list) else []
    for family, architecture in ARCHITECTURES.items():
        if model_type == MODEL_TYPES[family]:
            if architectures and architecture not in architectures:
                raise CheckpointError(
                    f"{where}: unsupported architecture {shown(architectures[0])} "
                    "(supported: LlamaForCausalLM, GPT2LMHeadModel)"
                )
            return family
    named = architectures[0] if architectures else model_type
    raise CheckpointError(
        f"{where}: unsupported architecture {shown(named)} (supported: LlamaForCausalLM, GPT2LMHeadModel)"
    )


def model_config_from_hf(hf: dict[str, Any], where: str) -> "ModelConfig":
    """Our model config from a transformers config.json; refuses settings our model does
    not compute (naming the first)."""
    family = family_of(hf, where)
    record = hf.get(RECORD_KEY)
    saved = record.get("model_config") if isinstance(record, dict) else None
    saved = saved if isinstance(saved, dict) else {}
    defaults = ModelConfig()
    # Settings transformers has no field for come from our record when there is one.
    values: dict[str, Any] = {
        "family": family,
        "dropout": saved.get("dropout", 0.0),
        "init_std": hf.get("initializer_range", saved.get("init_std", defaults.init_std)),
        "gelu_approximation": saved.get("gelu_approximation", defaults.gelu_approximation),
        "rope_base": saved.get("rope_base", defaults.rope_base),
    }
    values.update(_FAMILY_SETTINGS[family](hf, _Refusal(where, ARCHITECTURES[family])))
    try:
        return RunConfig.from_dict({"preset": "converted", "model": values}).model
    except ConfigError as err:
        raise CheckpointError(f"{where}: the model's settings are not valid here: {err}") from None


@dataclass(frozen=True)
class _Refusal:
    """Names what a config asks for that our model does not compute."""

    where: str
    architecture: str

    def unsupported(self, what: str) -> CheckpointError:
        return CheckpointError(f"{self.where}: unsupported {self.architecture} setting: {what}")


def _llama_rope_base(hf: dict[str, Any], refusal: _Refusal) -> float:
    """RoPE's base (plain RoPE only), from rope_parameters (newer transformers) or rope_theta."""
    rope = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling")
    rope_type = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    if scaling or rope_type != "default":
        kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else rope_type
        raise refusal.unsupported(f"RoPE scaling {shown(kind)}")
    theta = rope.get("rope_theta") if isinstance(rope, dict) else None
    if theta is None:
        return _float(hf, "rope_theta", 10000.0, refusal.where)
    return _float({"rope_parameters.rope_theta": theta}, "rope_parameters.rope_theta", 10000.0, refusal.where)


def _llama_settings(hf: dict[str, Any], refusal: _Refusal) -> dict[str, Any]:
    where = refusal.where
    heads = _int(hf, "num_attention_heads", where)
    width = _int(hf, "hidden_size", where)
    kv_heads = _int(hf, "num_key_value_heads", where) if hf.get("num_key_value_heads") else heads
    if heads < 1:
        raise CheckpointError(f"{where}: config.json 'num_attention_heads' is {heads}, not a positive integer")
    head_dim = _int(hf, "head_dim", where) if hf.get("head_dim") else width // heads
    if head_dim * heads != width:
        raise refusal.unsupported(f"head_dim {head_dim} × {heads} heads is not hidden_size {width}")
    if _text(hf, "hidden_act", "silu", where) != "silu":
        raise refusal.unsupported(f"hidden_act {shown(hf.get('hidden_act'))} (only silu)")
    if hf.get("attention_bias") or hf.get("mlp_bias"):
        raise refusal.unsupported("attention or MLP biases")
    rope_base = _llama_rope_base(hf, refusal)
    return {
        "width": width,
        "heads": heads,
        "kv_heads": kv_heads,
        "ffn": _int(hf, "intermediate_size", where),
        "layers": _int(hf, "num_hidden_layers", where),
        "context": _int(hf, "max_position_embeddings", where),
        "rope_base": rope_base,
        "norm_eps": _float(hf, "rms_norm_eps", 1e-6, where),
    }


def _gpt2_settings(hf: dict[str, Any], refusal: _Refusal) -> dict[str, Any]:
    where = refusal.where
    width = _int(hf, "n_embd", where)
    heads = _int(hf, "n_head", where)
    activation = _text(hf, "activation_function", "gelu_new", where)
    if activation not in GELU_FROM_HF:
        raise refusal.unsupported(f"activation_function {shown(activation)} (only gelu_new, gelu_pytorch_tanh, gelu)")
    if not hf.get("scale_attn_weights", True) or hf.get("scale_attn_by_inverse_layer_idx"):
        raise refusal.unsupported("attention scaling other than 1/sqrt(head_dim)")
    if hf.get("add_cross_attention"):
        raise refusal.unsupported("cross-attention")
    return {
        "width": width,
        "heads": heads,
        "kv_heads": heads,
        "ffn": _int(hf, "n_inner", where) if hf.get("n_inner") else 4 * width,
        "layers": _int(hf, "n_layer", where),
        "context": _int(hf, "n_positions", where),
        "norm_eps": _float(hf, "layer_norm_epsilon", 1e-5, where),
        "gelu_approximation": GELU_FROM_HF[activation],
    }


# What each family's config.json says about the shape and numerics of the model.
_FAMILY_SETTINGS = {"llama": _llama_settings, "gpt2": _gpt2_settings}


# -- tensors --------------------------------------------------------------------------------
def _llama_pairs(config: "ModelConfig") -> list[tuple[str, str]]:
    """(our name, transformers name) for every learned llama tensor."""
    pairs = [("token_embedding.weight", "model.embed_tokens.weight")]
    for i in range(config.layers):
        ours, theirs = f"blocks.{i}.", f"model.layers.{i}."
        pairs.append((ours + "attn_norm.weight", theirs + "input_layernorm.weight"))
        for proj in ("q", "k", "v", "o"):
            pairs.append((f"{ours}attn.{proj}_proj.weight", f"{theirs}self_attn.{proj}_proj.weight"))
        pairs.append((ours + "ffn_norm.weight", theirs + "post_attention_layernorm.weight"))
        for proj in ("gate", "up", "down"):
            pairs.append((f"{ours}ffn.{proj}_proj.weight", f"{theirs}mlp.{proj}_proj.weight"))
    pairs.append(("final_norm.weight", "model.norm.weight"))
    return pairs


def to_hf(named: dict[str, "torch.Tensor"], config: "ModelConfig") -> list[tuple[str, "torch.Tensor"]]:
    """Our named learned tensors as transformers' state dict (the head left out: tied)."""
    import torch  # deferred: imports torch

    if config.family == "llama":
        return [(theirs, named[ours]) for ours, theirs in _llama_pairs(config)]
    out = [("transformer.wte.weight", named["token_embedding.weight"]),
           ("transformer.wpe.weight", named["position_embedding.weight"])]
    for i in range(config.layers):
        ours, theirs = f"blocks.{i}.", f"transformer.h.{i}."
        qkv = [named[f"{ours}attn.{p}_proj.weight"] for p in ("q", "k", "v")]
        qkv_bias = [named[f"{ours}attn.{p}_proj.bias"] for p in ("q", "k", "v")]
        out += [
            (theirs + "ln_1.weight", named[ours + "attn_norm.weight"]),
            (theirs + "ln_1.bias", named[ours + "attn_norm.bias"]),
            (theirs + "attn.c_attn.weight", torch.cat(qkv, dim=0).t().contiguous()),
            (theirs + "attn.c_attn.bias", torch.cat(qkv_bias, dim=0)),
            (theirs + "attn.c_proj.weight", named[ours + "attn.o_proj.weight"].t().contiguous()),
            (theirs + "attn.c_proj.bias", named[ours + "attn.o_proj.bias"]),
            (theirs + "ln_2.weight", named[ours + "ffn_norm.weight"]),
            (theirs + "ln_2.bias", named[ours + "ffn_norm.bias"]),
            (theirs + "mlp.c_fc.weight", named[ours + "ffn.up_proj.weight"].t().contiguous()),
            (theirs + "mlp.c_fc.bias", named[ours + "ffn.up_proj.bias"]),
            (theirs + "mlp.c_proj.weight", named[ours + "ffn.down_proj.weight"].t().contiguous()),
            (theirs + "mlp.c_proj.bias", named[ours + "ffn.down_proj.bias"]),
        ]
    out += [("transformer.ln_f.weight", named["final_norm.weight"]),
            ("transformer.ln_f.bias", named["final_norm.bias"])]
    return out


def hf_names(config: "ModelConfig") -> list[str]:
    """The transformers tensor names a model of ``config`` has (head excluded)."""
    if config.family == "llama":
        return [theirs for _, theirs in _llama_pairs(config)]
    names = ["transformer.wte.weight", "transformer.wpe.weight"]
    for i in range(config.layers):
        p = f"transformer.h.{i}."
        names += [p + n for n in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                  "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                  "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")]
    return names + ["transformer.ln_f.weight", "transformer.ln_f.bias"]


def from_hf(get: Callable[[str], "torch.Tensor"], config: "ModelConfig") -> dict[str, "torch.Tensor"]:
    """Our named learned tensors from transformers' (``get`` returns one by name)."""
    if config.family == "llama":
        return {ours: get(theirs) for ours, theirs in _llama_pairs(config)}
    width = config.width
    out = {"token_embedding.weight": get("transformer.wte.weight"),
           "position_embedding.weight": get("transformer.wpe.weight")}
    for i in range(config.layers):
        ours, theirs = f"blocks.{i}.", f"transformer.h.{i}."
        qkv = get(theirs + "attn.c_attn.weight").t()  # [3 * width, width]
        qkv_bias = get(theirs + "attn.c_attn.bias")
        for index, proj in enumerate(("q", "k", "v")):
            rows = slice(index * width, (index + 1) * width)
            out[f"{ours}attn.{proj}_proj.weight"] = qkv[rows].contiguous()
            out[f"{ours}attn.{proj}_proj.bias"] = qkv_bias[rows].contiguous()
        out.update({
            ours + "attn_norm.weight": get(theirs + "ln_1.weight"),
            ours + "attn_norm.bias": get(theirs + "ln_1.bias"),
            ours + "attn.o_proj.weight": get(theirs + "attn.c_proj.weight").t().contiguous(),
            ours + "attn.o_proj.bias": get(theirs + "attn.c_proj.bias"),
            ours + "ffn_norm.weight": get(theirs + "ln_2.weight"),
            ours + "ffn_norm.bias": get(theirs + "ln_2.bias"),
            ours + "ffn.up_proj.weight": get(theirs + "mlp.c_fc.weight").t().contiguous(),
            ours + "ffn.up_proj.bias": get(theirs + "mlp.c_fc.bias"),
            ours + "ffn.down_proj.weight": get(theirs + "mlp.c_proj.weight").t().contiguous(),
            ours + "ffn.down_proj.bias": get(theirs + "mlp.c_proj.bias"),
        })
    out["final_norm.weight"] = get("transformer.ln_f.weight")
    out["final_norm.bias"] = get("transformer.ln_f.bias")
    return out


def ignorable(name: str) -> bool:
    """Buffers older transformers versions saved beside the weights (recomputed on load)."""
    return name.endswith((".rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias"))
