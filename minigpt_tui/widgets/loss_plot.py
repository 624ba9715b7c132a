"""The loss plot: batch loss per update, train and validation loss per evaluation, and
optionally another run's curves overlaid and one probe's expected-answer probability (right
axis). Rebuilding a plotext figure is the costliest
thing the UI draws, so redraws are throttled to ``max_redraws_per_second``."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from rich.text import Text
from textual_plotext import PlotextPlot

from minigpt_tui.messages import LoadedCurve
from minigpt_tui.widgets.throttle import Throttle

Point = tuple[int, float]
TICK_SPACING = 8  # columns per x label: room for "100000" and a gap


def bucket_means(points: Sequence[Point], limit: int) -> list[Point]:
    """At most ``limit`` points: consecutive buckets averaged, the last step kept exact."""
    if len(points) <= limit or limit < 2:
        return list(points)
    size = -(-len(points) // limit)
    out: list[Point] = []
    for start in range(0, len(points), size):
        chunk = points[start:start + size]
        out.append((chunk[-1][0], sum(v for _, v in chunk) / len(chunk)))
    return out


def whole_ticks(low: int, high: int, most: int) -> list[int]:
    """At most ``most`` whole-number ticks between ``low`` and ``high``, a round step apart
    (1, 2 or 5 times a power of ten): updates are counted, so a label never reads 50.2."""
    if high <= low:
        return [low]
    step = 1
    while True:
        for factor in (1, 2, 5):
            candidate = step * factor
            first = -(-low // candidate) * candidate
            ticks = list(range(first, high + 1, candidate))
            if len(ticks) <= max(most, 2):
                return ticks if len(ticks) >= 2 else [low, high]
        step *= 10


class LossPlot(PlotextPlot):
    DEFAULT_CSS = """
    LossPlot { height: 1fr; min-height: 8; }
    """

    def __init__(self, *, max_redraws_per_second: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._throttle = Throttle(self._redraw, clock=clock, per_second=max_redraws_per_second,
                                  set_timer=lambda wait, then: self.set_timer(wait, then))
        self.updates: list[Point] = []
        self.train: list[Point] = []
        self.validation: list[Point] = []
        self.overlay: LoadedCurve | None = None
        self.probe: tuple[str, tuple[Point, ...]] | None = None  # a probe's probability, right axis
        self.probe_label = ""  # how the right-axis series is named in the legend
        self.redraws = 0
        self._rendered: tuple[tuple[Any, ...], Text] | None = None

    def on_mount(self) -> None:
        super().on_mount()
        self.redraw()

    def on_resize(self) -> None:
        # The labels and the points kept depend on the width: a plot drawn while hidden (the
        # table shown) had none, and would show two labels until the next update.
        self.request_redraw()

    # -- data ----------------------------------------------------------------------------
    def reset(self) -> None:
        self.updates.clear()
        self.train.clear()
        self.validation.clear()
        self.request_redraw()

    def add_update(self, step: int, loss: float | None) -> None:
        if _drawable(loss):  # NaN, infinities and missing values are gaps, never points
            self.updates.append((step, loss))  # type: ignore[arg-type]

    def add_evaluation(self, step: int, train_loss: float | None, validation_loss: float | None) -> None:
        if _drawable(train_loss):
            self.train.append((step, train_loss))  # type: ignore[arg-type]
        if _drawable(validation_loss):
            self.validation.append((step, validation_loss))  # type: ignore[arg-type]

    def prepend_history(self, updates: list[Point], train: list[Point], validation: list[Point]) -> None:
        self.updates[:0] = [p for p in updates if _drawable(p[1])]
        self.train[:0] = [p for p in train if _drawable(p[1])]
        self.validation[:0] = [p for p in validation if _drawable(p[1])]
        self.redraw()

    def set_overlay(self, curve: LoadedCurve | None) -> None:
        self.overlay = curve
        self.redraw()

    def set_probe(self, name: str | None, points: Sequence[Point] = (), *, label: str | None = None) -> None:
        """Draw a probe's expected-answer probability by update on the right axis (0 to 1);
        ``label`` names another 0-to-1 series (a head role's score) as it is."""
        probe = (name, tuple(points)) if name is not None and points else None
        self.probe_label = label or f"p({name})"
        if probe != self.probe:
            self.probe = probe
            self.request_redraw()

    # -- drawing -------------------------------------------------------------------------
    def request_redraw(self) -> None:
        """Redraw now if the last redraw is old enough, else once the interval has passed."""
        self._throttle.request()

    def redraw(self) -> None:
        """Redraw now."""
        self._throttle.run_now()

    def _redraw(self) -> None:
        self.redraws += 1
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.xlabel("update")
        limit = max(2 * self.size.width, 40)
        if self.overlay is not None:
            self._line(self.overlay.updates, f"{self.overlay.name} batch", "gray", limit)
            self._line(self.overlay.train, f"{self.overlay.name} train", "magenta", limit)
            self._line(self.overlay.validation, f"{self.overlay.name} val", "cyan", limit)
        self._line(self.updates, "batch", "blue", limit)
        self._line(self.train, "train", "orange", limit)
        self._line(self.validation, "val", "green", limit)
        if self.probe is not None:
            name, points = self.probe
            self._line(points, self.probe_label, "red", limit, yside="right")
            self.plt.ylim(0, 1, yside="right")
        drawn = [series for series in self._series() if series]
        if drawn:  # every series is in update order: its ends are its range
            low, high = min(s[0][0] for s in drawn), max(s[-1][0] for s in drawn)
            ticks = whole_ticks(low, high, max(2, self.size.width // TICK_SPACING))
            plt.xticks(ticks, [str(t) for t in ticks])
        self.refresh()

    def _series(self) -> list[Sequence[Point]]:
        series: list[Sequence[Point]] = [self.updates, self.train, self.validation]
        if self.overlay is not None:
            series += [self.overlay.updates, self.overlay.train, self.overlay.validation]
        if self.probe is not None:
            series.append(self.probe[1])
        return series

    def render(self) -> Text:
        """Rebuilding the figure is costly; a repaint with the same data, size and theme
        (a dialog closing, a screen coming back) reuses the last one."""
        if not (self.updates or self.train or self.overlay):
            # Nothing to plot yet: skip building an empty figure (it would delay the first frame).
            return Text("loss: no updates yet", style="dim", justify="center")
        key = (self.redraws, self.size, self.app.theme, self.theme)
        if self._rendered is None or self._rendered[0] != key:
            self._rendered = (key, super().render())
        return self._rendered[1]

    def _line(self, points: Sequence[Point], label: str, color: str, limit: int, yside: str = "left") -> None:
        if not points:
            return
        shown = bucket_means(points, limit)
        xs = [step for step, _ in shown]
        ys = [value for _, value in shown]
        marker = "braille" if len(shown) > 12 else "dot"
        self.plt.plot(xs, ys, label=label, color=color, marker=marker, yside=yside)


def _drawable(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
