"""Strict safetensors reading: every rule the format sets is checked and the violated one
named (one :class:`Violation` per check). A reader takes the header alone unless tensor data
is asked for, and then only the bytes of the tensors asked for; a whole file read once is
hashed and checked against its manifest record. Nothing here imports torch until a tensor is
materialized, so header-only inspection stays fast.
"""

from __future__ import annotations

import enum
import hashlib
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any


from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.core.files import require_regular_file
from minigpt_tui.engine.core.memory import available_memory
from minigpt_tui.engine.formats.bounded_json import DuplicateKey, JSONRefused, load_json
from minigpt_tui.engine.formats.safetensors_format import DTYPE_BITS, METADATA_KEY, TensorEntry, torch_dtype

if TYPE_CHECKING:  # torch is imported lazily: header-only work must not pay for it
    import torch

MAX_HEADER_BYTES = 100_000_000
# A valid header nests three deep (header, entry, shape); records in metadata strings are
# parsed with a larger bound. Deeper JSON is refused before it is parsed.
HEADER_DEPTH = 3
RECORD_DEPTH = 32
# Offsets and the byte size are unsigned 64-bit (as safetensors reads them); a dimension
# must also fit torch's signed 64-bit sizes.
MAX_OFFSET = 2**64 - 1
MAX_DIMENSION = 2**63 - 1


class Violation(enum.StrEnum):
    """The rule of the safetensors format a file breaks, one member per check; the value is
    the name a message shows in parentheses (docs/checkpoint-format.md lists them)."""

    FILE_TOO_SMALL = "file-too-small"
    HEADER_TOO_LARGE = "header-too-large"
    HEADER_LENGTH_BEYOND_FILE = "header-length-beyond-file"
    TRUNCATED_HEADER = "truncated-header"
    HEADER_NOT_UTF8 = "header-not-utf8"
    HEADER_START = "header-start"
    HEADER_NOT_JSON = "header-not-json"
    HEADER_NOT_OBJECT = "header-not-object"
    DUPLICATE_NAME = "duplicate-name"
    METADATA_NOT_STRINGS = "metadata-not-strings"
    LONE_SURROGATE_METADATA = "lone-surrogate-metadata"  # in a __metadata__ key or value
    LONE_SURROGATE_NAME = "lone-surrogate-name"  # in a tensor's name
    BAD_ENTRY = "bad-entry"
    UNKNOWN_DTYPE = "unknown-dtype"
    BAD_SHAPE = "bad-shape"
    OFFSETS_NOT_PAIR = "offsets-not-pair"  # data_offsets is not two counts below 2**64
    OFFSETS_REVERSED = "offsets-reversed"  # the end before the begin
    ELEMENT_COUNT_OVERFLOW = "element-count-overflow"  # a partial product of the shape exceeds 2**64 - 1
    BYTE_SIZE_OVERFLOW = "byte-size-overflow"  # elements × bits exceed 2**64 - 1 bytes
    MISALIGNED_BITS = "misaligned-bits"
    BYTE_LENGTH_MISMATCH = "byte-length-mismatch"
    OFFSETS_NOT_CONTIGUOUS = "offsets-not-contiguous"
    TRUNCATED_DATA = "truncated-data"
    DATA_NOT_COVERED = "data-not-covered"


class InvalidSafetensors(CheckpointError):
    """A file that breaks a rule of the safetensors format; ``violation`` names the rule."""

    def __init__(self, path: Path | str, violation: Violation, detail: str) -> None:
        self.violation = violation
        self.path = str(path)
        super().__init__(f"{path}: not a valid safetensors file: {detail} ({violation})")


@dataclass(frozen=True)
class Header:
    """A validated header: entries in data order, the metadata map, and where data starts."""

    path: Path
    header_bytes: int  # n, the JSON length (padding included)
    entries: tuple[TensorEntry, ...]
    metadata: Mapping[str, str]
    file_size: int

    @property
    def data_start(self) -> int:
        return 8 + self.header_bytes

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    @cached_property
    def _by_name(self) -> dict[str, TensorEntry]:
        return {e.name: e for e in self.entries}

    def entry(self, name: str) -> TensorEntry:
        found = self._by_name.get(name)
        if found is None:
            raise CheckpointError(f"{self.path}: no tensor named '{name}'")
        return found

    def has(self, name: str) -> bool:
        return name in self._by_name


