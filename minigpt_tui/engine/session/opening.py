"""Open a model for generation and the views: ours, a transformers folder, nanoGPT's ckpt.pt.

``spec`` is a :class:`~.model_spec.ModelSpec` (or its text, parsed on entry): a model file,
a checkpoint folder, a run (``RUN``, ``RUN:latest|best|STEP``), a transformers model folder,
a GGUF file (``.gguf``) or a nanoGPT checkpoint (``.pt``, ``.pth``, ``.ckpt``). Ours keep
every bit; a folder from elsewhere is computed in ``dtype`` (float32 unless float64 is asked
for). A model without a tokenizer is refused in one line, the same wherever it is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.formats.gguf_file import read_gguf_header
from minigpt_tui.engine.formats.hf_families import model_config
from minigpt_tui.engine.formats.hf_import import read_json_file
from minigpt_tui.engine.formats.portable import without_tokenizer
from minigpt_tui.engine.models.gguf_models import gguf_config, open_gguf_model
from minigpt_tui.engine.models.hf_models import open_hf_model
from minigpt_tui.engine.models.nanogpt import open_nanogpt
from minigpt_tui.engine.session.model_spec import ModelSpec, SpecKind, as_spec, foreign_spec
from minigpt_tui.engine.session.runs import resolve_model_file

if TYPE_CHECKING:
    from pathlib import Path

    from minigpt_tui.engine.models.model_file import PortableModel


def _foreign(spec: ModelSpec | str) -> ModelSpec | None:
    """``spec`` when it names a model from elsewhere, else None; a text is never refused here
    (one too long to be a path is none)."""
    if isinstance(spec, ModelSpec):
        return spec if spec.is_foreign else None
    return foreign_spec(spec)


def _foreign_kind(spec: ModelSpec | str) -> SpecKind | None:
    foreign = _foreign(spec)
    return None if foreign is None else foreign.kind


def is_transformers_folder(spec: ModelSpec | str) -> bool:
    return _foreign_kind(spec) is SpecKind.TRANSFORMERS


def is_torch_checkpoint(spec: ModelSpec | str) -> bool:
    return _foreign_kind(spec) is SpecKind.NANOGPT


def is_gguf_file(spec: ModelSpec | str) -> bool:
    return _foreign_kind(spec) is SpecKind.GGUF


def is_foreign_model(spec: ModelSpec | str) -> bool:
    """Whether ``spec`` names a model from elsewhere (not one of ours)."""
    return _foreign_kind(spec) is not None


def peek_model(spec: ModelSpec | str) -> tuple[Any, int] | None:
    """(model config, vocabulary rows) of a transformers folder or a GGUF file, read from its
    config.json or header alone (no weights); None for other models."""
    foreign = _foreign(spec)
    if foreign is None:
        return None
    if foreign.kind is SpecKind.TRANSFORMERS:
        return _peek_transformers(foreign.path / "config.json")
    if foreign.kind is SpecKind.GGUF:
        return _peek_gguf(foreign.path)
    return None


def _peek_transformers(config_path: Path) -> tuple[Any, int] | None:
    data = read_json_file(config_path, "config.json: not a transformers model folder")
    vocab = data.get("vocab_size") if isinstance(data, dict) else None
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
        return None
    return model_config(data, str(config_path)), vocab


def _peek_gguf(path: Path) -> tuple[Any, int] | None:
    header = read_gguf_header(path)
    table = next((t for t in header.tensors if t.name == "token_embd.weight"), None)
    if table is None:
        return None
    return gguf_config(header), int(max(table.shape))


def open_model(spec: ModelSpec | str, runs_dir: Path | None = None, *, dtype: str | None = None,
               tokenizer: str | None = None) -> "PortableModel":
    """The model ``spec`` names, ready for inference (see the module doc); a text spec is
    parsed against ``runs_dir``. ``tokenizer`` names one for a nanoGPT checkpoint that has
    no meta.pkl beside it."""
    from minigpt_tui.engine.models.model_file import (  # deferred: imports torch
        load_portable_model,
    )

    spec = as_spec(spec, runs_dir)
    if spec.kind is SpecKind.TRANSFORMERS:
        return open_hf_model(spec.path, dtype=dtype or "float32")
    if spec.kind is SpecKind.GGUF:
        return open_gguf_model(spec.path, dtype=dtype or "float32")
    if spec.kind is SpecKind.NANOGPT:
        return open_nanogpt(spec.path, dtype=dtype or "float32", tokenizer=tokenizer)
    portable = load_portable_model(resolve_model_file(spec))
    if portable.tokenizer is None:
        raise without_tokenizer(portable.path, "generate text", GenerationError)
    return portable
