"""The records of an inspection: what a file or checkpoint holds, entry by entry, read
from headers alone, in one shape for our files and other tools' (transformers, torch pickles,
GGUF). :mod:`.inspect` makes them for our files; :mod:`.foreign` and :mod:`.gguf_inspect` for
the others."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minigpt_tui.engine.formats.integrity import Integrity
from minigpt_tui.engine.formats.state_groups import InspectionState
from minigpt_tui.engine.core.errors import CheckpointError

MAX_BINS = 10_000  # a histogram wider than any terminal; more only costs memory
class InspectionKind(enum.StrEnum):
    """What an opened path is (its value is what ``inspect --json`` prints as ``kind``)."""

    PORTABLE_MODEL = "portable-model"
    TRAINING_STATE = "training-state"
    CHECKPOINT_DIR = "checkpoint-dir"
    SAFETENSORS = "safetensors"  # made by another program
    HF_MODEL = "hf-model"  # a transformers folder
    TORCH_PICKLE = "torch-pickle"  # a .pt/.pth/ckpt.pt, read with weights_only=True
    NANOGPT = "nanogpt"  # a nanoGPT ckpt.pt (model args beside the weights)
    GGUF = "gguf"  # a llama.cpp / Ollama model file


PORTABLE_MODEL = InspectionKind.PORTABLE_MODEL
TRAINING_STATE = InspectionKind.TRAINING_STATE
CHECKPOINT_DIR = InspectionKind.CHECKPOINT_DIR
SAFETENSORS = InspectionKind.SAFETENSORS


@dataclass(frozen=True)
class EntryRecord:
    file: str
    name: str
    dtype: str
    shape: tuple[int, ...]
    elements: int
    bytes: int
    begin: int  # offsets within the data section
    end: int
    group: str

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "elements": self.elements,
            "bytes": self.bytes,
            "begin": self.begin,
            "end": self.end,
            "group": self.group,
        }


@dataclass(frozen=True)
class FileSummary:
    name: str
    path: Path
    kind: InspectionKind
    size: int
    header_bytes: int
    tensors: int
    data_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.path),
            "kind": self.kind,
            "size": self.size,
            "header_bytes": self.header_bytes,
            "tensors": self.tensors,
            "data_bytes": self.data_bytes,
        }


@dataclass(frozen=True)
class Inspection:
    path: Path
    kind: InspectionKind
    entries: tuple[EntryRecord, ...]
    aliases: tuple[dict[str, Any], ...]
    state: InspectionState
    metadata: dict[str, Any]  # raw metadata: a file's str->str map; a folder's per file
    integrity: Integrity | None
    files: tuple[FileSummary, ...] = field(default_factory=tuple)

    def entry(self, name: str) -> EntryRecord:
        for e in self.entries:
            if e.name == name:
                return e
        raise CheckpointError(f"{self.path}: no tensor named '{name}'")

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "kind": self.kind,
            "files": [f.to_json() for f in self.files],
            "entries": [e.to_json() for e in self.entries],
            "aliases": list(self.aliases),
            "state": self.state.to_json(),
            "metadata": self.metadata,
            "integrity": self.integrity.to_json() if self.integrity is not None else None,
        }




@dataclass(frozen=True)
class TensorRead:
    """One tensor read on its own, whatever format held it, with what its file records."""

    file: Path
    name: str
    dtype: str  # the format's label (safetensors dtype, or torch's name for a pickled one)
    shape: tuple[int, ...]
    tensor: Any  # torch.Tensor (torch is imported lazily)
    bytes_read: int
