"""What a checkpoint holds, read from headers alone; one tensor's statistics on demand;
the differences between two checkpoints are :mod:`.compare`, the records :mod:`.inspection`.

:func:`inspect_path` opens any safetensors file (ours or not), a checkpoint folder or a
run folder (its latest checkpoint), validates each header as the format requires and
never reads tensor data. Our files carry a readable copy of their state records in the
metadata, so grouping them by meaning needs no tensor data either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.core.files import path_exists, require_file_or_folder
from minigpt_tui.engine.formats.checkpoint_folder import (
    MANIFEST,
    TRAINING_FILE,
    latest_in_folder,
    verify_checkpoint,
)
from minigpt_tui.engine.formats.checkpoint_folder import (
    TRAINING_STATE_FORMAT as STATE_FORMAT,
)
from minigpt_tui.engine.formats.foreign import foreign_tensor_file, inspect_foreign, read_foreign_tensor
from minigpt_tui.engine.formats.inspection import (
    CHECKPOINT_DIR,
    MAX_BINS,
    PORTABLE_MODEL,
    SAFETENSORS,
    TRAINING_STATE,
    EntryRecord,
    FileSummary,
    Inspection,
    InspectionKind,
)
from minigpt_tui.engine.formats.portable import FORMAT_NAME as MODEL_FORMAT
from minigpt_tui.engine.formats.portable import MODEL_FILE
from minigpt_tui.engine.formats.bounded_json import (
    JSONRefused,
    load_json,
)
from minigpt_tui.engine.formats.safetensors_read import (
    RECORD_DEPTH,
    Header,
    read_header,
)
from minigpt_tui.engine.formats.state_groups import (
    InspectionState,
    StateGroup,
    group_of,
)
from minigpt_tui.engine.formats.streamed_statistics import Going, TensorSource, file_source, summarise, tensor_source


def _records(header: Header) -> dict[str, Any]:
    """Metadata values that are JSON (nested at most RECORD_DEPTH deep, numbers Python can
    hold), parsed; anything else kept as the raw string."""
    out: dict[str, Any] = {}
    for key, text in header.metadata.items():
        try:
            out[key] = load_json(text, RECORD_DEPTH)
        except JSONRefused:
            out[key] = text
    return out


def _object(value: Any) -> dict[str, Any]:
    """A record that should be a JSON object; anything else (a damaged file) reads as empty."""
    return value if isinstance(value, dict) else {}


def _kind(records: dict[str, Any]) -> InspectionKind:
    fmt = records.get("format")
    name = fmt.get("name") if isinstance(fmt, dict) else None
    if name == MODEL_FORMAT:
        return PORTABLE_MODEL
    if name == STATE_FORMAT:
        return TRAINING_STATE
    return SAFETENSORS


def _entry_group(kind: InspectionKind, name: str) -> str:
    if kind == TRAINING_STATE:
        return group_of(name)
    if kind == PORTABLE_MODEL:
        if name == "constants":
            return "constants"
        if name.startswith("tokenizer."):
            return "tokenizer"
        return "learned"
    return "tensors"


def _model_state(records: dict[str, Any]) -> InspectionState:
    config = _object(records.get("model_config"))
    layout = _object(records.get("constants")).get("layout")
    tokenizer = _object(records.get("tokenizer"))
    return InspectionState.of({
        StateGroup.IDENTITIES: {
            "model": _object(records.get("identity")).get("model"),
            "tokenizer": tokenizer.get("identity"),
        },
        StateGroup.COMPOSITION: _object(records.get("composition")),
        StateGroup.MODEL_CONFIG: config,
        StateGroup.CONSTANTS: {str(name): config.get(str(name)) for name in layout} if isinstance(layout, list) else {},
        StateGroup.TOKENIZER: tokenizer,
        StateGroup.SPECIAL_IDS: _object(records.get("special_ids")),
        StateGroup.PARAMETERS: _object(records.get("parameters")),
        StateGroup.PROVENANCE: _object(records.get("provenance")),
    })


def _training_state(records: dict[str, Any]) -> InspectionState:
    state: dict[str, dict[str, Any]] = {}
    saved = records.get("records")
    if isinstance(saved, dict):
        for group, values in saved.items():
            state[group] = dict(values) if isinstance(values, dict) else {"value": values}
    state[StateGroup.IDENTITIES] = dict(_object(records.get("identities")))
    state[StateGroup.ENVELOPE] = dict(_object(records.get("envelope")))
    state[StateGroup.CONTINUATION] = dict(_object(records.get("continuation")))
    return InspectionState.of(state)


def _aliases(records: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    aliases = records.get("aliases")
    return tuple(a for a in aliases if isinstance(a, dict)) if isinstance(aliases, list) else ()


def _inspect_file(path: Path, label: str) -> tuple[Header, dict[str, Any], str, list[EntryRecord]]:
    header = read_header(path)
    records = _records(header)
    kind = _kind(records)
    entries = [
        EntryRecord(label, e.name, e.dtype, e.shape, e.elements, e.nbytes, e.begin, e.end, _entry_group(kind, e.name))
        for e in header.entries
    ]
    return header, records, kind, entries


def _summary(path: Path, label: str, kind: InspectionKind, header: Header) -> FileSummary:
    data = sum(e.nbytes for e in header.entries)
    return FileSummary(label, path, kind, header.file_size, header.header_bytes, len(header.entries), data)


def _folder_for(path: Path) -> Path:
    """A run folder inspects as its latest checkpoint."""
    if (path / MANIFEST).exists() or (path / MODEL_FILE).exists() or (path / TRAINING_FILE).exists():
        return path
    latest = latest_in_folder(path)
    if latest is not None:
        return latest
    raise CheckpointError(f"{path} holds no checkpoint (no manifest.json, no safetensors files)")


# How each of our own file kinds reads into state groups (other kinds show none).
_STATE_READERS = {PORTABLE_MODEL: _model_state, TRAINING_STATE: _training_state}


def inspect_path(path: Path | str, *, verify_hashes: bool = False) -> Inspection:
    """Header-only inspection of a safetensors file, a checkpoint folder or a run folder.

    ``verify_hashes`` also reads the files to check them against the manifest (integrity);
    without it integrity covers presence and sizes only."""

    path = Path(path).expanduser()
    if not path_exists(path):
        raise CheckpointError(f"no such file or folder: {path}")
    require_file_or_folder(path, "a checkpoint, a model file or a folder")

    foreign = inspect_foreign(path)  # transformers folders, sharded indexes, .pt/.pth pickles
    if foreign is not None:
        return foreign
    if path.is_file():
        return _inspect_own_file(path)
    return _inspect_folder(_folder_for(path), verify_hashes)


def _inspect_own_file(path: Path) -> Inspection:
    """One of our safetensors files (a model file, a training state, or any other)."""
    header, records, kind, entries = _inspect_file(path, path.name)
    aliases = _aliases(records) if kind == PORTABLE_MODEL else ()
    reader = _STATE_READERS.get(kind)
    state = reader(records) if reader is not None else InspectionState()
    return Inspection(
        path, kind, tuple(entries), aliases, state, dict(header.metadata), None, (_summary(path, path.name, kind, header),)
    )


def _inspect_folder(folder: Path, verify_hashes: bool) -> Inspection:
    """A checkpoint folder: its model file and training state together, and its integrity."""
    entries: list[EntryRecord] = []
    metadata: dict[str, Any] = {}
    state = InspectionState()
    aliases: tuple[dict[str, Any], ...] = ()
    files = []
    for name in (MODEL_FILE, TRAINING_FILE):
        file_path = folder / name
        if not file_path.is_file():
            continue
        header, records, kind, file_entries = _inspect_file(file_path, name)
        entries += file_entries
        metadata[name] = dict(header.metadata)
        files.append(_summary(file_path, name, kind, header))
        if kind == PORTABLE_MODEL:
            aliases = _aliases(records)
        if kind in _STATE_READERS:
            state = state.merged(_STATE_READERS[kind](records))
    if not files:
        raise CheckpointError(f"{folder} holds neither {MODEL_FILE} nor {TRAINING_FILE}")
    integrity = verify_checkpoint(folder, hashes=verify_hashes)
    return Inspection(folder, CHECKPOINT_DIR, tuple(entries), aliases, state, metadata, integrity, tuple(files))


# -- one tensor on demand -------------------------------------------------------------------------
def _locate(path: Path, name: str) -> tuple[Path, Header]:
    path = Path(path).expanduser()
    if path.is_file():
        return path, read_header(path)
    folder = _folder_for(path)
    file_hint, _, bare = name.partition(":")
    if bare and file_hint in (MODEL_FILE, TRAINING_FILE):
        header = read_header(folder / file_hint)
        return folder / file_hint, header
    for candidate in (MODEL_FILE, TRAINING_FILE):
        file_path = folder / candidate
        if file_path.is_file():
            header = read_header(file_path)
            if header.has(name):
                return file_path, header
    raise CheckpointError(f"{folder}: no tensor named '{name}'")


def _own_source(path: Path, name: str) -> TensorSource:
    """A tensor of a safetensors file or of our checkpoint folder: header, then its bytes alone."""
    file_path, header = _locate(path, name)
    bare = name.partition(":")[2] if ":" in name and not header.has(name) else name
    return file_source(file_path, header, bare)


def _source(path: Path | str, name: str) -> TensorSource:
    """The tensor named ``name`` (as ``inspect_path`` lists it, optionally ``FILE:NAME``) of
    anything ``inspect_path`` opens, reading as little as the format allows."""
    path = Path(path).expanduser()
    if not path.exists():
        raise CheckpointError(f"no such file or folder: {path}")
    shard = foreign_tensor_file(path, name)  # a transformers folder's safetensors shard: read piece by piece
    if shard is not None:
        return file_source(*shard)
    foreign = read_foreign_tensor(path, name)  # .pt/.pth pickles (mapped), GGUF files, pickled folders
    if foreign is None:
        return _own_source(path, name)
    return tensor_source(foreign.file, foreign.name, foreign.dtype, foreign.shape, foreign.tensor, foreign.bytes_read)


def tensor_statistics(path: Path | str, name: str, bins: int = 20, going: Going | None = None) -> dict[str, Any]:
    """min, max, mean, std (population), zero fraction and a histogram of one tensor,
    reading that tensor's bytes alone, in bounded pieces (a pickle is memory-mapped, not read
    whole). ``going(fraction done)`` is asked between pieces of a large tensor; False stops
    it (StatisticsStopped)."""
    if not 1 <= bins <= MAX_BINS:
        raise CheckpointError(f"bins must be between 1 and {MAX_BINS:,}, got {bins}")
    return summarise(_source(path, name), bins, going)
