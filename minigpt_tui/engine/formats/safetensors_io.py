"""Strict safetensors reading and writing, and files that appear whole or not at all.

A safetensors file is an 8-byte little-endian header length ``n``, ``n`` bytes of UTF-8
JSON, then the data section. The JSON maps tensor names to ``{"dtype", "shape",
"data_offsets": [begin, end]}`` (offsets relative to the data section) and may hold
``"__metadata__"``, a map of strings to strings. The reader checks every rule the format
sets and names the violated one; it reads the header alone unless tensor data is asked for,
and then only the bytes of the tensors asked for. Nothing here imports torch until a tensor
is materialized, so header-only inspection stays fast.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy

from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.core.files import fsync_folder as fsync_directory  # noqa: F401 - used here and by callers
from minigpt_tui.engine.core.files import (
    read_small_file,
    require_regular_file,
    shorten_middle,
    write_file,
)
from minigpt_tui.engine.core.memory import available_memory

if TYPE_CHECKING:  # torch is imported lazily: header-only work must not pay for it
    import torch

MAX_HEADER_BYTES = 100_000_000
METADATA_KEY = "__metadata__"
# A valid header nests three deep (header, entry, shape); records in metadata strings are
# parsed with a larger bound. Deeper JSON is refused before it is parsed.
HEADER_DEPTH = 3
RECORD_DEPTH = 32
# Offsets and the byte size are unsigned 64-bit (as safetensors reads them); a dimension
# must also fit torch's signed 64-bit sizes.
MAX_OFFSET = 2**64 - 1
MAX_DIMENSION = 2**63 - 1

# Bits per element of every dtype the format defines.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}

# Events a writer reports while it works (the kill-during-save test stops a process at each).
ProgressHook = Callable[[str], None]


class InvalidSafetensors(CheckpointError):
    """A file that breaks a rule of the safetensors format; ``violation`` names the rule."""

    def __init__(self, path: Path | str, violation: str, detail: str) -> None:
        self.violation = violation
        self.path = str(path)
        super().__init__(f"{path}: not a valid safetensors file: {detail} ({violation})")


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # offsets within the data section
    end: int

    @property
    def elements(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "elements": self.elements,
            "bytes": self.nbytes,
            "begin": self.begin,
            "end": self.end,
        }


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


# -- reading --------------------------------------------------------------------------------
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
            raise InvalidSafetensors(path, "file-too-small", f"the file has {size} bytes, fewer than the 8-byte header length")
        declared = int.from_bytes(prefix, "little")
        _check_header_length(path, declared, size)
        text = fh.read(declared)
    if len(text) < declared:
        raise InvalidSafetensors(path, "truncated-header", f"the header declares {declared} bytes but the file ends first")
    return parse_header(path, text, size)


def header_from_buffer(path: Path | str, buffer: bytes | bytearray | memoryview) -> Header:
    """Validate the header of a whole file already in memory."""
    path = Path(path)
    size = len(buffer)
    if size < 8:
        raise InvalidSafetensors(path, "file-too-small", f"the file has {size} bytes, fewer than the 8-byte header length")
    declared = int.from_bytes(bytes(buffer[:8]), "little")
    _check_header_length(path, declared, size)
    return parse_header(path, bytes(buffer[8 : 8 + declared]), size)


def _check_header_length(path: Path, declared: int, size: int) -> None:
    if declared > MAX_HEADER_BYTES:
        raise InvalidSafetensors(
            path, "header-too-large", f"the header length {declared} exceeds the limit of {MAX_HEADER_BYTES} bytes"
        )
    if 8 + declared > size:
        raise InvalidSafetensors(
            path, "header-length-beyond-file", f"the header length {declared} runs past the end of the {size}-byte file"
        )


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


class _DuplicateKey(Exception):
    pass


class JSONRefused(ValueError):
    """JSON text that is malformed, nested too deep or holds a number too large."""


# A JSON string (escapes included), to be ignored when brackets are counted.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _nested_deeper_than(text: str, limit: int) -> bool:
    """Whether ``text`` nests arrays or objects more than ``limit`` deep (without
    recursion: innermost empty pairs are removed ``limit`` times; what is left is deeper,
    or unbalanced, which the parser then names)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    skeleton = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    for _ in range(limit):
        reduced = skeleton.replace("[]", "").replace("{}", "")
        if reduced == skeleton:
            return False
        skeleton = reduced
    return bool(skeleton) and skeleton != skeleton.replace("[]", "").replace("{}", "")


