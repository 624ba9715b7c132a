"""Safetensors writing, and files that appear whole or not at all: tensors laid out so each
starts at a multiple of its element size, written from views of the tensors themselves,
fsynced while the same buffers are hashed, renamed into place.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.core.files import fsync_folder, write_file
from minigpt_tui.engine.formats.safetensors_format import DTYPE_BITS, METADATA_KEY, TensorEntry, dtype_name

if TYPE_CHECKING:  # torch is imported lazily
    import torch

# Events a writer reports while it works (the kill-during-save test stops a process at each).
ProgressHook = Callable[[str], None]


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
            fsync_folder(path.parent)
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


def json_metadata(values: Mapping[str, Any]) -> dict[str, str]:
    """Metadata values are strings: each structured value is stored as compact JSON."""
    return {key: json.dumps(value, separators=(",", ":"), sort_keys=True) for key, value in values.items()}

