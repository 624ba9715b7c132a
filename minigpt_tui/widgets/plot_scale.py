"""What the loss plot shows and on what scale: the y ticks (round values, evenly spaced on
the rows), the log scale, smoothing, the window of updates shown, and the plot's mode (which
series, log or linear, how smoothed, how far zoomed), named in its title."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

Point = tuple[int, float]
ROUND_FACTORS = (1.0, 2.0, 2.5, 5.0)  # a tick step is one of these times a power of ten
MOST_INTERVALS = 8  # more ticks than this are noise, however tall the plot


@dataclass(frozen=True)
class Ticks:
    """Tick values, their labels, and the axis limits that put every tick on a row."""

    values: tuple[float, ...]
    labels: tuple[str, ...]
    limits: tuple[float, float]


def round_steps(smallest: float) -> Iterator[float]:
    """Round steps (1, 2, 2.5 or 5 times a power of ten) from ``smallest`` up."""
    exponent = math.floor(math.log10(smallest))
    while True:
        for factor in ROUND_FACTORS:
            step = factor * 10.0 ** exponent
            if step >= smallest * (1 - 1e-9):
                yield step
        exponent += 1


def _decimals(step: float) -> int:
    """Decimals that tell ticks ``step`` apart (2.5 times a power of ten needs one more)."""
    exponent = math.floor(math.log10(step) + 1e-9)
    mantissa = step / 10.0 ** exponent
    return max(0, -exponent) + (1 if abs(mantissa - 2.5) < 1e-9 else 0)


def _spread(low: float, high: float) -> tuple[float, float]:
    """A range with room in it: a flat series gets a little above and below."""
    if high > low:
        return low, high
    pad = abs(low) * 0.05 or 0.5
    return low - pad, high + pad


def _most_intervals(rows: int) -> int:
    return max(1, min(MOST_INTERVALS, (rows - 1) // 2))  # a blank row between two labels


@dataclass(frozen=True)
class _Grid:
    step: float  # between two ticks
    unit: float  # per row: the step over the rows between two ticks
    bottom: float  # the value of the lowest row, a whole number of units
    ticks: int


def even_ticks(low: float, high: float, rows: int) -> Ticks:
    """Round ticks (1, 2, 2.5 or 5 times a power of ten apart) the same number of rows apart
    on a canvas of ``rows`` rows holding ``low`` to ``high``; the limits put every tick on a
    row. Of the ways to do it, the one that leaves the fewest rows empty, fewer than four
    ticks counted as a few more empty rows."""
    low, high = _spread(low, high)
    rows = max(rows, 3)
    grids = list(_grids(low, high, rows, _most_intervals(rows) + 1))
    if not grids:  # only on a canvas of a row or two
        return Ticks((low, high), (f"{low:g}", f"{high:g}"), (low, high))
    grid = min(grids, key=lambda g: (g.unit * (1 + 0.2 * max(0, 4 - g.ticks)), -g.ticks))
    first = math.ceil(grid.bottom / grid.step - 1e-9)
    values = tuple((first + k) * grid.step for k in range(grid.ticks))
    decimals = _decimals(grid.step)
    return Ticks(values, tuple(f"{v:.{decimals}f}" for v in values), (grid.bottom, grid.bottom + grid.unit * (rows - 1)))


def _grids(low: float, high: float, rows: int, most: int) -> Iterator[_Grid]:
    """Every grid of two to ``most`` ticks that holds ``low`` to ``high``."""
    span = high - low
    for step in round_steps(2 * span / (rows - 1)):
        if step > 10 * span:
            return
        for gap in range(2, rows):
            unit = step / gap
            bottom = math.floor(low / unit + 1e-9) * unit
            top = bottom + unit * (rows - 1)
            if top < high - 1e-9 * abs(high):
                continue
            ticks = math.floor(top / step + 1e-9) - math.ceil(bottom / step - 1e-9) + 1
            if 2 <= ticks <= most:
                yield _Grid(step, unit, bottom, ticks)


def log_ticks(low: float, high: float, rows: int) -> Ticks:
    """Ticks of a log scale (the values' log10 on the axis), labelled with the values: over a
    decade or more, 1, 2 and 5 times powers of ten (powers alone when those are too many);
    over less, round values a round step apart, the range widened to the outer ones."""
    low, high = _spread(low, high)
    if low <= 0:
        low = high / 10
    most = _most_intervals(rows)
    if high / low >= 10:
        values = _decade_values(low, high, most)
        labels = tuple(_short(v, max(_decimals(v) for v in values)) for v in values)
    else:
        step = next(s for s in round_steps((high - low) / most)
                    if math.ceil(high / s - 1e-9) - math.floor(low / s + 1e-9) <= most)
        first = max(1, math.floor(low / step + 1e-9))
        values = [k * step for k in range(first, math.ceil(high / step - 1e-9) + 1)]
        labels = tuple(f"{v:.{_decimals(step)}f}" for v in values)
    limits = (math.log10(min(values[0], low)), math.log10(max(values[-1], high)))
    return Ticks(tuple(math.log10(v) for v in values), labels, limits)


def _decade_values(low: float, high: float, most: int) -> list[float]:
    exponents = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    values = [m * 10.0 ** e for e in exponents for m in (1.0, 2.0, 5.0) if low <= m * 10.0 ** e <= high]
    if len(values) > most + 1:
        values = [10.0 ** e for e in exponents if low <= 10.0 ** e <= high]
        values = values[::-(-len(values) // (most + 1))]  # many decades: every few
    return values


def _short(value: float, decimals: int) -> str:
    """``value`` with at most ``decimals`` decimals, trailing zeros dropped (0.0005, 2, 2.5)."""
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def smoothed(points: Sequence[Point], weight: float) -> list[Point]:
    """An exponential moving average, ``weight`` the share kept of the past, corrected for
    its start (so the first points are not pulled toward zero); 0 returns the points."""
    if weight <= 0:
        return list(points)
    out: list[Point] = []
    average, kept = 0.0, 1.0
    for step, value in points:
        average = weight * average + (1 - weight) * value
        kept *= weight
        out.append((step, average / (1 - kept)))
    return out


def within(points: Sequence[Point], first: int | None, last: int | None = None) -> list[Point]:
    """The points from update ``first`` on (all when None), and up to ``last`` when given."""
    return [p for p in points if (first is None or p[0] >= first) and (last is None or p[0] <= last)]


def positive_logs(points: Sequence[Point]) -> list[Point]:
    """The points of a log scale: log10 of each positive value (zero and below are gaps)."""
    return [(step, math.log10(value)) for step, value in points if value > 0]


SERIES_VIEWS = ("loss", "lr", "grad_norm")
VIEW_TITLES = {"loss": "Loss", "lr": "Learning rate", "grad_norm": "Grad norm"}
SMOOTHINGS = (0.0, 0.6, 0.9, 0.97)  # exponential moving average: the share kept of the past
ZOOMS = (None, 10_000, 5_000, 2_000, 1_000, 500, 200, 100, 50, 20)  # the last N updates (None: all)


@dataclass(frozen=True)
class PlotMode:
    """Which series the plot shows, on which scale, how smoothed and over how many updates."""

    view: str = "loss"
    log: bool = False
    smoothing: float = 0.0
    last: int | None = None  # the last N updates (None: all)

    def title(self) -> str:
        """The plot's title: the series, then what differs from the plain linear plot."""
        parts = [VIEW_TITLES[self.view]]
        if self.log:
            parts.append("log")
        if self.smoothing:
            parts.append(f"EMA {self.smoothing:g}")
        if self.last is not None:
            parts.append(f"last {self.last:,} updates")
        return " · ".join(parts)

    def next_view(self) -> PlotMode:
        return replace(self, view=SERIES_VIEWS[(SERIES_VIEWS.index(self.view) + 1) % len(SERIES_VIEWS)])

    def toggled_log(self) -> PlotMode:
        return replace(self, log=not self.log)

    def next_smoothing(self) -> PlotMode:
        index = SMOOTHINGS.index(self.smoothing) if self.smoothing in SMOOTHINGS else 0
        return replace(self, smoothing=SMOOTHINGS[(index + 1) % len(SMOOTHINGS)])

    def zoomed_in(self, span: int) -> PlotMode:
        """The next narrower window than what shows now, for a run of ``span`` updates (a
        window as wide as the run shows nothing new, so it is skipped); the same at the end."""
        shown = span if self.last is None else min(self.last, span)
        narrower = [n for n in ZOOMS if n is not None and n < shown]
        return replace(self, last=narrower[0]) if narrower else self

    def zoomed_out(self, span: int) -> PlotMode:
        """The next wider window; every update once a window would hold the whole run."""
        if self.last is None:
            return self
        wider = [n for n in ZOOMS if n is not None and self.last < n < span]
        return replace(self, last=wider[-1] if wider else None)
