"""GGUF files (llama.cpp, Ollama, LM Studio), read without trusting them.

A GGUF file is: the magic ``GGUF``, a version (2 or 3), the tensor count and the metadata
count (u64 each); the metadata as key (string), type (u32), value; the tensor infos as
name, dimension count (u32), dimensions (u64 each, fastest first), GGML type (u32) and
offset (u64) from the start of the data; then padding to ``general.alignment`` (32 unless
set) and the data. Strings are a u64 length and UTF-8 bytes.

Every count, length, offset and size is checked against the bytes the file has before
anything is allocated for it, and each violation is one line naming it (as our safetensors
reader does): a count of 2^63 entries, a string longer than the file, a tensor past the
end, overlapping tensors, an unknown value or quantization type, a dimension count above
4, a shape that overflows. The file is memory-mapped; a tensor's bytes are read only when
it is asked for: plain arrays (F32, F16, F64, I8, I16, I32, I64) are converted exactly, to
float32 where that holds every value and to float64 where it does not; quantized types are
dequantized to float32 by the ``gguf`` package's own dequantizers. A type the package has
no dequantizer for is refused in one line naming the tensor.
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.core.files import require_regular_file

if TYPE_CHECKING:
    import numpy as np

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_KEY = 65_535  # bytes in a metadata key or tensor name
# The value types: struct format of a scalar, or None for string (8) and array (9).
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
TYPE_NAMES = {0: "u8", 1: "i8", 2: "u16", 3: "i16", 4: "u32", 5: "i32", 6: "f32", 7: "bool", 8: "string",
              9: "array", 10: "u64", 11: "i64", 12: "f64"}
# Tensor types stored as plain arrays: GGML type name -> (the stored values' numpy type, the
# float type that holds every one of them exactly).
PLAIN = {"F32": ("<f4", "float32"), "F16": ("<f2", "float32"), "F64": ("<f8", "float64"), "I8": ("i1", "float32"),
         "I16": ("<i2", "float32"), "I32": ("<i4", "float64"), "I64": ("<i8", "float64")}
EXACT_INTEGER = 2 ** 53  # the largest magnitude from which float64 holds every integer


class InvalidGGUF(CheckpointError):
    def __init__(self, path: Path | str, violation: str, detail: str) -> None:
        self.violation = violation
        super().__init__(f"{path}: not a valid GGUF file ({violation}): {detail}")


@functools.cache
def quant_sizes() -> dict[int, tuple[str, int, int]]:
    """GGML type number -> (name, elements per block, bytes per block), from the gguf package."""
    # The gguf package takes a tenth of a second to import: not before the app's first frame.
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType  # deferred: imports gguf

    return {int(t): (t.name, *GGML_QUANT_SIZES[t]) for t in GGMLQuantizationType if t in GGML_QUANT_SIZES}


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    shape: tuple[int, ...]  # torch order (slowest first): the file's dimensions reversed
    ggml_type: int
    type_name: str
    offset: int  # from the start of the data
    nbytes: int

    @property
    def elements(self) -> int:
        count = 1
        for d in self.shape:
            count *= d
        return count


@dataclass(frozen=True)
class GGUFHeader:
    path: Path
    version: int
    metadata: dict[str, Any]  # arrays of strings or numbers as lists
    types: dict[str, str]  # key -> value type name ("array[string]" for arrays)
    tensors: tuple[GGUFTensor, ...]
    data_start: int
    size: int

    def tensor(self, name: str) -> GGUFTensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise CheckpointError(f"{self.path}: no tensor named '{name}'")

    def names(self) -> list[str]:
        return [t.name for t in self.tensors]


class _Cursor:
    """Reads little-endian values from the mapped file, refusing to run past its end."""

    def __init__(self, path: Path, data: Any, size: int) -> None:
        self.path, self.data, self.size, self.at = path, data, size, 0

    def left(self) -> int:
        return self.size - self.at

    def need(self, count: int, what: str) -> None:
        if count > self.left():
            raise InvalidGGUF(self.path, "truncated", f"{what} needs {count:,} bytes at offset {self.at:,}; "
                                                       f"the file has {self.left():,} more")

    def scalar(self, fmt: str, what: str) -> Any:
        width = struct.calcsize(fmt)
        self.need(width, what)
        value = struct.unpack_from(fmt, self.data, self.at)[0]
        self.at += width
        return value

    def u32(self, what: str) -> int:
        return self.scalar("<I", what)

    def u64(self, what: str) -> int:
        return self.scalar("<Q", what)

    def string(self, what: str, limit: int | None = None) -> str:
        length = self.u64(f"the length of {what}")
        if limit is not None and length > limit:
            raise InvalidGGUF(self.path, "string-too-long", f"{what} is {length:,} bytes (at most {limit:,})")
        self.need(length, what)
        raw = bytes(self.data[self.at:self.at + length])
        self.at += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidGGUF(self.path, "bad-utf8", f"{what} is not UTF-8") from None


def _value(cur: _Cursor, kind: int, key: str, depth: int = 0) -> tuple[Any, str]:
    if kind in SCALARS:
        return cur.scalar(SCALARS[kind], f"the value of '{key}'"), TYPE_NAMES[kind]
    if kind == STRING:
        return cur.string(f"the value of '{key}'"), "string"
    if kind == ARRAY and depth == 0:
        return _array(cur, key)
    raise InvalidGGUF(cur.path, "unknown-type", f"'{key}' has value type {kind}")


def _array(cur: _Cursor, key: str) -> tuple[list[Any], str]:
    """An array value (of scalars or strings; arrays do not nest) and its type name."""
    item = cur.u32(f"the item type of '{key}'")
    count = cur.u64(f"the item count of '{key}'")
    if item not in SCALARS and item != STRING:
        raise InvalidGGUF(cur.path, "unknown-type", f"'{key}' is an array of unknown type {item}")
    smallest = struct.calcsize(SCALARS[item]) if item in SCALARS else 8
    if count * smallest > cur.left():
        raise InvalidGGUF(cur.path, "count-too-large", f"'{key}' declares {count:,} items; the file has room "
                                                       f"for at most {cur.left() // smallest:,}")
    if item in SCALARS:
        fmt = SCALARS[item]
        width = struct.calcsize(fmt)
        values = list(struct.unpack_from(f"<{count}{fmt[1]}", cur.data, cur.at)) if count else []
        cur.at += width * count
    else:
        values = _strings(cur, count, key)
    return values, f"array[{TYPE_NAMES[item]}]"


def _strings(cur: _Cursor, count: int, key: str) -> list[str]:
    """``count`` strings in a row (a vocabulary: tens of thousands), each checked as
    :meth:`_Cursor.string` checks one, in one tight loop."""
    data, size, at = cur.data, cur.size, cur.at
    unpack = struct.Struct("<Q").unpack_from
    values = []
    append = values.append
    try:
        for index in range(count):
            if at + 8 > size:
                cur.at = at
                cur.need(8, f"the length of item {index} of '{key}'")
            length = unpack(data, at)[0]
            at += 8
            if at + length > size:
                cur.at = at
                cur.need(length, f"item {index} of '{key}'")
            append(data[at:at + length].decode("utf-8"))
            at += length
    except UnicodeDecodeError:
        raise InvalidGGUF(cur.path, "bad-utf8", f"item {len(values)} of '{key}' is not UTF-8") from None
    cur.at = at
    return values


def _tensor_info(cur: _Cursor, index: int, sizes: dict[int, tuple[str, int, int]]) -> tuple[str, list[int], int, int]:
    name = cur.string(f"tensor {index}'s name", MAX_KEY)
    dims = cur.u32(f"tensor '{name}''s dimension count")
    if not 1 <= dims <= MAX_DIMS:
        raise InvalidGGUF(cur.path, "bad-dims", f"tensor '{name}' has {dims} dimensions (1 to {MAX_DIMS})")
    shape = [cur.u64(f"tensor '{name}''s dimension {d}") for d in range(dims)]
    kind = cur.u32(f"tensor '{name}''s type")
    if kind not in sizes:
        raise InvalidGGUF(cur.path, "unknown-quant-type", f"tensor '{name}' has GGML type {kind}, which is not known")
    return name, shape, kind, cur.u64(f"tensor '{name}''s offset")


def _check_tensor(path: Path, name: str, dims: list[int], kind: int, offset: int, alignment: int,
                  sizes: dict[int, tuple[str, int, int]], data_size: int) -> GGUFTensor:
    type_name, block, block_bytes = sizes[kind]
    elements = 1
    for d in dims:
        elements *= d
        if elements > data_size * 8 + 8:  # every GGML type spends at least one bit on an element
            raise InvalidGGUF(path, "size-overflow", f"tensor '{name}' declares shape {dims[::-1]}, more elements "
                                                     f"than the file's {data_size:,} data bytes hold")
    if not dims or dims[0] % block:
        raise InvalidGGUF(path, "bad-shape", f"tensor '{name}' ({type_name}) has rows of {dims[0]} elements, "
                                             f"not a multiple of its block of {block}")
    nbytes = elements // block * block_bytes
    if offset % alignment:
        raise InvalidGGUF(path, "misaligned", f"tensor '{name}' starts at {offset:,}, not a multiple of {alignment}")
    if offset + nbytes > data_size:
        raise InvalidGGUF(path, "truncated-data", f"tensor '{name}' needs bytes {offset:,} to {offset + nbytes:,} "
                                                  f"of the data; the file holds {data_size:,}")
    return GGUFTensor(name, tuple(reversed(dims)), kind, type_name, offset, nbytes)


def _map(path: Path) -> tuple[Any, int]:
    path = require_regular_file(path, "a GGUF file")
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < 24:
                raise InvalidGGUF(path, "truncated", f"{size} bytes, less than a GGUF header")
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ), size
    except OSError as err:
        raise CheckpointError(f"cannot read {path}: {err.strerror or err}") from None


def read_gguf_header(path: Path | str) -> GGUFHeader:
    """The metadata and tensor infos of a GGUF file, every one checked (module doc)."""
    path = Path(path)
    data, size = _map(path)
    try:
        return _parse(path, data, size)
    finally:
        data.close()


def _parse(path: Path, data: Any, size: int) -> GGUFHeader:
    cur = _Cursor(path, data, size)
    version, tensor_count, kv_count = _preamble(cur)
    metadata, types = _metadata(cur, kv_count)
    sizes = quant_sizes()
    infos = [_tensor_info(cur, i, sizes) for i in range(tensor_count)]
    alignment = _alignment(path, metadata)
    data_start = -(-cur.at // alignment) * alignment
    data_size = max(size - data_start, 0)
    tensors = _tensors(path, infos, alignment, sizes, data_size)
    return GGUFHeader(path, version, metadata, types, tuple(tensors), data_start, size)


def _preamble(cur: _Cursor) -> tuple[int, int, int]:
    """The magic checked, then the version and the tensor and metadata counts."""
    path, data, size = cur.path, cur.data, cur.size
    cur.need(4, "the magic")
    if bytes(data[:4]) != MAGIC:
        raise InvalidGGUF(path, "bad-magic", f"it starts {bytes(data[:4])!r}, not b'GGUF'")
    cur.at = 4
    version = cur.u32("the version")
    if version not in VERSIONS:
        raise InvalidGGUF(path, "bad-version", f"version {version} (supported: 2, 3)")
    tensor_count, kv_count = cur.u64("the tensor count"), cur.u64("the metadata count")
    # A key-value pair takes at least 12 bytes and a tensor info at least 24.
    if kv_count * 12 + tensor_count * 24 > cur.left():
        raise InvalidGGUF(path, "count-too-large", f"{tensor_count:,} tensors and {kv_count:,} metadata entries "
                                                   f"cannot fit in {size:,} bytes")
    return version, tensor_count, kv_count


def _metadata(cur: _Cursor, kv_count: int) -> tuple[dict[str, Any], dict[str, str]]:
    """The key-value pairs and each value's type name, no key twice."""
    metadata: dict[str, Any] = {}
    types: dict[str, str] = {}
    for index in range(kv_count):
        key = cur.string(f"metadata key {index}", MAX_KEY)
        if key in metadata:
            raise InvalidGGUF(cur.path, "duplicate-key", f"metadata key '{key}' appears twice")
        metadata[key], types[key] = _value(cur, cur.u32(f"the type of '{key}'"), key)
    return metadata, types


