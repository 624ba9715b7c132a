"""Our model back in the transformers class of its family: the inverse of
:mod:`hf_families`' reading, for any family the registry declares.

:func:`family_tensors` renames, transposes and joins our parameters into the class's state
dict names (every move undoes one of the reader's, so reading the export back gives our
tensors bit for bit); :func:`family_config` writes the config.json fields the reader and
transformers read; :func:`unexpressed_setting` names a setting of the model that the file
written for it would not carry.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import settings_in_use
from minigpt_tui.engine.families import ACTIVATION_NAMES, family
from minigpt_tui.engine.formats.portable import TRAINING_ONLY_SETTINGS, UNTIED_HEAD

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.core.config import ModelConfig

Tensors = dict[str, "torch.Tensor"]


def dropped_head(config: "ModelConfig") -> dict[str, str]:
    """A tied head as safetensors.torch.save_model records the alias it leaves out."""
    declared = family(config.family)
    return {declared.head: declared.base_prefix + declared.table} if config.tied_head else {}


def family_tensors(ours: Tensors, config: "ModelConfig") -> list[tuple[str, "torch.Tensor"]]:
    """The causal-LM class's state dict (a tied head left out: transformers ties it again)."""
    declared = family(config.family)
    out = {declared.base_prefix + name: tensor.contiguous()
           for name, tensor in declared.tensors_to(ours, config).items()}
    if not config.tied_head:
        out[declared.head] = ours[UNTIED_HEAD].contiguous()
    return sorted(out.items())


def family_config(config: "ModelConfig", vocab_size: int, dtype: str, bos: int | None, eos: list[int]) -> dict[str, Any]:
    """config.json for the family's class, with every setting the model computes with."""
    declared = family(config.family)
    common: dict[str, Any] = {
        "architectures": [declared.architecture], "model_type": declared.model_type, "vocab_size": vocab_size,
        "dtype": dtype, "bos_token_id": bos, "eos_token_id": eos[0] if len(eos) == 1 else (eos or None),
        "tie_word_embeddings": config.tied_head, "use_cache": True,
    }
    return {**common, **declared.config_to(config, ACTIVATION_NAMES[config.gelu_approximation])}


def unexpressed_setting(config: "ModelConfig", read_back: "ModelConfig") -> str | None:
    """The first setting the model computes with that ``read_back`` (the config a written
    file reads as) does not give back; None when the file carries every one."""
    in_use = settings_in_use(dataclasses.asdict(config))
    for field in in_use:
        if field not in TRAINING_ONLY_SETTINGS and getattr(read_back, field) != getattr(config, field):
            return field
    return None
