"""What checkpoints made by other tools hold, for ``inspect`` and the checkpoint browser:
which format a path is, and the module that reads it.

* A transformers model folder, or its ``model.safetensors.index.json``: :mod:`.foreign_hf`.
* A nanoGPT-style ``ckpt.pt`` or a plain PyTorch state dict (``.pt``, ``.pth``, ``.bin``,
  ``.ckpt``), loaded weights-only and never otherwise: :mod:`.foreign_pickle`.
* A GGUF file (llama.cpp, Ollama): :mod:`.gguf_inspect`.

Our own files and folders, and plain safetensors files, are :mod:`.inspect`'s.
"""

from __future__ import annotations

from pathlib import Path

from minigpt_tui.engine.formats.foreign_hf import HF_MODEL, hf_tensor_file, inspect_hf_folder, read_hf_tensor
from minigpt_tui.engine.formats.foreign_pickle import TORCH_PICKLE, inspect_torch_file, read_pickle_tensor
from minigpt_tui.engine.formats.gguf_inspect import inspect_gguf, read_gguf_tensor
from minigpt_tui.engine.formats.hf_import import is_hf_folder
from minigpt_tui.engine.formats.inspection import Inspection, InspectionKind, TensorRead
from minigpt_tui.engine.formats.safetensors_read import Header

PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
MANIFEST = "manifest.json"


def _foreign_source(path: Path) -> tuple[InspectionKind, Path] | None:
    """(HF_MODEL, folder) or (TORCH_PICKLE, file) for a path this module opens; None for
    anything else (our own files and folders, plain safetensors files)."""
    if path.is_dir():
        if (path / MANIFEST).exists() or not is_hf_folder(path):
            return None
        return HF_MODEL, path
    if path.is_file():
        if path.name.endswith(".safetensors.index.json"):
            return HF_MODEL, path.parent
        if path.suffix.lower() in PICKLE_SUFFIXES:
            return TORCH_PICKLE, path
        if path.suffix.lower() == ".gguf":
            return InspectionKind.GGUF, path
    return None


def inspect_foreign(path: Path | str) -> Inspection | None:
    """The inspection of a transformers folder or index, or of a PyTorch pickle file;
    None for anything else (our own files and folders, plain safetensors files)."""
    source = _foreign_source(Path(path).expanduser())
    if source is None:
        return None
    kind, where = source
    if kind == InspectionKind.GGUF:
        return inspect_gguf(where)
    return inspect_hf_folder(where) if kind == HF_MODEL else inspect_torch_file(where)


def foreign_tensor_file(path: Path | str, name: str) -> tuple[Path, Header, str] | None:
    """Where a tensor of a transformers folder or index lies in a safetensors shard (the
    shard, its header, the tensor's name there); None for anything else."""
    source = _foreign_source(Path(path).expanduser())
    if source is None or source[0] != HF_MODEL:
        return None
    return hf_tensor_file(source[1], name)


def read_foreign_tensor(path: Path | str, name: str) -> TensorRead | None:
    """One tensor of a transformers folder or index, or of a PyTorch pickle, by the name
    ``inspect_foreign`` lists (``FILE:NAME`` also accepted); None when ``path`` is none of
    these."""
    source = _foreign_source(Path(path).expanduser())
    if source is None:
        return None
    kind, where = source
    if kind == InspectionKind.GGUF:
        return read_gguf_tensor(where, name)
    if kind == TORCH_PICKLE:
        return read_pickle_tensor(where, name)
    return read_hf_tensor(where, name)
