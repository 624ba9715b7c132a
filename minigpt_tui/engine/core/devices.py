"""Where a run's tensors live: ``auto``, ``cpu``, ``cuda`` or ``mps``.

``auto`` picks CUDA, then Apple's MPS, then the CPU. A device that is asked for by name and
is absent is refused with one line naming what was found. Checkpoints never depend on the
device: they are always written as CPU tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from minigpt_tui.engine.core.errors import ConfigError

if TYPE_CHECKING:
    import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")
AUTO_ORDER = ("cuda", "mps", "cpu")


def available_device_kinds() -> tuple[str, ...]:
    """The device kinds this process can use, in ``auto``'s order of preference."""
    import torch  # deferred: imports torch

    found = []
    if torch.cuda.is_available():
        found.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    found.append("cpu")
    return tuple(found)


@dataclass(frozen=True)
class DevicePlacement:
    """The device chosen for a run: its kind (recorded in the environment envelope) and the
    torch device string (``cuda:1`` for the second local GPU)."""

    kind: str
    name: str

    def torch_device(self) -> torch.device:
        import torch  # deferred: imports torch

        return torch.device(self.name)


def _device_kind(requested: str, kinds: tuple[str, ...]) -> str:
    """The kind of device ``requested`` names among the ``kinds`` present (``auto``: the first
    of :data:`AUTO_ORDER` present, the CPU at the latest)."""
    if requested == "auto":
        return next(k for k in AUTO_ORDER if k in kinds or k == "cpu")
    if requested in kinds:
        return requested
    raise ConfigError(f"device '{requested}' is not available here (found: {', '.join(kinds)})")


def choose_device(requested: str, *, local_rank: int = 0, found: Sequence[str] | None = None,
                  cuda_count: int | None = None) -> DevicePlacement:
    """The placement for ``requested`` on this machine (``found``: the kinds present, by
    default :func:`available_device_kinds`). Several processes on one machine each take the
    CUDA device of their local rank."""
    if requested not in DEVICE_CHOICES:
        raise ConfigError(f"train.device must be one of {', '.join(DEVICE_CHOICES)}, got '{requested}'")
    kind = _device_kind(requested, tuple(found) if found is not None else available_device_kinds())
    if kind != "cuda":
        return DevicePlacement(kind, kind)
    if cuda_count is None:
        import torch  # deferred: imports torch

        cuda_count = torch.cuda.device_count()
    if local_rank >= cuda_count:
        raise ConfigError(
            f"process with local rank {local_rank} has no CUDA device of its own (found {cuda_count} on this machine)"
        )
    return DevicePlacement("cuda", f"cuda:{local_rank}")
