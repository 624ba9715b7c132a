"""The line above the Checkpoints tabs: what is open, of which kind, and its files' sizes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.text import Text

from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.file_uses import file_uses
from minigpt_tui.engine.session.display import counted, human_bytes

KIND_LABELS = {
    "checkpoint-dir": "checkpoint folder",
    "hf-model": "transformers model folder",
    "torch-pickle": "PyTorch pickle (loaded weights-only)",
    "nanogpt": "nanoGPT checkpoint (PyTorch pickle, loaded weights-only)",
    "portable-model": "portable model file",
    "training-state": "training-state file",
    "safetensors": "safetensors file (not made by minigpt-tui)",
}


def kind_label(kind: str) -> str:
    return KIND_LABELS.get(kind, kind)


def summary_text(inspection: Any, display: Callable[[Path], str], *, wide: bool, note: str | None = None) -> Text:
    """``display`` names a path for the user; ``wide`` adds header and data sizes; ``note``
    comes on the second line. A file from another tool says what works on it; more than two
    files (shards) get a line of totals before one line per file."""
    out = Text()
    out.append(escape_controls(display(inspection.path)), style="bold")
    out.append(f"  {kind_label(inspection.kind)}", style="italic")
    if note:
        out.append(f"\n{escape_controls(note)}", style="yellow")
    files = inspection.files
    if len(files) > 2:  # shards: their totals come first
        out.append(f"\n{len(files)} files: ", style="bold")
        out.append(f"{human_bytes(sum(f.size for f in files))}, {counted(sum(f.tensors for f in files), 'tensor')}")
    for summary in files:
        out.append(f"\n{escape_controls(summary.name)}: ", style="bold")
        out.append(f"{human_bytes(summary.size)}, {counted(summary.tensors, 'tensor')}")
        if wide and summary.header_bytes:  # a pickle has no header to size
            out.append(f", header {human_bytes(summary.header_bytes)}, data {human_bytes(summary.data_bytes)}")
    if file_uses(inspection) is not None:
        out.append("\nmade by another tool: browse, statistics (enter) and compare (m) work; "
                   "r and p say why it does not resume or generate", style="dim")
    return out