def _alignment(path: Path, metadata: dict[str, Any]) -> int:
    """general.alignment (32 when absent): a power of two."""
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1 or alignment & (alignment - 1):
        raise InvalidGGUF(path, "bad-alignment", f"general.alignment is {alignment!r}, not a power of two")
    return alignment


def _tensors(path: Path, infos: list[tuple[str, list[int], int, int]], alignment: int,
             sizes: dict[int, tuple[str, int, int]], data_size: int) -> list[GGUFTensor]:
    """The tensor infos checked one by one, then for names used twice and overlapping data."""
    tensors = []
    seen: set[str] = set()
    for name, dims, kind, offset in infos:
        if name in seen:
            raise InvalidGGUF(path, "duplicate-name", f"tensor '{name}' appears twice")
        seen.add(name)
        tensors.append(_check_tensor(path, name, dims, kind, offset, alignment, sizes, data_size))
    ordered = sorted(tensors, key=lambda t: t.offset)
    for before, after in zip(ordered, ordered[1:]):
        if before.offset + before.nbytes > after.offset:
            raise InvalidGGUF(path, "overlap", f"tensors '{before.name}' and '{after.name}' overlap")
    return tensors


@functools.cache
def dequantizable(ggml_type: int) -> bool:
    """Whether the gguf package dequantizes this quantized type (asked of one zero block,
    so a type it adds later is read without a change here)."""
    from gguf import GGMLQuantizationType, quants  # deferred: imports gguf

    _, _, block_bytes = quant_sizes()[ggml_type]
    try:
        quants.dequantize(np.zeros((1, block_bytes), dtype=np.uint8), GGMLQuantizationType(ggml_type))
    except NotImplementedError:
        return False
    return True