def load_json(text: str, max_depth: int, *, unique_keys: bool = False) -> Any:
    """Parse JSON text with bounded nesting and number sizes; every failure is a
    :class:`JSONRefused` whose message names the problem."""
    if _nested_deeper_than(text, max_depth):
        raise JSONRefused(f"nested deeper than {max_depth} levels")
    try:
        return json.loads(text, object_pairs_hook=_unique_object if unique_keys else None)
    except json.JSONDecodeError as err:
        raise JSONRefused(f"{err.msg} at {err.pos}") from None
    except RecursionError:
        raise JSONRefused("nested too deep") from None
    except ValueError as err:  # an integer of more digits than Python converts
        if isinstance(err, _DuplicateKey):
            raise
        raise JSONRefused("a number too large") from None


OTHER_TOOLS_JSON_LIMIT = 512 << 20  # a tokenizer.json or shard index of a very large vocabulary fits
OTHER_TOOLS_JSON_DEPTH = 64


def read_json_input(path: Path | str, what: str, *, limit: int = OTHER_TOOLS_JSON_LIMIT,
                    max_depth: int = OTHER_TOOLS_JSON_DEPTH) -> Any:
    """A JSON file another tool wrote (``config.json``, a shard index, ``tokenizer.json``),
    read as untrusted input: a regular file (a FIFO or a device is refused before it could
    block), at most ``limit`` bytes, UTF-8, bounded nesting and numbers. Every failure is an
    :class:`InputRefused` or :class:`JSONRefused` naming the file."""
    raw = read_small_file(path, limit, what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise JSONRefused(f"{shorten_middle(str(path))} is not UTF-8 (byte {err.start})") from None
    try:
        return load_json(text, max_depth)
    except JSONRefused as err:
        raise JSONRefused(f"{shorten_middle(str(path))} is not usable JSON ({err})") from None


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
        raise InvalidSafetensors(path, "header-not-utf8", f"the header is not UTF-8 (byte {err.start})") from None
    if not text.startswith("{"):
        raise InvalidSafetensors(path, "header-start", "the header does not begin with '{'")
    try:
        data = load_json(text, HEADER_DEPTH, unique_keys=True)
    except _DuplicateKey as err:
        raise InvalidSafetensors(path, "duplicate-name", f"the header names '{err.args[0]}' twice") from None
    except JSONRefused as err:
        raise InvalidSafetensors(path, "header-not-json", f"the header is not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise InvalidSafetensors(path, "header-not-object", "the header is not a JSON object")
    return data


def _header_metadata(path: Path, data: dict[str, Any]) -> dict[str, str]:
    """``__metadata__`` taken out of the header (strings to strings; empty when absent)."""
    metadata = data.pop(METADATA_KEY, None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise InvalidSafetensors(path, "metadata-not-strings", "__metadata__ must map strings to strings")
    if any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in metadata.items()):
        raise InvalidSafetensors(path, "lone-surrogate", "__metadata__ holds an unpaired UTF-16 surrogate escape")
    return metadata


def _check_data_span(path: Path, entries: list[TensorEntry], data_bytes: int) -> None:
    """The sorted entries must tile the data section exactly: no gap, overlap or excess."""
    position = 0
    for e in entries:
        if e.begin != position:
            kind = "overlap" if e.begin < position else "gap"
            raise InvalidSafetensors(
                path,
                "offsets-not-contiguous",
                f"tensor '{e.name}' begins at {e.begin} but the previous data ends at {position} ({kind})",
            )
        position = e.end
    if position > data_bytes:
        raise InvalidSafetensors(
            path, "truncated-data", f"the header declares {position} data bytes but the file holds {data_bytes} (truncated)"
        )
    if position < data_bytes:
        raise InvalidSafetensors(
            path, "data-not-covered", f"the file holds {data_bytes - position} bytes beyond the last tensor"
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
        raise InvalidSafetensors(path, "unknown-dtype", f"tensor '{name}' has unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(_is_count(s, MAX_DIMENSION) for s in shape):
        raise InvalidSafetensors(
            path, "bad-shape", f"tensor '{name}' has shape {_short_repr(shape)}, not a list of sizes below 2**63"
        )
    begin, end = _entry_offsets(path, name, offsets)
    return dtype, shape, begin, end


def _check_entry_form(path: Path, name: str, info: Any) -> None:
    """A usable name, and exactly the three fields an entry has."""
    if _has_lone_surrogate(name):
        raise InvalidSafetensors(path, "lone-surrogate", "a tensor name holds an unpaired UTF-16 surrogate escape")
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise InvalidSafetensors(path, "bad-entry", f"entry '{name}' must have exactly dtype, shape and data_offsets")


def _entry_offsets(path: Path, name: str, offsets: Any) -> tuple[int, int]:
    """``data_offsets`` as (begin, end): two counts, the end not before the begin."""
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o, MAX_OFFSET) for o in offsets)):
        raise InvalidSafetensors(path, "bad-offsets", f"tensor '{name}' has data_offsets {_short_repr(offsets)}")
    begin, end = offsets
    if end < begin:
        raise InvalidSafetensors(path, "bad-offsets", f"tensor '{name}' ends at {end} before it begins at {begin}")
    return begin, end


def _check_entry_size(path: Path, entry: TensorEntry, shape: list[int]) -> None:
    """The shape's size must not overflow and must match the offsets' span in whole bytes."""
    name, dtype = entry.name, entry.dtype
    running = 1
    for size in shape:  # as safetensors computes the size: each partial product must fit
        running *= size
        if running > MAX_OFFSET:
            raise InvalidSafetensors(path, "size-overflow", f"tensor '{name}' has shape {list(shape)}: its size overflows")
    bits = entry.elements * DTYPE_BITS[dtype]
    if bits > MAX_OFFSET * 8:
        raise InvalidSafetensors(path, "size-overflow", f"tensor '{name}' has shape {list(shape)}: its size overflows")
    if bits % 8:
        raise InvalidSafetensors(path, "misaligned-bits", f"tensor '{name}' holds {bits} bits, not whole bytes")
    if bits // 8 != entry.nbytes:
        raise InvalidSafetensors(
            path,
            "byte-length-mismatch",
            f"tensor '{name}' is {dtype} {list(shape)}: {bits // 8} bytes expected, offsets span {entry.nbytes}",
        )


def _is_count(value: Any, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= limit


def _short_repr(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


@cache
def _torch_dtypes() -> dict[str, "torch.dtype"]:
    """Format dtype names to torch dtypes (built once, on first use: torch loads lazily)."""
    import torch  # deferred: imports torch

    return {
        "BOOL": torch.bool,
        "U8": torch.uint8,
        "I8": torch.int8,
        "I16": torch.int16,
        "U16": torch.uint16,
        "F16": torch.float16,
        "BF16": torch.bfloat16,
        "I32": torch.int32,
        "U32": torch.uint32,
        "F32": torch.float32,
        "F64": torch.float64,
        "I64": torch.int64,
        "U64": torch.uint64,
        "C64": torch.complex64,
        "F8_E5M2": torch.float8_e5m2,
        "F8_E4M3": torch.float8_e4m3fn,
    }


def torch_dtype(name: str) -> "torch.dtype":
    found = _torch_dtypes().get(name)
    if found is None:
        raise CheckpointError(f"tensors of dtype {name} cannot be read into torch here")
    return found


@cache
def _dtype_names() -> dict["torch.dtype", str]:
    """Torch dtypes to format names, for those a file may be written from."""
    return {dtype: name for name, dtype in _torch_dtypes().items() if not name.startswith("F8_")}


def dtype_name(dtype: "torch.dtype") -> str:
    found = _dtype_names().get(dtype)
    if found is None:
        raise CheckpointError(f"tensors of dtype {dtype} cannot be saved")
    return found


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
        raise InvalidSafetensors(path, "truncated-data", f"tensor '{name}' is cut short ({got} of {entry.nbytes} bytes)")
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


# -- writing --------------------------------------------------------------------------------
@dataclass(frozen=True)
class WrittenFile:
    path: Path
    size: int
    sha256: str


def tensor_memory(tensor: "torch.Tensor") -> memoryview:
    """The tensor's bytes, little-endian, without a copy when it is contiguous on the CPU."""
    import torch  # deferred: imports torch

    flat = tensor.detach().cpu().contiguous().reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    return memoryview(flat.view(torch.uint8).numpy())


def encode_header(entries: Sequence[TensorEntry], metadata: Mapping[str, str]) -> bytes:
    """The JSON header, padded with spaces to a multiple of 8 bytes so data stays aligned."""
    body: dict[str, Any] = {}
    if metadata:
        body[METADATA_KEY] = dict(metadata)
    for e in entries:
        body[e.name] = {"dtype": e.dtype, "shape": list(e.shape), "data_offsets": [e.begin, e.end]}
    raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return raw + b" " * ((8 - len(raw) % 8) % 8)


def plan_layout(tensors: Sequence[tuple[str, "torch.Tensor"]]) -> list[TensorEntry]:
    """Entries ordered by element size (largest first), then name: every tensor's data
    starts at a multiple of its element size."""
    described = [(name, dtype_name(t.dtype), tuple(t.shape), t.numel() * t.element_size()) for name, t in tensors]
    names = [d[0] for d in described]
    if len(set(names)) != len(names):
        raise CheckpointError("two tensors share one name")
    described.sort(key=lambda d: (-DTYPE_BITS[d[1]], d[0]))
    entries, offset = [], 0
    for name, dtype, shape, nbytes in described:
        entries.append(TensorEntry(name, dtype, shape, offset, offset + nbytes))
        offset += nbytes
    return entries


@dataclass(frozen=True)
class PlannedFile:
    """A safetensors file laid out in memory: the length-prefixed header and every tensor's
    bytes in data order, as views of the tensors themselves (no copy). What a writer puts
    on disk and what its SHA-256 covers are these same buffers, each read once per pass."""

    entries: tuple[TensorEntry, ...]
    prefix: bytes  # the 8-byte header length and the header
    views: tuple[memoryview, ...]  # one per entry, in the same order

    @property
    def data_start(self) -> int:
        return len(self.prefix)

    @property
    def size(self) -> int:
        return len(self.prefix) + (self.entries[-1].end if self.entries else 0)

    def sha256(self) -> str:
        """The SHA-256 of the file this plan writes, from memory (no read back)."""
        digest = hashlib.sha256(self.prefix)
        for view in self.views:
            digest.update(view)
        return digest.hexdigest()

    def with_metadata(self, metadata: Mapping[str, str]) -> "PlannedFile":
        """The same layout under final metadata whose header has the planned length (digests
        filled into placeholders of equal length), so data already written stays valid."""
        prefix = _length_prefixed(encode_header(self.entries, metadata))
        if len(prefix) != len(self.prefix):
            raise CheckpointError(
                f"the final header is {len(prefix)} bytes, not the planned {len(self.prefix)}: "
                "a digest placeholder had the wrong length"
            )
        return PlannedFile(self.entries, prefix, self.views)


def _length_prefixed(header: bytes) -> bytes:
    return len(header).to_bytes(8, "little") + header


def plan_file(tensors: Sequence[tuple[str, "torch.Tensor"]], metadata: Mapping[str, str] | None = None) -> PlannedFile:
    entries = plan_layout(tensors)  # refuses duplicate names before the lookup below merges them
    lookup = dict(tensors)
    views = tuple(tensor_memory(lookup[e.name]) for e in entries)
    return PlannedFile(tuple(entries), _length_prefixed(encode_header(entries, metadata or {})), views)


def create_file(path: Path) -> int:
    """A descriptor for writing ``path`` from its start (created or truncated)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)


def _pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data).cast("B")
    while view.nbytes:
        done = os.pwrite(fd, view, offset)
        view = view[done:]
        offset += done


def write_header(fd: int, planned: PlannedFile, label: str, notify: ProgressHook) -> None:
    _pwrite_all(fd, planned.prefix, 0)
    notify(f"{label}:header")


def write_data(fd: int, planned: PlannedFile, label: str, notify: ProgressHook) -> None:
    """Every tensor's bytes at its place after the header (which may be written later)."""
    for entry, view in zip(planned.entries, planned.views):
        _pwrite_all(fd, view, planned.data_start + entry.begin)
        notify(f"{label}:tensor:{entry.name}")


# sync_file_range flag: start writing the range's dirty pages, do not wait for them.
_SYNC_FILE_RANGE_WRITE = 2


@cache
def _sync_file_range() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def start_writeback(fd: int) -> None:
    """Ask the kernel to start sending ``fd``'s written pages to the disk now, without
    waiting and without a journal commit (Linux ``sync_file_range``), so the disk works
    while the CPU hashes. Only a hint: durability is still the file's own fsync."""
    function = _sync_file_range()
    if function is not None:
        function(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)

# Below this size a helper thread costs more than the overlap it buys.
_OVERLAP_BYTES = 1 << 20


def fsync_while_hashing(fd: int, planned: PlannedFile) -> str:
    """fsync ``fd`` and return the plan's SHA-256: the disk works while the CPU hashes."""
    if planned.size < _OVERLAP_BYTES:
        os.fsync(fd)
        return planned.sha256()
    with ThreadPoolExecutor(max_workers=1) as pool:
        synced = pool.submit(os.fsync, fd)
        sha256 = planned.sha256()
        synced.result()
    return sha256


def write_safetensors(
    path: Path | str,
    tensors: Sequence[tuple[str, "torch.Tensor"]],
    metadata: Mapping[str, str] | None = None,
    *,
    progress: ProgressHook | None = None,
    atomic: bool = True,
) -> WrittenFile:
    """Write a safetensors file, flushed and fsynced, hashed from the same buffers while
    the fsync runs. ``atomic``: under a temporary name in the same folder, renamed into
    place, the folder fsynced. Without it the caller owns atomicity (a checkpoint writes
    into a temporary folder)."""
    path = Path(path)
    planned = plan_file(tensors, metadata)
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}") if atomic else path
    notify = progress or (lambda _event: None)
    try:
        fd = create_file(tmp)
        try:
            write_header(fd, planned, path.name, notify)
            write_data(fd, planned, path.name, notify)
            sha256 = fsync_while_hashing(fd, planned)
        finally:
            os.close(fd)
        notify(f"{path.name}:fsynced")
        if atomic:
            os.replace(tmp, path)
            notify(f"{path.name}:renamed")
            fsync_directory(path.parent)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise CheckpointError(f"cannot write {path}: {err.strerror or err}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return WrittenFile(path, planned.size, sha256)




def atomic_write_bytes(
    path: Path, data: bytes, *, progress: ProgressHook | None = None, atomic: bool = True
) -> WrittenFile:
    """``data`` as ``path``, fsynced. ``atomic``: through the one output writer (a regular
    file replaced under a temporary name); without it the caller owns atomicity (the file
    goes into a hidden work folder that is renamed into place as a whole)."""
    if atomic:
        write_file(path, data, replace=True)
        if progress:
            progress(f"{path.name}:fsynced")
        return WrittenFile(path, len(data), hashlib.sha256(data).hexdigest())
    try:
        with path.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if progress:
            progress(f"{path.name}:fsynced")
    except OSError as err:
        path.unlink(missing_ok=True)
        raise CheckpointError(f"cannot write {path}: {err.strerror or err}") from None
    return WrittenFile(path, len(data), hashlib.sha256(data).hexdigest())


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def json_metadata(values: Mapping[str, Any]) -> dict[str, str]:
    """Metadata values are strings: each structured value is stored as compact JSON."""
    return {key: json.dumps(value, separators=(",", ":"), sort_keys=True) for key, value in values.items()}


def parse_json_metadata(path: Path, metadata: Mapping[str, str], keys: Iterable[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in keys:
        if key not in metadata:
            raise CheckpointError(f"{path}: metadata has no '{key}' record")
        out[key] = parse_record(path, key, metadata[key])
    return out


def parse_record(path: Path, key: str, text: str) -> Any:
    """One metadata record's JSON, with bounded nesting and numbers; one line otherwise."""
    try:
        return load_json(text, RECORD_DEPTH)
    except JSONRefused as err:
        raise CheckpointError(f"{path}: metadata record '{key}' is not usable JSON ({err})") from None
