"""Small tensor helpers: unsigned 64-bit integer tensors and the one content digest.

Torch-free at import (the digest also serves header-only readers); the helpers that make
or read tensors import torch when called.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor

# A tensor as a digest sees it: name, dtype name, shape and its little-endian bytes.
TensorRecord = tuple[str, str, tuple[int, ...], "bytes | memoryview"]


def u64(values: Iterable[int]) -> Tensor:
    """A U64 tensor holding exact unsigned 64-bit integers (no float or string detour)."""
    import torch  # deferred: imports torch

    return torch.from_numpy(np.array(list(values), dtype=np.uint64))


def u64_values(tensor: Tensor) -> list[int]:
    return [int(v) for v in tensor.numpy().astype(np.uint64).tolist()]


def tensor_bytes(tensor: Tensor) -> bytes:
    import torch  # deferred: imports torch

    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


# -- the content digest ---------------------------------------------------------------------
@dataclass(frozen=True)
class DigestScheme:
    """What decides a digest's bytes besides the tensors: what is hashed first (the
    scheme's name and a zero byte, or nothing), whether the tensors are taken in name order
    (independent of a file's layout) or as given, and what closes each tensor's
    ``name|dtype|shape`` header."""

    prefix: bytes
    in_name_order: bool = True
    header_end: str = ""


# The trainer's in-memory digests (weights, optimizer, state): nothing first, the tensors
# as given, torch's dtype names, each header closed by "|".
TRAINER_DIGEST = DigestScheme(b"", in_name_order=False, header_end="|")


def length_prefixed(digest: hashlib._Hash, data: bytes | memoryview) -> None:
    """Hash ``data`` after its length (8 bytes, little-endian), so no two sequences of
    parts hash alike."""
    digest.update(len(data).to_bytes(8, "little"))
    digest.update(data)


def tensor_digest(scheme: DigestScheme, records: Iterable[TensorRecord], *, declared: bytes | None = None) -> str:
    """SHA-256 (hex) under ``scheme`` of ``declared`` (length-prefixed, when given) and of
    every tensor's length-prefixed ``name|dtype|shape`` header and bytes."""
    digest = hashlib.sha256(scheme.prefix)
    if declared is not None:
        length_prefixed(digest, declared)
    ordered = sorted(records, key=lambda record: record[0]) if scheme.in_name_order else records
    for name, dtype, shape, data in ordered:
        length_prefixed(digest, f"{name}|{dtype}|{list(shape)}{scheme.header_end}".encode())
        length_prefixed(digest, data)
    return digest.hexdigest()


def torch_records(named: Iterable[tuple[str, Tensor]]) -> Iterator[TensorRecord]:
    """Each tensor with torch's dtype name (``float32``), its bytes made one at a time."""
    for name, tensor in named:
        yield name, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), tensor_bytes(tensor)


def digest_tensors(named: Iterable[tuple[str, Tensor]]) -> str:
    """The trainer's digest of named tensors (see :data:`TRAINER_DIGEST`)."""
    return tensor_digest(TRAINER_DIGEST, torch_records(named))


def bytes_digest(tensor: Tensor) -> str:
    """SHA-256 (hex) of a tensor's bytes alone (a random generator's state)."""
    return hashlib.sha256(tensor_bytes(tensor)).hexdigest()
