"""Like-for-like timing for the benchmarks: every side is warmed up, then all sides run in
rounds, in an order that rotates each round (so no side always runs first or second, after
the same neighbour), and the result reports each side's median with its spread and the
per-round ratio to a named baseline.

Imported by the ``bench_*.py`` scripts, which run with this folder on ``sys.path``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    name: str
    seconds: tuple[float, ...]  # one per round

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def line(self, unit: float = 1e3, label: str = "ms") -> str:
        return (f"{self.name:<34} median {self.median * unit:9.3f} {label}  "
                f"(best {self.best * unit:.3f}, worst {max(self.seconds) * unit:.3f}, {len(self.seconds)} rounds)")


def interleaved(sides: dict[str, Callable[[], object]], rounds: int, warmup: int = 1) -> dict[str, Timing]:
    """Time each side ``rounds`` times after ``warmup`` untimed calls, rotating the order."""
    names = list(sides)
    for _ in range(warmup):
        for name in names:
            sides[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            start = time.perf_counter()
            sides[name]()
            times[name].append(time.perf_counter() - start)
    return {name: Timing(name, tuple(values)) for name, values in times.items()}


def ratio(side: Timing, baseline: Timing) -> str:
    """``side / baseline``: the median of the per-round ratios, with their range."""
    per_round = [a / b for a, b in zip(side.seconds, baseline.seconds)]
    return (f"{side.name} / {baseline.name} = {statistics.median(per_round):.3g}x "
            f"(rounds {min(per_round):.3g}-{max(per_round):.3g})")
