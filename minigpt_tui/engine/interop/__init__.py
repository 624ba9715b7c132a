"""Interoperability with other tools: Hugging Face transformers folders and foreign files.

Modules: ``hf_tokenizer`` (our byte-level BPE as a ``tokenizer.json`` and back),
``hf_export`` (a portable model as a transformers folder), ``hf_import`` (a transformers
folder, one file or sharded, back to a portable model), ``foreign`` (what a transformers
folder, a nanoGPT ``ckpt.pt`` or a plain state-dict ``.pt``/``.pth`` holds, for ``inspect``
and the checkpoint browser; pickles are opened with ``torch.load(weights_only=True)`` only).

transformers itself is never imported here: the folders are written and read as the files
they are (JSON and safetensors), so the package needs no extra runtime dependency.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from minigpt_tui.engine.checkpoint.inspect import Inspection


def inspect_foreign(path: "Path | str") -> "Inspection | None":
    """The inspection of a foreign checkpoint, or None when ``path`` is not one."""
    from minigpt_tui.engine.interop.foreign import inspect_foreign as inspect

    return inspect(path)