@contextmanager
def opening_errors(path: Path, what: str) -> Iterator[None]:
    """Turn the ways opening a file fails into one-line errors naming the path."""
    try:
        yield
    except FileNotFoundError:
        raise CheckpointError(f"file not found: {path}") from None
    except IsADirectoryError:
        raise CheckpointError(f"{path} is a directory, not {what}") from None
    except PermissionError:
        raise CheckpointError(f"cannot read {path}: permission denied") from None
    except OSError as err:
        raise CheckpointError(f"cannot read {path}: {err.strerror or err}") from None


def read_header(path: Path | str) -> Header:
    """Read and validate the header of ``path`` without reading any tensor data."""
    path = require_regular_file(path, "a safetensors file")
    with opening_errors(path, "a safetensors file"), path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        prefix = fh.read(8)
        if len(prefix) < 8:
            raise InvalidSafetensors(
                path, Violation.FILE_TOO_SMALL, f"the file has {size} bytes, fewer than the 8-byte header length"
            )
        declared = int.from_bytes(prefix, "little")
        _check_header_length(path, declared, size)
        text = fh.read(declared)
    if len(text) < declared:
        raise InvalidSafetensors(
            path, Violation.TRUNCATED_HEADER, f"the header declares {declared} bytes but the file ends first"
        )
    return parse_header(path, text, size)


def header_from_buffer(path: Path | str, buffer: bytes | bytearray | memoryview) -> Header:
    """Validate the header of a whole file already in memory."""
    path = Path(path)
    size = len(buffer)
    if size < 8:
        raise InvalidSafetensors(
            path, Violation.FILE_TOO_SMALL, f"the file has {size} bytes, fewer than the 8-byte header length"
        )
    declared = int.from_bytes(bytes(buffer[:8]), "little")
    _check_header_length(path, declared, size)
    return parse_header(path, bytes(buffer[8 : 8 + declared]), size)


def _check_header_length(path: Path, declared: int, size: int) -> None:
    if declared > MAX_HEADER_BYTES:
        # The number is not shown: read from a file of another kind (text, a link to a
        # system file), it would echo that file's first 8 bytes.
        raise InvalidSafetensors(
            path,
            Violation.HEADER_TOO_LARGE,
            f"its first 8 bytes are no header length (over the limit of {MAX_HEADER_BYTES:,} bytes)",
        )
    if 8 + declared > size:
        raise InvalidSafetensors(
            path,
            Violation.HEADER_LENGTH_BEYOND_FILE,
            f"the header length {declared} runs past the end of the {size}-byte file",
        )


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def parse_header(path: Path, raw: bytes, file_size: int) -> Header:
    data = _header_object(path, raw)
    metadata = _header_metadata(path, data)
    entries = [_entry(path, name, info) for name, info in data.items()]
    entries.sort(key=lambda e: (e.begin, e.end))
    _check_data_span(path, entries, file_size - 8 - len(raw))
    return Header(path, len(raw), tuple(entries), dict(metadata), file_size)


