"""One tensor's statistics read in bounded pieces: a tensor of any size costs a few pieces
of memory, reports how far it has got, and can be stopped between pieces.

A tensor that fits in one piece is summarised exactly as a whole (the figures every earlier
version gave). A larger one takes two passes: the first gathers min, max, the NaN, ±inf and
zero counts (exact) and each piece's float64 mean and sum of squared deviations, merged
piece by piece (Chan, Golub and LeVeque's pairwise update; mean and std agree with a
whole-tensor float64 computation to about 1e-12 relative); the second counts the histogram
between the first pass's min and max (exact: each value lands in the bin it would as a whole).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.formats.safetensors_format import TensorEntry
from minigpt_tui.engine.formats.safetensors_read import (
    Header,
    InvalidSafetensors,
    Violation,
    opening_errors,
    require_memory_for,
    tensor_from_bytes,
)

if TYPE_CHECKING:
    import torch

PIECE_ELEMENTS = 1 << 22  # values per piece: 32 MiB as float64, a few of them alive at once
# going(fraction done) -> whether to go on; asked between pieces
Going = Callable[[float], bool]


class StatisticsStopped(Exception):
    """Not for users: the caller asked to stop between pieces (nothing is reported)."""


@dataclass(frozen=True)
class TensorSource:
    """A tensor to summarise: what its file records, and its values as flat pieces."""

    file: Path
    name: str
    dtype: str
    shape: tuple[int, ...]
    elements: int
    bytes_read: int
    pieces: Callable[[int], Iterator["torch.Tensor"]]  # pieces(size): flat values, ``size`` at a time


def file_source(path: Path, header: Header, name: str) -> TensorSource:
    """The tensor ``name`` of the safetensors file at ``path``, read from the file piece by
    piece (never whole). A tensor larger than the memory available is still refused, as
    reading it whole was: its pieces would take as long as the disk needs for all of it."""
    entry = header.entry(name)
    require_memory_for(path, entry.nbytes, f"tensor '{name}'")
    start = header.data_start + entry.begin
    return TensorSource(path, name, entry.dtype, entry.shape, entry.elements, entry.nbytes,
                        lambda size: _file_pieces(path, entry, start, size))


def tensor_source(file: Path, name: str, dtype: str, shape: tuple[int, ...], tensor: Any,
                  bytes_read: int) -> TensorSource:
    """A tensor another reader has mapped or read: pieces are views of its flat values."""
    flat = tensor.reshape(-1)  # a view when contiguous (a mapped pickle's pages are read piece by piece)

    def pieces(size: int) -> Iterator["torch.Tensor"]:
        for begin in range(0, flat.numel(), size):
            yield flat[begin:begin + size]

    return TensorSource(file, name, dtype, tuple(shape), flat.numel(), bytes_read, pieces)


def _file_pieces(path: Path, entry: TensorEntry, start: int, size: int) -> Iterator["torch.Tensor"]:
    """Each piece is a view of one buffer, read again for the next piece: a piece is valid
    until the next is asked for (the summary converts each to float64 first)."""
    itemsize = entry.nbytes // entry.elements if entry.elements else 0
    buffer = bytearray(min(size, entry.elements) * itemsize)
    with opening_errors(path, "a safetensors file"), path.open("rb") as fh:
        fh.seek(start)
        for begin in range(0, entry.elements, size):
            count = min(size, entry.elements - begin)
            got = fh.readinto(memoryview(buffer)[:count * itemsize])
            if got != count * itemsize:
                raise InvalidSafetensors(path, Violation.TRUNCATED_DATA,
                                         f"tensor '{entry.name}' is cut short ({begin * itemsize + got} "
                                         f"of {entry.nbytes} bytes)")
            piece = TensorEntry(entry.name, entry.dtype, (count,), 0, count * itemsize)
            yield tensor_from_bytes(piece, buffer, 0)


def summarise(source: TensorSource, bins: int, going: Going | None = None) -> dict[str, Any]:
    """min, max, mean, std (population), zero fraction, NaN and ±inf counts and a histogram
    of ``source``; StatisticsStopped when ``going`` says stop."""
    if source.elements <= PIECE_ELEMENTS:
        whole = next(source.pieces(max(source.elements, 1)), None)
        if whole is None:  # no values at all
            return summary_of_values(source, None, bins, is_complex=False)
        return summary_of_values(source, _flat_float64(whole), bins, is_complex=whole.is_complex())
    return _streamed(source, bins, going or (lambda fraction: True))


def _record(source: TensorSource, is_complex: bool) -> dict[str, Any]:
    return {
        "file": str(source.file),
        "name": source.name,
        "dtype": source.dtype,
        "shape": list(source.shape),
        "elements": source.elements,
        "bytes_read": source.bytes_read,
        # complex values are summarised by their magnitudes |z|; every other dtype by its values
        "of": "magnitudes |z|" if is_complex else "values",
    }


def summary_of_values(source: TensorSource, values: "torch.Tensor | None", bins: int, *,
                      is_complex: bool) -> dict[str, Any]:
    """The statistics of the whole tensor's values (float64, flat; None when it has none)."""
    import torch  # deferred: imports torch

    count = values.numel() if values is not None else 0
    if values is None:
        values = torch.zeros(0, dtype=torch.float64)
    # NaN and infinities show in min/max, so one cheap reduction tells whether to mask.
    extremes = [float(v) for v in torch.aminmax(values)] if count else [0.0, 0.0]
    nonfinite, nan, finite = _finite_part(values, extremes)
    result = _record(source, is_complex) | {"elements": count, "nan": nan, "inf": nonfinite - nan}
    if finite.numel() == 0:
        result.update(min=None, max=None, mean=None, std=None, zero_fraction=None, histogram={"edges": [], "counts": []})
        return result
    low, high = extremes if finite is values else [float(v) for v in torch.aminmax(finite)]
    mean = float(finite.mean())
    std = float(finite.std(correction=0)) if finite.numel() > 1 else 0.0
    counts, edges = _histogram(finite, low, high, bins)
    result.update(
        min=low,
        max=high,
        mean=mean,
        std=std,
        zero_fraction=float((values == 0).sum()) / count,
        histogram={"edges": edges, "counts": [int(c) for c in counts.tolist()]},
    )
    return result


