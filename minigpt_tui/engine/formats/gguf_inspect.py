"""What a GGUF file holds, for ``inspect`` and the checkpoint browser, from its header alone.

Entries: each tensor with its GGML type, shape (torch order), bytes and offset in the data.
State records, grouped as the file's keys are: ``general`` (name, architecture, file type,
quantization version...), the architecture's own keys (``llama.block_count`` ...) and
``tokenizer``, where an array shows as its length and item type (``tokenizer.ggml.tokens``:
49,152 strings), never its items; a chat template shows as its text. ``--tensor NAME``
reads that one tensor (dequantized, or its plain values exactly) for its statistics.
``--verify`` checks what a GGUF file allows (it has no manifest): its header, that every
tensor's type can be read, and its SHA-256; ``--compare`` reads every tensor.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.formats.gguf_file import GGUFData, GGUFHeader, read_gguf_header, require_readable
from minigpt_tui.engine.formats.inspection import (
    EntryRecord,
    FileSummary,
    Inspection,
    InspectionKind,
    TensorRead,
)
from minigpt_tui.engine.formats.safetensors_read import file_sha256
from minigpt_tui.engine.formats.state_groups import InspectionState, StateGroup

BLOCK = re.compile(r"^blk\.(\d+)\.")
SHOWN_TEXT = 4000  # characters of a long string value (a chat template) shown as records


def _group(name: str) -> str:
    match = BLOCK.match(name)
    return f"layer {int(match.group(1))}" if match else "model"


def _record(header: GGUFHeader, key: str) -> Any:
    value, kind = header.metadata[key], header.types[key]
    if kind.startswith("array"):
        return {"items": len(value), "type": kind}
    if isinstance(value, str) and len(value) > SHOWN_TEXT:
        return value[:SHOWN_TEXT] + f"… ({len(value):,} characters)"
    return value


def _state(header: GGUFHeader, entries: list[EntryRecord]) -> dict[str, Any]:
    arch = header.metadata.get("general.architecture")
    groups: dict[str, dict[str, Any]] = {"general": {}, "architecture": {}, StateGroup.TOKENIZER: {}, "other": {}}
    for key in header.metadata:
        if key.startswith("general."):
            group = "general"
        elif isinstance(arch, str) and key.startswith(arch + "."):
            group = "architecture"
        elif key.startswith("tokenizer."):
            group = StateGroup.TOKENIZER
        else:
            group = "other"
        groups[group][key] = _record(header, key)
    totals: dict[str, dict[str, int]] = {}
    for e in entries:
        row = totals.setdefault(e.dtype, {"tensors": 0, "elements": 0, "bytes": 0})
        row["tensors"] += 1
        row["elements"] += e.elements
        row["bytes"] += e.bytes
    state: dict[str, Any] = {k: v for k, v in groups.items() if v}
    state[StateGroup.PARAMETERS] = {"tensors": len(entries), "scalars": sum(e.elements for e in entries),
                                    "by_type": totals, "version": header.version}
    return state


def inspect_gguf(path: Path | str) -> Inspection:
    path = Path(path).expanduser()
    header = read_gguf_header(path)
    entries = [EntryRecord(path.name, t.name, t.type_name, t.shape, t.elements, t.nbytes, t.offset,
                           t.offset + t.nbytes, _group(t.name)) for t in header.tensors]
    summary = FileSummary(path.name, path, InspectionKind.GGUF, header.size, header.data_start, len(entries),
                          sum(e.bytes for e in entries))
    metadata = {"format": "gguf", "version": header.version, "data_start": header.data_start}
    return Inspection(path, InspectionKind.GGUF, tuple(entries), (), InspectionState.of(_state(header, entries)),
                      metadata, None, (summary,))


def read_gguf_tensor(path: Path | str, name: str) -> TensorRead:
    import torch  # deferred: imports torch

    path = Path(path).expanduser()
    header = read_gguf_header(path)
    tensor = header.tensor(name.split(":", 1)[1] if name.startswith(path.name + ":") else name)
    values = torch.from_numpy(GGUFData(header).values(tensor.name))
    return TensorRead(path, tensor.name, tensor.type_name, tensor.shape, values, tensor.nbytes)


def gguf_tensor_values(path: Path | str) -> dict[str, Any]:
    """Every tensor of the file by its name, as torch tensors (for a comparison); a type
    that cannot be read is refused before any tensor is."""
    import torch  # deferred: imports torch

    header = read_gguf_header(Path(path).expanduser())
    for tensor in header.tensors:
        require_readable(header, tensor)
    data = GGUFData(header)
    return {t.name: torch.from_numpy(data.values(t.name)) for t in header.tensors}


def verify_gguf(path: Path | str) -> dict[str, Any]:
    """What can be verified of a GGUF file, which carries no hashes of its own: its header
    (every count, offset and size), that every tensor's type can be read, and the file's
    SHA-256 to compare with the one its publisher lists."""
    path = Path(path).expanduser()
    header = read_gguf_header(path)
    for tensor in header.tensors:
        require_readable(header, tensor)
    try:
        sha256 = file_sha256(header.path)
    except OSError as err:
        raise CheckpointError(f"cannot read {header.path}: {err.strerror or err}") from None
    return {"ok": True, "sha256": sha256, "tensors": len(header.tensors)}
