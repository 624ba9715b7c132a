"""What a model family declares: everything the readers and writers of other tools' files
need to know about it, in one frozen record (:class:`Family`), made once per family module.

A family is a setting of our model's parts (``parts``) plus how its models are written by
others: transformers' class, config.json fields and state-dict names, and llama.cpp's GGUF
architecture where it has one. Every move between their tensors and ours is a rename, a
transpose, a split or a join, so reading what was written gives back the same bits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.core.config import ModelConfig
    from minigpt_tui.engine.families.transformers_config import ConfigReader

Tensors = dict[str, "torch.Tensor"]
Getter = Callable[[str], "torch.Tensor"]
# (a tensor by the source's name, the model's config) -> the tensors by the target's names
TensorsFrom = Callable[[Getter, "ModelConfig"], Tensors]
TensorsTo = Callable[[Mapping[str, "torch.Tensor"], "ModelConfig"], Tensors]

# transformers' activation names for our two GELUs, declared once: reading accepts each
# name, writing uses the first name of each.
GELU_NAMES = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "none"}
ACTIVATION_NAMES = {ours: next(name for name, value in GELU_NAMES.items() if value == ours)
                    for ours in dict.fromkeys(GELU_NAMES.values())}


@dataclass(frozen=True)
class GGUFLayout:
    """A family as llama.cpp's GGUF architecture of the same name writes it."""

    architecture: str  # general.architecture
    norm_eps_key: str  # after "{architecture}.": the norm's epsilon
    norm_eps_default: float
    grouped_kv: bool  # reads attention.head_count_kv (else kv heads = heads)
    implied: Mapping[str, Any]  # our settings the architecture fixes (GPT-2: tanh GELU)
    tensors_from: TensorsFrom  # llama.cpp's names -> ours
    tensors_to: TensorsTo  # ours -> llama.cpp's names (every tensor the file holds)
    # The optional settings its metadata carries: "head_dim" (attention.key_length, a head
    # width apart from the width / heads), "rotary_share" (rope.dimension_count under the
    # head's width), "sliding_window" (attention.sliding_window, over every block).
    metadata: tuple[str, ...] = ()


@dataclass(frozen=True)
class TokenizerDefaults:
    """The tokenizer.json models of the family usually ship: ``byte_level`` (GPT-2's regex),
    ``byte_level_split`` (a Split regex, then byte level) or ``metaspace`` (SentencePiece
    style, byte fallback, BOS added), and its BOS and EOS tokens."""

    kind: str
    bos: str
    eos: str


@dataclass(frozen=True)
class Family:
    """One model family, declared once (see the package's doc for what each field serves)."""

    name: str  # ours, and transformers' model_type
    parts: Mapping[str, Any]  # our model's parts (core.config.FAMILY_PARTS[name])
    architecture: str  # transformers' causal-LM class
    tied_by_default: bool  # transformers' tie_word_embeddings when config.json is silent
    settings_from: Callable[["ConfigReader"], dict[str, Any]]  # config.json -> our settings
    config_to: Callable[["ModelConfig", str], dict[str, Any]]  # our settings -> config.json (with the activation name)
    base_prefix: str  # where the base model's tensors sit in the class's state dict
    table: str  # the token table, under the base prefix
    head: str  # an untied head's name in the state dict
    tensors_from: TensorsFrom  # the base model's names (no prefix) -> ours
    tensors_to: TensorsTo  # ours -> the base model's names (no prefix)
    constants: tuple[str, ...]  # the settings our model file keeps as F64 constants
    gguf: GGUFLayout | None  # None: llama.cpp has no such architecture
    tokenizer: TokenizerDefaults
    example: Mapping[str, Any]  # config.json fields of a tiny model that sets each quirk (tests)
    transformers_type: str = ""  # transformers' model_type where it is not our name (gemma3: gemma3_text)

    @property
    def model_type(self) -> str:
        return self.transformers_type or self.name

    @property
    def rotary(self) -> bool:
        return self.parts.get("positions") == "rotary"
