"""Small tensor helpers: unsigned 64-bit integer tensors and stable content digests."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
import torch
from torch import Tensor


def u64(values: Iterable[int]) -> Tensor:
    """A U64 tensor holding exact unsigned 64-bit integers (no float or string detour)."""
    return torch.from_numpy(np.array(list(values), dtype=np.uint64))


def u64_values(tensor: Tensor) -> list[int]:
    return [int(v) for v in tensor.numpy().astype(np.uint64).tolist()]


def tensor_bytes(tensor: Tensor) -> bytes:
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def update_digest(digest: "hashlib._Hash", name: str, tensor: Tensor) -> None:
    """Hash a tensor's name, dtype, shape and bytes, each length-delimited."""
    header = f"{name}|{str(tensor.dtype).removeprefix('torch.')}|{list(tensor.shape)}|".encode()
    data = tensor_bytes(tensor)
    digest.update(len(header).to_bytes(8, "little") + header)
    digest.update(len(data).to_bytes(8, "little") + data)


def digest_tensors(named: Iterable[tuple[str, Tensor]]) -> str:
    digest = hashlib.sha256()
    for name, tensor in named:
        update_digest(digest, name, tensor)
    return digest.hexdigest()
