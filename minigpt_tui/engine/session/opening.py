"""Open a model for generation and the views: ours, a transformers folder, nanoGPT's ckpt.pt.

``spec`` is a model file, a checkpoint folder, a run (``RUN``, ``RUN:latest|best|STEP``), a
transformers model folder, a GGUF file (``.gguf``) or a nanoGPT checkpoint (``.pt``, ``.pth``,
``.ckpt``). Ours keep every bit; a folder from elsewhere is computed in
``dtype`` (float32 unless float64 is asked for). A model without a tokenizer is refused
in one line, the same wherever it is opened.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.formats.gguf_file import read_gguf_header
from minigpt_tui.engine.formats.hf_families import model_config
from minigpt_tui.engine.formats.hf_import import is_hf_folder, read_json_file
from minigpt_tui.engine.formats.portable import without_tokenizer
from minigpt_tui.engine.session.runs import resolve_model_file
from minigpt_tui.engine.models.gguf_models import gguf_config, open_gguf_model
from minigpt_tui.engine.models.hf_models import open_hf_model
from minigpt_tui.engine.models.nanogpt import open_nanogpt

TORCH_SUFFIXES = (".pt", ".pth", ".ckpt")

if TYPE_CHECKING:
    from minigpt_tui.engine.models.model_file import PortableModel


def is_transformers_folder(spec: str) -> bool:
    return len(spec) <= 4096 and is_hf_folder(Path(spec).expanduser())


def is_torch_checkpoint(spec: str) -> bool:
    path = Path(spec).expanduser()
    return len(spec) <= 4096 and path.suffix in TORCH_SUFFIXES and path.is_file()


def is_gguf_file(spec: str) -> bool:
    return len(spec) <= 4096 and spec.lower().endswith(".gguf") and Path(spec).expanduser().is_file()


def is_foreign_model(spec: str) -> bool:
    """Whether ``spec`` names a model from elsewhere (not one of ours)."""
    return is_transformers_folder(spec) or is_gguf_file(spec) or is_torch_checkpoint(spec)


def peek_model(spec: str) -> tuple[Any, int] | None:
    """(model config, vocabulary rows) of a transformers folder or a GGUF file, read from its
    config.json or header alone (no weights); None for other models."""
    if is_transformers_folder(spec):
        path = Path(spec).expanduser() / "config.json"
        data = read_json_file(path, "config.json: not a transformers model folder")
        vocab = data.get("vocab_size") if isinstance(data, dict) else None
        if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
            return None
        return model_config(data, str(path)), vocab
    if is_gguf_file(spec):
        header = read_gguf_header(Path(spec).expanduser())
        table = next((t for t in header.tensors if t.name == "token_embd.weight"), None)
        if table is None:
            return None
        return gguf_config(header), int(max(table.shape))
    return None


def open_model(spec: str, runs_dir: Path, *, dtype: str | None = None,
               tokenizer: str | None = None) -> "PortableModel":
    """The model ``spec`` names, ready for inference (see the module doc). ``tokenizer``
    names one for a nanoGPT checkpoint that has no meta.pkl beside it."""
    from minigpt_tui.engine.models.model_file import (  # deferred: imports torch
        load_portable_model,
    )

    if is_transformers_folder(spec):
        return open_hf_model(spec, dtype=dtype or "float32")
    if is_gguf_file(spec):
        return open_gguf_model(spec, dtype=dtype or "float32")
    if is_torch_checkpoint(spec):
        return open_nanogpt(spec, dtype=dtype or "float32", tokenizer=tokenizer)
    portable = load_portable_model(resolve_model_file(spec, runs_dir))
    if portable.tokenizer is None:
        raise without_tokenizer(portable.path, "generate text", GenerationError)
    return portable
