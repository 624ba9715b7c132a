"""Precision as a typed value: what each of the four kinds means, said once.

A run's config, the TOML files, the saved config and the checkpoint records keep the
precision as its name (``exact``); everything that acts on it reads the :class:`Precision`
the name stands for (``TrainConfig.precision_kind``). No torch at import: the torch dtypes
resolve when asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from minigpt_tui.engine.core.errors import ConfigError
from minigpt_tui.engine.core.threads import Threads

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Precision:
    """One kind of precision. ``bitwise``: one thread and deterministic algorithms, so a
    resumed run reproduces the bits of one that never stopped (the only kind that promises
    it). ``fused``: fused attention and optimizer kernels (their bits may differ from the
    reference loops). ``scales_loss``: gradients underflow unscaled, so the loss scaler is
    always on."""

    name: str
    dtype_name: str  # the weights' dtype (the master weights under autocast)
    autocast_name: str | None = None  # the forward's compute dtype under autocast; None: the weights' own
    bitwise: bool = False
    fused: bool = False
    scales_loss: bool = False

    @property
    def deterministic(self) -> bool:
        """Whether torch's deterministic algorithms are on."""
        return self.bitwise

    @property
    def bytes_per_element(self) -> int:
        """Bytes of one weight, gradient or optimizer moment."""
        return 8 if self.dtype_name == "float64" else 4

    @property
    def stored_dtype(self) -> str:
        """The weights' dtype as safetensors names it (``F64``)."""
        return "F64" if self.dtype_name == "float64" else "F32"

    def threads(self, asked: Threads) -> Threads:
        """The threads a run computes with: one where the bits must not depend on the
        count, else what was asked (automatic included)."""
        return Threads(1) if self.bitwise else asked

    def torch_dtype(self) -> torch.dtype:
        import torch  # deferred: imports torch

        return getattr(torch, self.dtype_name)

    def autocast_dtype(self) -> torch.dtype | None:
        import torch  # deferred: imports torch

        return None if self.autocast_name is None else getattr(torch, self.autocast_name)


EXACT = Precision("exact", "float64", bitwise=True)
FAST = Precision("fast", "float32", fused=True)
BF16 = Precision("bf16", "float32", autocast_name="bfloat16")
FP16 = Precision("fp16", "float32", autocast_name="float16", scales_loss=True)
PRECISION_KINDS = {kind.name: kind for kind in (EXACT, FAST, BF16, FP16)}
PRECISIONS = tuple(PRECISION_KINDS)


def precision_of(name: str) -> Precision:
    """The precision a config names (refused when it names none)."""
    kind = precision_named(name)
    if kind is None:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got '{name}'", field="train.precision")
    return kind


def precision_named(value: object) -> Precision | None:
    """The precision a record names; None for anything else (a record read from a file)."""
    return PRECISION_KINDS.get(value) if isinstance(value, str) else None