@dataclass
class _Moments:
    """Running figures of the first pass (mutable: one per summary, on one thread)."""

    finite: int = 0
    mean: float = 0.0
    m2: float = 0.0  # sum of squared deviations from the mean
    low: float = math.inf
    high: float = -math.inf
    nan: int = 0
    nonfinite: int = 0
    zeros: int = 0

    def add(self, values: "torch.Tensor") -> None:
        import torch  # deferred: imports torch

        self.zeros += int((values == 0).sum())
        extremes = [float(v) for v in torch.aminmax(values)]
        nonfinite, nan, finite = _finite_part(values, extremes)
        self.nonfinite += nonfinite
        self.nan += nan
        count = finite.numel()
        if count == 0:
            return
        low, high = extremes if finite is values else [float(v) for v in torch.aminmax(finite)]
        self.low, self.high = min(self.low, low), max(self.high, high)
        variance, piece_mean = torch.var_mean(finite, correction=0)
        mean, m2 = float(piece_mean), float(variance) * count
        total = self.finite + count
        delta = mean - self.mean
        self.mean += delta * count / total
        self.m2 += m2 + delta * delta * self.finite * count / total
        self.finite = total


def _streamed(source: TensorSource, bins: int, going: Going) -> dict[str, Any]:
    import torch  # deferred: imports torch

    scratch = torch.empty(PIECE_ELEMENTS, dtype=torch.float64)  # each piece's float64 values, in turn
    moments, is_complex = _moments_pass(source, scratch, going)
    result = _record(source, is_complex) | {"nan": moments.nan, "inf": moments.nonfinite - moments.nan}
    if moments.finite == 0:
        result.update(min=None, max=None, mean=None, std=None, zero_fraction=None, histogram={"edges": [], "counts": []})
        return result
    low, high = moments.low, moments.high
    # every finite value equal: one bin, and no second pass
    counts = torch.tensor([float(moments.finite)], dtype=torch.float64)
    if high > low:
        counts = _histogram_pass(source, bins, low, high, moments.nonfinite > 0, scratch, going)
    elif not going(1.0):
        raise StatisticsStopped
    edges = [low + (high - low) * i / bins for i in range(bins + 1)] if high > low else [low, high]
    result.update(
        min=low,
        max=high,
        mean=moments.mean,
        std=math.sqrt(moments.m2 / moments.finite) if moments.finite > 1 else 0.0,
        zero_fraction=moments.zeros / source.elements,
        histogram={"edges": edges, "counts": [int(c) for c in counts.tolist()]},
    )
    return result