def require_readable(header: GGUFHeader, tensor: GGUFTensor) -> None:
    """Refuse, in one line naming it, a tensor whose type has no reader here."""
    if tensor.type_name not in PLAIN and not dequantizable(tensor.ggml_type):
        raise CheckpointError(f"{header.path}: tensor '{tensor.name}' is stored as {tensor.type_name}, "
                              "a GGML type that cannot be read here (it has no dequantizer)")


def q8_0_values(raw: "np.ndarray") -> "np.ndarray":
    """Q8_0 blocks (a float16 scale, then 32 int8 quants) as float32, all blocks in one
    product: bit for bit what gguf's dequantizer gives (the same float32 multiply), without
    its split into thousands of row groups (2.9 s of a 135M model's 5 s open)."""
    blocks = raw.reshape(-1, 34)
    scales = blocks[:, :2].view(np.float16).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):  # a file's inf or NaN scale: its values, said nowhere else
        return blocks[:, 2:].view(np.int8).astype(np.float32) * scales


class GGUFData:
    """A GGUF file mapped for reading its tensors (see the module doc for the types)."""

    def __init__(self, header: GGUFHeader) -> None:
        self.header = header
        self._map, _ = _map(header.path)

    def raw(self, tensor: GGUFTensor) -> "np.ndarray":
        start = self.header.data_start + tensor.offset
        return np.frombuffer(self._map, dtype=np.uint8, count=tensor.nbytes, offset=start)

    def values(self, name: str) -> "np.ndarray":
        """The tensor in torch order (slowest dimension first), as float32, or as float64
        where float32 would round its values (F64, I32, I64)."""
        tensor = self.header.tensor(name)
        require_readable(self.header, tensor)
        raw = self.raw(tensor)
        if tensor.type_name in PLAIN:
            stored, exact = PLAIN[tensor.type_name]
            values = raw.view(np.dtype(stored))
            if tensor.type_name == "I64" and values.size and max(values.max(), -int(values.min())) > EXACT_INTEGER:
                raise CheckpointError(f"{self.header.path}: tensor '{name}' (I64) holds integers beyond 2^53, "
                                      "which no float type holds exactly")
        elif tensor.elements == 0:
            values, exact = np.zeros(0, dtype=np.float32), "float32"
        elif tensor.type_name == "Q8_0":
            values, exact = q8_0_values(raw), "float32"
        else:
            from gguf import GGMLQuantizationType, quants  # deferred: imports gguf

            exact = "float32"
            rows = raw.reshape(-1, tensor.nbytes // max(tensor.elements // tensor.shape[-1], 1))
            values = quants.dequantize(rows, GGMLQuantizationType(tensor.ggml_type))
        # A copy of what the map holds: the map is read-only, and the weights outlive it
        # (dequantized values are a new array already).
        values = np.array(values, dtype=exact) if tensor.type_name in PLAIN else np.asarray(values, dtype=exact)
        return values.reshape(tensor.shape)

    def float32(self, name: str) -> "np.ndarray":
        """The tensor as float32, in torch order (F64, I32 and I64 values rounded)."""
        return self.values(name).astype(np.float32, copy=False)