def _header_object(path: Path, raw: bytes) -> dict[str, Any]:
    """The header's JSON object: UTF-8, an object, no name twice."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InvalidSafetensors(
            path, Violation.HEADER_NOT_UTF8, f"the header is not UTF-8 (byte {err.start})"
        ) from None
    if not text.startswith("{"):
        raise InvalidSafetensors(path, Violation.HEADER_START, "the header does not begin with '{'")
    try:
        data = load_json(text, HEADER_DEPTH, unique_keys=True)
    except DuplicateKey as err:
        raise InvalidSafetensors(path, Violation.DUPLICATE_NAME, f"the header names '{err.args[0]}' twice") from None
    except JSONRefused as err:
        raise InvalidSafetensors(path, Violation.HEADER_NOT_JSON, f"the header is not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise InvalidSafetensors(path, Violation.HEADER_NOT_OBJECT, "the header is not a JSON object")
    return data


def _header_metadata(path: Path, data: dict[str, Any]) -> dict[str, str]:
    """``__metadata__`` taken out of the header (strings to strings; empty when absent)."""
    metadata = data.pop(METADATA_KEY, None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise InvalidSafetensors(path, Violation.METADATA_NOT_STRINGS, "__metadata__ must map strings to strings")
    if any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in metadata.items()):
        raise InvalidSafetensors(
            path, Violation.LONE_SURROGATE_METADATA, "__metadata__ holds an unpaired UTF-16 surrogate escape"
        )
    return metadata


def _check_data_span(path: Path, entries: list[TensorEntry], data_bytes: int) -> None:
    """The sorted entries must tile the data section exactly: no gap, overlap or excess."""
    position = 0
    for e in entries:
        if e.begin != position:
            kind = "overlap" if e.begin < position else "gap"
            raise InvalidSafetensors(
                path,
                Violation.OFFSETS_NOT_CONTIGUOUS,
                f"tensor '{e.name}' begins at {e.begin} but the previous data ends at {position} ({kind})",
            )
        position = e.end
    if position > data_bytes:
        raise InvalidSafetensors(
            path,
            Violation.TRUNCATED_DATA,
            f"the header declares {position} data bytes but the file holds {data_bytes} (truncated)",
        )
    if position < data_bytes:
        raise InvalidSafetensors(
            path, Violation.DATA_NOT_COVERED, f"the file holds {data_bytes - position} bytes beyond the last tensor"
        )


def _entry(path: Path, name: str, info: Any) -> TensorEntry:
    dtype, shape, begin, end = _entry_fields(path, name, info)
    entry = TensorEntry(name, dtype, tuple(shape), begin, end)
    _check_entry_size(path, entry, shape)
    return entry


def _entry_fields(path: Path, name: str, info: Any) -> tuple[str, list[int], int, int]:
    """An entry's dtype, shape and offsets, each checked on its own."""
    _check_entry_form(path, name, info)
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise InvalidSafetensors(path, Violation.UNKNOWN_DTYPE, f"tensor '{name}' has unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(_is_count(s, MAX_DIMENSION) for s in shape):
        raise InvalidSafetensors(
            path,
            Violation.BAD_SHAPE,
            f"tensor '{name}' has shape {_short_repr(shape)}, not a list of sizes below 2**63",
        )
    begin, end = _entry_offsets(path, name, offsets)
    return dtype, shape, begin, end


def _check_entry_form(path: Path, name: str, info: Any) -> None:
    """A usable name, and exactly the three fields an entry has."""
    if _has_lone_surrogate(name):
        raise InvalidSafetensors(
            path, Violation.LONE_SURROGATE_NAME, "a tensor name holds an unpaired UTF-16 surrogate escape"
        )
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise InvalidSafetensors(
            path, Violation.BAD_ENTRY, f"entry '{name}' must have exactly dtype, shape and data_offsets"
        )


def _entry_offsets(path: Path, name: str, offsets: Any) -> tuple[int, int]:
    """``data_offsets`` as (begin, end): two counts, the end not before the begin."""
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o, MAX_OFFSET) for o in offsets)):
        raise InvalidSafetensors(
            path, Violation.OFFSETS_NOT_PAIR, f"tensor '{name}' has data_offsets {_short_repr(offsets)}"
        )
    begin, end = offsets
    if end < begin:
        raise InvalidSafetensors(
            path, Violation.OFFSETS_REVERSED, f"tensor '{name}' ends at {end} before it begins at {begin}"
        )
    return begin, end


def _check_entry_size(path: Path, entry: TensorEntry, shape: list[int]) -> None:
    """The shape's size must not overflow and must match the offsets' span in whole bytes."""
    name, dtype = entry.name, entry.dtype
    running = 1
    for size in shape:  # as safetensors computes the size: each partial product must fit
        running *= size
        if running > MAX_OFFSET:
            raise InvalidSafetensors(
                path, Violation.ELEMENT_COUNT_OVERFLOW, f"tensor '{name}' has shape {list(shape)}: its size overflows"
            )
    bits = entry.elements * DTYPE_BITS[dtype]
    if bits > MAX_OFFSET * 8:
        raise InvalidSafetensors(
            path, Violation.BYTE_SIZE_OVERFLOW, f"tensor '{name}' has shape {list(shape)}: its size overflows"
        )
    if bits % 8:
        raise InvalidSafetensors(path, Violation.MISALIGNED_BITS, f"tensor '{name}' holds {bits} bits, not whole bytes")
    if bits // 8 != entry.nbytes:
        raise InvalidSafetensors(
            path,
            Violation.BYTE_LENGTH_MISMATCH,
            f"tensor '{name}' is {dtype} {list(shape)}: {bits // 8} bytes expected, offsets span {entry.nbytes}",
        )