def _moments_pass(source: TensorSource, scratch: "torch.Tensor", going: Going) -> tuple[_Moments, bool]:
    """Counts, range, mean and spread piece by piece (the first pass), and whether complex."""
    moments = _Moments()
    done = 0
    is_complex = False
    for piece in source.pieces(PIECE_ELEMENTS):
        is_complex = is_complex or piece.is_complex()
        moments.add(_as_float64(piece, scratch))
        done += piece.numel()
        if not going(done / source.elements / 2):
            raise StatisticsStopped
    return moments, is_complex


def _histogram_pass(source: TensorSource, bins: int, low: float, high: float, masked: bool,
                    scratch: "torch.Tensor", going: Going) -> "torch.Tensor":
    """The histogram's counts between ``low`` and ``high``, piece by piece (the second pass)."""
    import torch  # deferred: imports torch

    counts = torch.zeros(bins, dtype=torch.float64)
    done = 0
    for piece in source.pieces(PIECE_ELEMENTS):
        values = _as_float64(piece, scratch)
        counts += torch.histc(values[torch.isfinite(values)] if masked else values, bins=bins, min=low, max=high)
        done += piece.numel()
        if not going(0.5 + done / source.elements / 2):
            raise StatisticsStopped
    return counts


def _as_float64(piece: "torch.Tensor", scratch: "torch.Tensor") -> "torch.Tensor":
    """A flat piece's values as float64, in ``scratch`` when a plain copy converts them."""
    import torch  # deferred: imports torch

    if piece.is_complex() or piece.dtype == torch.uint64:
        return _flat_float64(piece)
    values = scratch[:piece.numel()]
    values.copy_(piece)
    return values


def _flat_float64(tensor: "torch.Tensor") -> "torch.Tensor":
    """The tensor's values as one float64 row (complex ones by magnitude; uint64 through
    numpy, which torch cannot convert)."""
    import torch  # deferred: imports torch

    if tensor.dtype == torch.uint64:
        return torch.from_numpy(tensor.numpy().astype("float64")).reshape(-1)
    if tensor.is_complex():
        return tensor.abs().to(torch.float64).reshape(-1)
    return tensor.to(torch.float64).reshape(-1)


def _finite_part(values: "torch.Tensor", extremes: list[float]) -> tuple[int, int, "torch.Tensor"]:
    """(non-finite count, NaN count, the finite values); masks only when min or max is not finite."""
    import torch  # deferred: imports torch

    if all(math.isfinite(v) for v in extremes):
        return 0, 0, values
    finite_mask = torch.isfinite(values)
    nonfinite = values.numel() - int(finite_mask.sum())
    nan = int(torch.isnan(values).sum())
    return nonfinite, nan, values[finite_mask]


def _histogram(finite: "torch.Tensor", low: float, high: float, bins: int) -> tuple["torch.Tensor", list[float]]:
    """Counts and bin edges over [low, high]; one bin holding everything when all are equal."""
    import torch  # deferred: imports torch

    if high > low:
        return torch.histc(finite, bins=bins, min=low, max=high), [low + (high - low) * i / bins for i in range(bins + 1)]
    return torch.tensor([float(finite.numel())]), [low, high]
