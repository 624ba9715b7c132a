"""Models out of the portable model file, and a backbone into one.

:mod:`minigpt_tui.engine.formats.portable` reads and checks the file's records, tokenizer
and identity; here a model is built through its constructor (lookup and head one Parameter
when tied), every tensor the config declares is checked against the header before any
memory is given to it, and the weights are copied in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from minigpt_tui.engine.core.config import ModelConfig
from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.formats.portable import (
    ASSETS,
    BACKBONE,
    CONSTANTS,
    FORMAT_NAME,
    FORMAT_VERSION,
    IDENTITY_SCHEME,
    TABLE,
    PortableFile,
    check_entries,
    constant_layout,
    constants_tensor,
    model_identity,
    producer_record,
    read_backbone,
    read_portable,
    semantic_settings,
    tensor_records,
    torch_dtype,
)
from minigpt_tui.engine.formats.safetensors_format import dtype_name
from minigpt_tui.engine.formats.safetensors_read import LoadedFile
from minigpt_tui.engine.formats.safetensors_write import ProgressHook, json_metadata, write_safetensors
from minigpt_tui.engine.models.model import MiniGPT

if TYPE_CHECKING:
    from minigpt_tui.engine.core.library_tokenizer import LibraryTokenizer
    from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer

_MALFORMED = (KeyError, TypeError, AttributeError, ValueError, IndexError)


@dataclass(frozen=True)
class PortableModel:
    """A restored text model: built through the constructor, weights copied in, eval mode."""

    model: MiniGPT
    tokenizer: "ByteBPETokenizer | LibraryTokenizer | None"
    config: ModelConfig
    identity: str
    path: Path
    metadata: dict[str, Any] = field(default_factory=dict)
    sha256: str = ""

    @property
    def tied_alias(self) -> bool:
        """True when lookup and head are one live Parameter (not two equal arrays)."""
        return self.model.head_weight is self.model.token_embedding.weight


class DecoderBackbone(nn.Module):
    """Blocks and final norm (and gpt2's position table) with no vocabulary."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        decoder = MiniGPT(config, 0, dtype)
        del decoder.token_embedding  # a backbone has no vocabulary
        self.decoder = decoder

    def forward(self, inputs_embeds: Tensor) -> Tensor:
        """Hidden features [B, T, width] for input vectors [B, T, width]."""
        return self.decoder(None, inputs_embeds=inputs_embeds, skip_head=True).hidden


@dataclass(frozen=True)
class PortableBackbone:
    """A restored backbone-only export: hidden features from given input vectors."""

    backbone: DecoderBackbone
    config: ModelConfig
    identity: str
    path: Path
    metadata: dict[str, Any] = field(default_factory=dict)


# -- checks before memory is given --------------------------------------------------------------
def _check_learned(path: Path, loaded: LoadedFile, module: nn.Module, dtype: str, prefix: str = "") -> None:
    expected = {name.removeprefix(prefix): (tuple(p.shape), p) for name, p in module.named_parameters()}
    check_entries(path, loaded, expected, dtype)


def _meta_layout(config: ModelConfig, vocab_size: int | None, dtype: torch.dtype) -> nn.Module:
    """The model (or, without a vocabulary, the backbone) whose parameter names and shapes
    the file must hold; built under a meta device context, it allocates nothing."""
    if vocab_size is None:
        backbone = MiniGPT(config, 0, dtype)
        del backbone.token_embedding
        return backbone
    return MiniGPT(config, vocab_size, dtype)


def check_declared_shapes(path: Path, loaded: LoadedFile, config: ModelConfig, vocab_size: int | None,
                          dtype: str) -> None:
    """Every tensor the config declares, checked against the header before any memory is
    given to the model: the model is laid out on the meta device (shapes, no storage), and
    a config that declares more blocks than the file holds tensors is refused before even
    that."""
    learned = [e for e in loaded.header.entries if e.name not in ASSETS]
    if config.layers > len(learned):
        raise CheckpointError(
            f"{path}: the saved config declares {config.layers} blocks but the file holds {len(learned)} "
            "learned tensors: the config does not describe these weights"
        )
    with torch.device("meta"):
        module = _meta_layout(config, vocab_size, torch_dtype(dtype))
    expected = {name: (tuple(p.shape), None) for name, p in module.named_parameters()}
    check_entries(path, loaded, expected, dtype)


# -- text models ----------------------------------------------------------------------------------
def open_model_file(path: Path | str, *, verify_identity: bool | None = None) -> PortableFile:
    """A model file read and checked (:func:`read_portable`), its declared shapes checked
    against the header too: ready for a model to be built for it."""
    portable = read_portable(path, verify_identity=verify_identity)
    try:
        check_declared_shapes(portable.path, portable.loaded, portable.config, portable.tokenizer.vocab_size,
                              portable.dtype)
    except _MALFORMED as err:
        raise CheckpointError(f"{path}: malformed model file ({type(err).__name__}: {err})") from None
    return portable


def copy_into(portable: PortableFile, model: MiniGPT) -> None:
    """Copy the learned tensors into a model built for this config (names, shapes and
    dtypes checked first; nothing is copied if any differs)."""
    _check_learned(portable.path, portable.loaded, model, portable.dtype)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(portable.loaded.tensor(name))


def build_model(portable: PortableFile) -> MiniGPT:
    """A model built through its constructor (one shared table), weights copied in."""
    model = MiniGPT(portable.config, portable.tokenizer.vocab_size, torch_dtype(portable.dtype))
    copy_into(portable, model)
    model.eval()
    return model


def portable_model(portable: PortableFile) -> PortableModel:
    return PortableModel(build_model(portable), portable.tokenizer, portable.config, portable.identity,
                         portable.path, portable.records, portable.loaded.sha256)


def load_portable_model(path: Path | str) -> PortableModel:
    """Restore a text model from a model file or a checkpoint directory, on the CPU: built
    through its constructor so lookup and head are one Parameter, in eval mode. Any
    malformed file raises CheckpointError with one line naming the problem."""
    portable = open_model_file(path)
    try:
        return portable_model(portable)
    except _MALFORMED as err:
        raise CheckpointError(f"{path}: malformed model file ({type(err).__name__}: {err})") from None


# -- backbones ------------------------------------------------------------------------------------
def save_backbone(model: MiniGPT, path: Path | str, *, progress: ProgressHook | None = None) -> str:
    """Write the backbone alone: no token table, no vocabulary, no tokenizer."""
    path = Path(path)
    config = model.config
    learned = [(name, p.detach().cpu()) for name, p in model.named_parameters() if name != TABLE]
    tensors = learned + [(CONSTANTS, constants_tensor(config))]
    composition = {
        "kind": BACKBONE,
        "encoder": None,
        "backbone": {"kind": "minigpt-decoder", "family": config.family, "layers": config.layers},
        "head": None,
    }
    settings = semantic_settings(config, None)
    identity = model_identity(settings, composition, None, [], tensor_records(tensors))
    records = {
        "format": {"name": FORMAT_NAME, "version": FORMAT_VERSION},
        "composition": composition,
        "model_config": config.declared(),
        "constants": {"tensor": CONSTANTS, "dtype": "F64", "layout": constant_layout(config.family)},
        "tokenizer": None,
        "special_ids": None,
        "aliases": [],
        "parameters": {
            "tensors": len(learned),
            "scalars": sum(p.numel() for _, p in learned),
            "dtype": dtype_name(model.dtype),
        },
        "identity": {"scheme": IDENTITY_SCHEME, "model": identity},
        "producer": producer_record(),
    }
    write_safetensors(path, tensors, json_metadata(records), progress=progress)
    return identity


def load_backbone(path: Path | str) -> PortableBackbone:
    """Restore a backbone-only export: no vocabulary, no tokenizer needed."""
    file = read_backbone(path)
    try:
        check_declared_shapes(file.path, file.loaded, file.config, None, file.dtype)
        backbone = DecoderBackbone(file.config, torch_dtype(file.dtype))
        _check_learned(file.path, file.loaded, backbone, file.dtype, prefix="decoder.")
        with torch.no_grad():
            for name, param in backbone.named_parameters():
                param.copy_(file.loaded.tensor(name.removeprefix("decoder.")))
    except _MALFORMED as err:
        raise CheckpointError(f"{path}: malformed backbone file ({type(err).__name__}: {err})") from None
    backbone.eval()
    return PortableBackbone(backbone, file.config, file.identity, file.path, file.records)
