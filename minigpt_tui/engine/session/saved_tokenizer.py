"""The tokenizer saved with a model, found and read back for the Checkpoints screen's
tokenizer panel: our model file's merges tensor (read alone), or a transformers folder's
``tokenizer.json`` in our id layout. No torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from minigpt_tui.engine.core.errors import CheckpointError, TokenizerError
from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer
from minigpt_tui.engine.formats.hf_tokenizer import read_tokenizer_json
from minigpt_tui.engine.formats.portable import TOKENIZER_JSON, without_tokenizer
from minigpt_tui.engine.formats.safetensors_read import opening_errors, parse_record, read_header

MERGES_TENSOR = "tokenizer.merges"
HF_TOKENIZER_FILE = "tokenizer.json"


@dataclass(frozen=True)
class SavedTokenizer:
    """A tokenizer read back from a model file, with a note when its recorded identity is
    missing or differs."""

    tokenizer: ByteBPETokenizer
    note: str


def model_file_of(inspection: Any) -> Path | None:
    """The minigpt-tui model file of an inspected path (the file itself, or a checkpoint
    folder's), if it has one."""
    if inspection.kind == "portable-model":
        return Path(inspection.path)
    if inspection.kind == "checkpoint-dir":
        for summary in inspection.files:
            if summary.kind == "portable-model":
                return Path(summary.path)
    return None


def tokenizer_source_of(inspection: Any) -> Path | None:
    """Where an inspected path keeps a tokenizer: our model file, or a transformers folder's
    ``tokenizer.json``."""
    model_file = model_file_of(inspection)
    if model_file is not None:
        return model_file
    if inspection.kind == "hf-model":
        candidate = Path(inspection.path) / HF_TOKENIZER_FILE
        return candidate if candidate.is_file() else None
    return None


def read_saved_tokenizer(source: Path) -> SavedTokenizer:
    """The tokenizer saved beside a model: our model file's merges tensor (read alone), or
    a transformers folder's ``tokenizer.json`` mapped to our id layout."""
    if source.name == HF_TOKENIZER_FILE:
        return SavedTokenizer(read_tokenizer_json(source), f"read from {source.name}, in minigpt-tui's id layout")
    return _read_merges(source)


def _read_merges(model_file: Path) -> SavedTokenizer:
    header = read_header(model_file)
    entry = _merges_entry(header, model_file)
    with opening_errors(model_file, "a model file"), model_file.open("rb") as fh:
        fh.seek(header.data_start + entry.begin)
        raw = fh.read(entry.nbytes)
    if len(raw) != entry.nbytes:
        raise CheckpointError(f"{model_file}: the file ends inside {MERGES_TENSOR}")
    pairs = np.frombuffer(raw, dtype="<u4").reshape(entry.shape).tolist()
    try:
        tokenizer = ByteBPETokenizer(tuple((int(a), int(b)) for a, b in pairs))
    except TokenizerError as err:
        raise CheckpointError(f"the saved tokenizer is invalid: {err}") from None
    return SavedTokenizer(tokenizer, _identity_note(model_file, header, tokenizer))


def _merges_entry(header: Any, model_file: Path) -> Any:
    """The header entry of the merges tensor, refused unless it is U32 [n, 2]."""
    if not header.has(MERGES_TENSOR):
        if not header.has(TOKENIZER_JSON):
            raise without_tokenizer(model_file.name, "show one")
        raise CheckpointError(f"{model_file.name} keeps its tokenizer as {TOKENIZER_JSON} (a tokenizers-library "
                              "tokenizer, which generation uses): this panel lists minigpt-tui's own merges only")
    entry = header.entry(MERGES_TENSOR)
    if entry.dtype != "U32" or len(entry.shape) != 2 or entry.shape[1] != 2:
        raise CheckpointError(f"{MERGES_TENSOR} must be U32 [n, 2], found {entry.dtype} {list(entry.shape)}")
    return entry


def _identity_note(model_file: Path, header: Any, tokenizer: ByteBPETokenizer) -> str:
    """What to say about the merges against the tokenizer identity the metadata records."""
    try:
        recorded = parse_record(model_file, "tokenizer", header.metadata.get("tokenizer", "{}")).get("identity")
    except (CheckpointError, AttributeError):
        recorded = None
    if recorded is None:
        return "no tokenizer identity is recorded in the metadata"
    if recorded != tokenizer.identity:
        return "warning: these merges do not match the tokenizer identity recorded in the metadata"
    return ""
