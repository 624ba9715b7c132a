"""``export`` and ``convert`` as use cases: a model of any kind written as a transformers
folder or a GGUF file, and a transformers folder of any declared family made into our
model file. The command line (and the app, should it offer them) calls these; what each
family writes and reads is declared once in :mod:`minigpt_tui.engine.families`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.errors import ConfigError
from minigpt_tui.engine.formats.hf_export import FORMATS as HF_FORMATS
from minigpt_tui.engine.formats.hf_export import HFExport, export_hf, prepare_output_folder
from minigpt_tui.engine.formats.hf_import import Conversion
from minigpt_tui.engine.models.gguf_export import QUANTS, GGUFExport, export_gguf
from minigpt_tui.engine.models.hf_models import convert_hf
from minigpt_tui.engine.session.opening import is_foreign_model, open_model
from minigpt_tui.engine.session.runs import resolve_model_file

if TYPE_CHECKING:
    from minigpt_tui.engine.models.model_file import PortableModel

__all__ = ["DEFAULT_QUANT", "EXPORT_FORMATS", "QUANTS", "Conversion", "GGUFExport", "HFExport", "check_export",
           "convert_folder", "export_gguf_file", "export_transformers", "model_file_path", "open_for_export"]

EXPORT_FORMATS = (*HF_FORMATS, "gguf")
DEFAULT_QUANT = "f16"  # GGUF weights when no quantization is asked for


def check_export(format_name: str, quant: str | None, out: Path) -> str | None:
    """The quantization an export will use (None for a transformers folder), every option
    checked and the target refused before a model is read."""
    if format_name not in EXPORT_FORMATS:
        raise ConfigError(f"--format {format_name!r} is not supported (choose from {', '.join(EXPORT_FORMATS)})")
    if quant is not None and format_name != "gguf":
        raise ConfigError(f"--quant applies to --format gguf only: --format {format_name} keeps the model's own dtype")
    if format_name == "gguf" and (quant or DEFAULT_QUANT) not in QUANTS:
        raise ConfigError(f"--quant {quant!r} is not supported (choose from {', '.join(QUANTS)})")
    prepare_output_folder(out)  # refuse before reading a large model
    return (quant or DEFAULT_QUANT) if format_name == "gguf" else None


def model_file_path(spec: str, runs_dir: Path | None) -> Path:
    """Our model file for ``spec``: a file, a folder holding one, a checkpoint or a run."""
    path = Path(spec).expanduser()
    if path.is_dir() and (path / "model.safetensors").is_file():
        return path / "model.safetensors"
    return resolve_model_file(spec, runs_dir)


def open_for_export(spec: str, runs_dir: Path | None) -> "PortableModel":
    """The model ``spec`` names, ours bit for bit or one from elsewhere as it opens."""
    from minigpt_tui.engine.models.model_file import (  # deferred: imports torch
        load_portable_model,
    )

    if is_foreign_model(spec):  # a transformers folder, GGUF file or nanoGPT checkpoint
        return open_model(spec, runs_dir)
    return load_portable_model(model_file_path(spec, runs_dir))


def export_transformers(portable: "PortableModel", out: Path) -> HFExport:
    """Write ``portable`` at ``out`` as a folder of its family's transformers class."""
    return export_hf(portable, out)


def export_gguf_file(portable: "PortableModel", out: Path, quant: str,
                     progress: Callable[[int, int], None] | None = None) -> GGUFExport:
    """Write ``portable`` at ``out`` as a GGUF file of its family's architecture, in ``quant``."""
    return export_gguf(portable, out, quant, progress=progress)


def convert_folder(source: str, out: str, tokenizer_spec: str | None, runs_dir: Path | None) -> Conversion:
    """A transformers folder as our model file at ``out``; the tokenizer from
    ``tokenizer_spec`` (a path, or a model spec such as ``RUN:best``) when given."""
    tokenizer: Any = tokenizer_spec
    if tokenizer is not None and not Path(tokenizer).expanduser().exists():
        tokenizer = model_file_path(tokenizer, runs_dir)
    return convert_hf(source, out, tokenizer_path=tokenizer)
