"""The line above the Checkpoints tabs: what is open, of which kind, and its files' sizes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.text import Text

from minigpt_tui.engine.printable import escape_controls
from minigpt_tui.widgets.tensor_table import human_bytes

KIND_LABELS = {
    "checkpoint-dir": "checkpoint folder",
    "hf-model": "transformers model folder",
    "torch-pickle": "PyTorch pickle (read with weights_only=True)",
    "portable-model": "portable model file",
    "training-state": "training-state file",
    "safetensors": "safetensors file (not made by minigpt-tui)",
}


def kind_label(kind: str) -> str:
    return KIND_LABELS.get(kind, kind)


def summary_text(inspection: Any, display: Callable[[Path], str], *, wide: bool) -> Text:
    """``display`` names a path for the user; ``wide`` adds header and data sizes."""
    out = Text()
    out.append(escape_controls(display(inspection.path)), style="bold")
    out.append(f"  {kind_label(inspection.kind)}", style="italic")
    for summary in inspection.files:
        out.append(f"\n{escape_controls(summary.name)}: ", style="bold")
        out.append(f"{human_bytes(summary.size)}, {summary.tensors} tensors")
        if wide:
            out.append(f", header {human_bytes(summary.header_bytes)}, data {human_bytes(summary.data_bytes)}")
    return out
