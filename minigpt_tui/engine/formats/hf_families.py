"""A transformers folder's config.json and tensors as our model's, for any family the
registry declares (:mod:`minigpt_tui.engine.families`).

:func:`model_config` reads config.json into a :class:`ModelConfig` and refuses, in one
line naming the field, what our model does not compute; :func:`our_tensors` renames and
reshapes the folder's tensors into our parameter names. Every move is a rename, a
transpose or a split: the values are the folder's, widened to the compute dtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import ModelConfig
from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.families import REGISTRY, Family, family
from minigpt_tui.engine.families.transformers_config import ConfigReader, shown

if TYPE_CHECKING:
    import torch

SUPPORTED = ", ".join(f.architecture for f in REGISTRY)
# Buffers older transformers versions saved beside the weights (masks and rotary
# frequencies, recomputed on load).
BUFFERS = (".attn.bias", ".attn.masked_bias", ".attention.bias", ".attention.masked_bias", ".rotary_emb.inv_freq")


def architecture_names(data: dict[str, Any]) -> list[str]:
    """config.json's architectures that are strings (none when it is not a list)."""
    architectures = data.get("architectures")
    return [a for a in architectures if isinstance(a, str)] if isinstance(architectures, list) else []


def family_of(data: dict[str, Any], where: str) -> Family:
    """The family config.json names (model_type, checked against architectures)."""
    model_type = data.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise CheckpointError(f"{where}: model_type must be a string, got {shown(model_type)}")
    known = architecture_names(data)
    declared = next((f for f in REGISTRY if f.model_type == model_type), None)
    if declared is not None:
        if known and declared.architecture not in known:
            raise CheckpointError(f"{where}: unsupported architecture {shown(known[0])} (supported: {SUPPORTED})")
        return declared
    named = known[0] if known else model_type
    raise CheckpointError(f"{where}: unsupported architecture {shown(named)} (supported: {SUPPORTED})")


def _refuse_experts(c: ConfigReader) -> None:
    for key in ("num_experts", "num_local_experts", "moe_intermediate_size"):
        if c.data.get(key):
            raise c.refuse(f"a mixture of experts ({key})")


def model_config(data: dict[str, Any], where: str) -> ModelConfig:
    """Our model config for a transformers config.json (refusals name the field)."""
    declared = family_of(data, where)
    c = ConfigReader(data, where, declared.architecture)
    _refuse_experts(c)
    values = declared.settings_from(c)
    if (values["width"] % values["heads"] and not values.get("head_dim_override")) or \
            values["heads"] % values["kv_heads"]:
        raise c.refuse(f"{values['heads']} heads over width {values['width']} and {values['kv_heads']} kv heads")
    values["tied_head"] = c.flag("tie_word_embeddings", declared.tied_by_default)
    return ModelConfig(family=declared.name, dropout=0.0, **values)


def our_tensors(tensors: Mapping[str, "torch.Tensor"], config: ModelConfig) -> dict[str, "torch.Tensor"]:
    """Our named parameters from the folder's tensors by name. A base model saved without the
    causal-LM class's prefix is found too. A tensor the config has no place for (a layer
    past ``num_hidden_layers``) is refused, as llama.cpp refuses it: dropping it silently
    would compute another model than the folder holds."""
    declared = family(config.family)
    prefix = declared.base_prefix
    used: set[str] = set()

    def base(name: str) -> "torch.Tensor":
        for candidate in (prefix + name, name):
            tensor = tensors.get(candidate)
            if tensor is not None:
                used.add(candidate)
                return tensor
        raise CheckpointError(f"the weights have no tensor '{prefix + name}'")

    out = declared.tensors_from(base, config)
    head = tensors.get(declared.head)
    if not config.tied_head:
        if head is None:
            raise CheckpointError(f"the config declares an untied head, and the weights have no '{declared.head}'")
        out["lm_head.weight"] = head
    _refuse_unused(tensors, used | {declared.head}, config)
    return out


def _refuse_unused(tensors: Mapping[str, Any], used: set[str], config: ModelConfig) -> None:
    """Every tensor of the folder is one the model uses, its head, or a buffer transformers
    recomputes on load."""
    extra = [name for name in tensors if name not in used and not name.endswith(BUFFERS)]
    if extra:
        layers = f"{config.layers} layer" + ("s" if config.layers != 1 else "")
        raise CheckpointError(f"unexpected tensor '{extra[0]}' ({len(extra)} in all): config.json declares a "
                              f"{family(config.family).architecture} of {layers}, which has no place for it")
