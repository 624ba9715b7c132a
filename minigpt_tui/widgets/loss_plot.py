"""The loss plot: batch loss per update, train and validation loss per evaluation (or the
learning rate, or the gradient norm, per update), optionally another run's curves overlaid
and one probe's expected-answer probability (right axis). The mode (:class:`PlotMode`:
series, log scale, smoothing, the last N updates) is named in the border title.

Each series has a marker of its own besides its colour, named once in the legend line above
the figure, so the legend never covers a curve. The y ticks are round values the same
number of rows apart. Rebuilding a plotext figure is the costliest thing the UI draws, so
redraws are throttled to ``max_redraws_per_second``; a repaint at the same size reuses it."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.style import Style
from rich.text import Text
from textual_plotext import PlotextPlot

from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.messages import LoadedCurve
from minigpt_tui.widgets.plot_scale import (
    PlotMode,
    even_ticks,
    log_ticks,
    positive_logs,
    smoothed,
    within,
)
from minigpt_tui.widgets.throttle import Throttle

Point = tuple[int, float]
TICK_SPACING = 8  # columns per x label: room for "100000" and a gap
LEGEND_ROWS = 1  # the legend line above the figure
FRAME_ROWS = 4  # rows of the figure that are not the canvas: two axes, the x labels, the x axis name
ANSI = {"blue": 4, "orange": 3, "green": 2, "gray": 8, "magenta": 5, "cyan": 6, "red": 1}  # plotext's colour names


@dataclass(frozen=True)
class SeriesStyle:
    """How one series is drawn: its colour, its plotext marker, and the mark the legend shows."""

    label: str
    color: str
    marker: str
    mark: str


BATCH = SeriesStyle("batch", "blue", "braille", "⠤")
TRAIN = SeriesStyle("train", "orange", "•", "•")
VALIDATION = SeriesStyle("val", "green", "+", "+")
OTHER_BATCH = SeriesStyle("batch", "gray", "·", "·")
OTHER_TRAIN = SeriesStyle("train", "magenta", "o", "o")
OTHER_VALIDATION = SeriesStyle("val", "cyan", "x", "x")
PROBE = SeriesStyle("", "red", "*", "*")
PER_UPDATE = {"lr": "lr", "grad_norm": "grad norm"}  # the views of one per-update series


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
        self.lr: list[Point] = []
        self.grad_norm: list[Point] = []
        self.train: list[Point] = []
        self.validation: list[Point] = []
        self.overlay: LoadedCurve | None = None
        self.probe: tuple[str, tuple[Point, ...]] | None = None  # a probe's probability, right axis
        self.probe_label = ""  # how the right-axis series is named in the legend
        self.mode = PlotMode()
        self.redraws = 0
        self.legend = Text()
        self._rendered: tuple[tuple[Any, ...], Text] | None = None

    def on_mount(self) -> None:
        super().on_mount()
        self.border_title = self.mode.title()
        self.redraw()

    # -- data ----------------------------------------------------------------------------
    def reset(self) -> None:
        for series in (self.updates, self.lr, self.grad_norm, self.train, self.validation):
            series.clear()
        self.request_redraw()

    def add_update(self, step: int, loss: float | None, lr: float | None = None, grad_norm: float | None = None) -> None:
        for series, value in ((self.updates, loss), (self.lr, lr), (self.grad_norm, grad_norm)):
            if _drawable(value):  # NaN, infinities and missing values are gaps, never points
                series.append((step, value))  # type: ignore[arg-type]

    def add_evaluation(self, step: int, train_loss: float | None, validation_loss: float | None) -> None:
        if _drawable(train_loss):
            self.train.append((step, train_loss))  # type: ignore[arg-type]
        if _drawable(validation_loss):
            self.validation.append((step, validation_loss))  # type: ignore[arg-type]

    def prepend_history(self, updates: list[Point], train: list[Point], validation: list[Point],
                        lr: Sequence[Point] = (), grad_norm: Sequence[Point] = ()) -> None:
        for series, points in ((self.updates, updates), (self.train, train), (self.validation, validation),
                               (self.lr, lr), (self.grad_norm, grad_norm)):
            series[:0] = [p for p in points if _drawable(p[1])]
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

    # -- the mode ------------------------------------------------------------------------
    def set_mode(self, mode: PlotMode) -> None:
        """Show ``mode`` (series, scale, smoothing, window) now; its title names it."""
        self.mode = mode
        self.border_title = mode.title()
        self.redraw()

    @property
    def span(self) -> int:
        """Updates from the first point drawn to the last (the zoom's full width)."""
        ends = [step for series in self._left_series() for step in (series[0][0], series[-1][0]) if series]
        return max(ends) - min(ends) + 1 if ends else 0

    # -- drawing -------------------------------------------------------------------------
    def request_redraw(self) -> None:
        """Redraw now if the last redraw is old enough, else once the interval has passed."""
        self._throttle.request()

    def redraw(self) -> None:
        """Redraw now."""
        self._throttle.run_now()

    def _redraw(self) -> None:
        self.redraws += 1
        self.refresh()

    def render(self) -> Text:
        """Rebuilding the figure is costly; a repaint with the same data, size and theme
        (a dialog closing, a screen coming back) reuses the last one."""
        if not any(self._left_series()):
            # Nothing to plot yet: skip building an empty figure (it would delay the first frame).
            return Text(f"{self.mode.title().split(' · ')[0].lower()}: no updates yet", style="dim", justify="center")
        key = (self.redraws, self.size, self.app.theme, self.theme, self.mode)
        if self._rendered is None or self._rendered[0] != key:
            figure = self._figure(self.size.width, max(1, self.size.height - LEGEND_ROWS))
            legend = self.legend.copy()
            legend.truncate(self.size.width, overflow="ellipsis")
            self._rendered = (key, Text("\n").join([legend, figure]))
        return self._rendered[1]

    def _figure(self, width: int, height: int) -> Text:
        """The plotext figure at ``width`` x ``height`` (as PlotextPlot.render draws it, less
        the legend's row)."""
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.xlabel("update")
        rows = max(1, height - FRAME_ROWS)
        drawn = self._draw_left(limit=max(2 * width, 40), rows=rows)
        if self.probe is not None:
            points = within(self.probe[1], *self._window())
            if points:
                self._plot_series(points, PROBE, yside="right")
                drawn.append(points)
                right = even_ticks(0.0, 1.0, rows)
                plt.ylim(*right.limits, yside="right")
                plt.yticks(list(right.values), list(right.labels), yside="right")
        if drawn:  # every series is in update order: its ends are its range
            low, high = min(s[0][0] for s in drawn), max(s[-1][0] for s in drawn)
            ticks = whole_ticks(low, high, max(2, width // TICK_SPACING))
            plt.xticks(ticks, [str(t) for t in ticks])
        plt.plotsize(width, height)
        plt._set_size(width, height)  # as PlotextPlot.render does: plotsize alone does not resize
        plt.theme(self._get_plotext_theme_name(self.app.theme))
        return Text.from_ansi(plt.build())

    def _draw_left(self, limit: int, rows: int) -> list[list[Point]]:
        """Draw the view's series of the overlay, then of this run (on top); set the y ticks
        and the legend (this run's series first, then the overlay's under its name, once)."""
        owners = (("", self._view_series()), (self.overlay.name if self.overlay else "", self._overlay_series()))
        shown = [(owner, style, points) for owner, series in owners for style, raw, per_update in series
                 if (points := self._shown(raw, per_update, limit))]
        for _, style, points in reversed(shown):
            self._plot_series(points, style)
        self.legend = self._legend([(owner, style) for owner, style, _ in shown])
        self._set_y_ticks([v for _, _, points in shown for _, v in points], rows)
        return [points for _, _, points in shown]

    def _set_y_ticks(self, values: list[float], rows: int) -> None:
        """Round ticks the same number of rows apart on a linear scale; on a log scale, round
        values where they fall."""
        if values:
            low, high = min(values), max(values)
            ticks = log_ticks(10 ** low, 10 ** high, rows) if self.mode.log else even_ticks(low, high, rows)
            self.plt.ylim(*ticks.limits)
            self.plt.yticks(list(ticks.values), list(ticks.labels))

    def _legend(self, shown: list[tuple[str, SeriesStyle]]) -> Text:
        """Each series drawn once, by its mark; the overlay's under its run's name, once."""
        legend = Text(no_wrap=True, overflow="ellipsis", end="")
        for index, (owner, style) in enumerate(shown):
            if owner and (index == 0 or shown[index - 1][0] != owner):
                legend.append(("   " if legend else "") + f"{escape_controls(owner)}:", style="dim")
            _legend_entry(legend, style.mark, style.label, style.color)
        if self.probe is not None and self.probe[1]:
            _legend_entry(legend, PROBE.mark, f"{escape_controls(self.probe_label)} (right)", PROBE.color)
        if not shown and self.mode.log:
            legend.append("no value above 0 to draw on a log scale (l: linear)", style="dim")
        return legend

    def _shown(self, points: Sequence[Point], per_update: bool, limit: int) -> list[Point]:
        """A series as the mode shows it: smoothed (per-update series), the window's
        updates, at most ``limit`` points, and on a log scale the log10 of the positive ones."""
        mode = self.mode
        first, last = self._window()
        shown = bucket_means(within(smoothed(points, mode.smoothing) if per_update else points, first, last), limit)
        return positive_logs(shown) if mode.log else shown

    def _plot_series(self, points: Sequence[Point], style: SeriesStyle, yside: str = "left") -> None:
        self.plt.plot([step for step, _ in points], [value for _, value in points], color=style.color,
                      marker=style.marker, yside=yside)

    def _window(self) -> tuple[int | None, int | None]:
        """The updates shown: the last N of this run (of the overlay when none), or all."""
        if self.mode.last is None:
            return None, None
        own = [s for s in self._left_series(own_only=True) if s] or [s for s in self._left_series() if s]
        last = max(s[-1][0] for s in own) if own else 0
        return last - self.mode.last + 1, last

    def _view_series(self) -> list[tuple[SeriesStyle, Sequence[Point], bool]]:
        """This run's series in the current view: (style, points, whether it is per update)."""
        view = self.mode.view
        if view in PER_UPDATE:
            return [(_named(BATCH, PER_UPDATE[view]), self.lr if view == "lr" else self.grad_norm, True)]
        return [(BATCH, self.updates, True), (TRAIN, self.train, False), (VALIDATION, self.validation, False)]

    def _overlay_series(self) -> list[tuple[SeriesStyle, Sequence[Point], bool]]:
        curve, view = self.overlay, self.mode.view
        if curve is None:
            return []
        if view in PER_UPDATE:
            return [(_named(OTHER_BATCH, PER_UPDATE[view]), curve.lr if view == "lr" else curve.grad_norm, True)]
        return [(OTHER_BATCH, curve.updates, True), (OTHER_TRAIN, curve.train, False),
                (OTHER_VALIDATION, curve.validation, False)]

    def _left_series(self, own_only: bool = False) -> list[Sequence[Point]]:
        series = [points for _, points, _ in self._view_series()]
        if not own_only:
            series += [points for _, points, _ in self._overlay_series()]
        return series


def _named(style: SeriesStyle, label: str) -> SeriesStyle:
    return SeriesStyle(label, style.color, style.marker, style.mark)


def _legend_entry(legend: Text, mark: str, label: str, color: str) -> None:
    if legend:
        legend.append(" " if legend.plain.endswith(":") else "  ")
    legend.append(mark, style=Style(color=f"color({ANSI[color]})", bold=True))
    legend.append(f" {label}")


def _drawable(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