def _is_count(value: Any, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= limit


def _short_repr(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _check_byte_order() -> None:
    if sys.byteorder != "little":  # pragma: no cover - every supported CPU here is little-endian
        raise CheckpointError("safetensors data is little-endian; this machine is not")


def tensor_from_bytes(entry: TensorEntry, buffer: bytearray | memoryview, offset: int) -> "torch.Tensor":
    """A tensor over ``buffer[offset : offset + entry.nbytes]`` (no copy)."""
    import torch  # deferred: imports torch

    _check_byte_order()
    dtype = torch_dtype(entry.dtype)
    if entry.elements == 0:
        return torch.empty(entry.shape, dtype=dtype)
    flat = torch.frombuffer(buffer, dtype=dtype, count=entry.elements, offset=offset)
    return flat.reshape(entry.shape)


def read_tensor(path: Path | str, name: str, header: Header | None = None) -> "torch.Tensor":
    """Read one tensor's bytes and nothing else."""
    path = Path(path)
    header = header or read_header(path)
    entry = header.entry(name)
    require_memory_for(path, entry.nbytes, f"tensor '{name}'")
    buffer = bytearray(entry.nbytes)
    with opening_errors(path, "a safetensors file"), path.open("rb") as fh:
        fh.seek(header.data_start + entry.begin)
        got = fh.readinto(buffer)
    if got != entry.nbytes:
        raise InvalidSafetensors(
            path, Violation.TRUNCATED_DATA, f"tensor '{name}' is cut short ({got} of {entry.nbytes} bytes)"
        )
    return tensor_from_bytes(entry, buffer, 0)


def require_memory_for(path: Path, nbytes: int, what: str) -> None:
    """Refuse to read ``nbytes`` into memory when this machine does not have that much (a
    sparse or hostile file would otherwise be allocated for, then read for hours)."""
    room = available_memory()  # the machine's available memory, or its cgroup's room when smaller
    if room is not None and nbytes > room.bytes:
        where = "this machine's" if room.source == "machine" else "its cgroup's"
        raise CheckpointError(
            f"{path}: {what} holds {nbytes:,} bytes, more than {where} {room.bytes:,} bytes of available memory"
        )


@dataclass(frozen=True)
class LoadedFile:
    """A whole file read once: its validated header, its bytes and their SHA-256."""

    header: Header
    buffer: memoryview  # the whole file, writable (tensors are views of it)
    sha256: str

    @property
    def metadata(self) -> Mapping[str, str]:
        return self.header.metadata

    def tensor(self, name: str) -> "torch.Tensor":
        entry = self.header.entry(name)
        return tensor_from_bytes(entry, self.buffer, self.header.data_start + entry.begin)

    def tensors(self) -> dict[str, "torch.Tensor"]:
        return {e.name: self.tensor(e.name) for e in self.header.entries}


def load_file(path: Path | str, expect: "ExpectedFile | None" = None) -> LoadedFile:
    """Read a whole safetensors file once, hash it, check it against ``expect`` (a
    manifest's record) before anything else, then validate its header."""

    path = require_regular_file(path, "a safetensors file")
    with opening_errors(path, "a safetensors file"), path.open("rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        if expect is not None:
            expect.check_size(path, size)  # a truncated file is refused before it is read
        require_memory_for(path, size, "the file")
        # Uninitialized memory (no zero-filling pass): the read overwrites every byte.
        import numpy  # deferred: imports numpy

        buffer = memoryview(numpy.empty(size, dtype=numpy.uint8))
        got = 0
        while got < size and (count := fh.readinto(buffer[got:])):
            got += count
    if got != size:
        raise CheckpointError(f"{path} changed size while it was read")
    sha256 = hashlib.sha256(buffer).hexdigest()
    if expect is not None:
        expect.check(path, size, sha256)
    header = header_from_buffer(path, buffer)
    return LoadedFile(header, buffer, sha256)


@dataclass(frozen=True)
class ExpectedFile:
    """What a manifest says a file is: its size and SHA-256."""

    size: int
    sha256: str
    source: str  # the manifest's path, for the message

    def check_size(self, path: Path, size: int) -> None:
        if size != self.size:
            raise CheckpointError(
                f"{path}: {size} bytes but {self.source} records {self.size}: the file is truncated or changed"
            )

    def check(self, path: Path, size: int, sha256: str) -> None:
        self.check_size(path, size)
        if sha256 != self.sha256:
            raise CheckpointError(
                f"{path}: SHA-256 {sha256[:12]}… does not match {self.source} ({self.sha256[:12]}…): "
                "the file changed after saving"
            )


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def parse_record(path: Path, key: str, text: str) -> Any:
    """One metadata record's JSON, with bounded nesting and numbers; one line otherwise."""
    try:
        return load_json(text, RECORD_DEPTH)
    except JSONRefused as err:
        raise CheckpointError(f"{path}: metadata record '{key}' is not usable JSON ({err})") from None
