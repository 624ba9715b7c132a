"""What the safetensors format is: the dtypes it defines with their bits per element, the
metadata key, one tensor's entry in a header, and the torch dtype of each format name.

A safetensors file is an 8-byte little-endian header length ``n``, ``n`` bytes of UTF-8
JSON, then the data section. The JSON maps tensor names to ``{"dtype", "shape",
"data_offsets": [begin, end]}`` (offsets relative to the data section) and may hold
``"__metadata__"``, a map of strings to strings. :mod:`.safetensors_read` checks every rule
of it; :mod:`.safetensors_write` writes it. Nothing here imports torch until a dtype is
looked up.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.errors import CheckpointError

if TYPE_CHECKING:  # torch is imported lazily: header-only work must not pay for it
    import torch

METADATA_KEY = "__metadata__"

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

