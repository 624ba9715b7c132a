"""The Training screen's plot keys: a log y scale (``l``), smoothing (``m``: off, then a
moving average keeping more of the past each time), the series shown (``y``: loss,
learning rate, gradient norm) and a zoom to the last N updates (``+`` / ``-``). The plot's
title names the mode; on a narrow terminal a plot key shows the plot in the table's place."""

from __future__ import annotations

from typing import Any

from textual.binding import Binding

from minigpt_tui.widgets.plot_scale import PlotMode

PLOT_KEYS_HINT = "l:log m:smooth y:series +/-:zoom"

PLOT_BINDINGS = [
    Binding("l", "plot_log", "Log scale", show=False),
    Binding("m", "plot_smoothing", "Smoothing", show=False),
    Binding("y", "plot_series", "Plot series", show=False),
    Binding("plus,equals_sign", "plot_zoom_in", "Zoom in", show=False),
    Binding("minus", "plot_zoom_out", "Zoom out", show=False),
]

PLOT_PALETTE_COMMANDS = (
    ("Plot: log scale", "Switch the plot's y axis between linear and log (l)", "plot_log"),
    ("Plot: smoothing", "Cycle the plot's smoothing: off, then a moving average of 0.6, 0.9, 0.97 (m)",
     "plot_smoothing"),
    ("Plot: series", "Cycle the plotted series: loss, learning rate, gradient norm (y)", "plot_series"),
    ("Plot: zoom in", "Show fewer of the latest updates on the plot (+)", "plot_zoom_in"),
    ("Plot: zoom out", "Show more updates on the plot, up to all of them (-)", "plot_zoom_out"),
)


class PlotControls:
    """Mixed into the Training screen (which has ``widgets`` and ``_update_view_hint``)."""

    widgets: Any

    def action_plot_log(self) -> None:
        self._set_plot_mode(self.widgets.plot.mode.toggled_log())

    def action_plot_smoothing(self) -> None:
        self._set_plot_mode(self.widgets.plot.mode.next_smoothing())

    def action_plot_series(self) -> None:
        self._set_plot_mode(self.widgets.plot.mode.next_view())

    def action_plot_zoom_in(self) -> None:
        plot = self.widgets.plot
        self._set_plot_mode(plot.mode.zoomed_in(plot.span))

    def action_plot_zoom_out(self) -> None:
        plot = self.widgets.plot
        self._set_plot_mode(plot.mode.zoomed_out(plot.span))

    def _set_plot_mode(self, mode: PlotMode) -> None:
        """Show the plot in ``mode``; below the wide breakpoint, in the table's place."""
        if not self.has_class("-wide") and not self.has_class("-show-plot"):  # type: ignore[attr-defined]
            self.add_class("-show-plot")  # type: ignore[attr-defined]
            self._update_view_hint()  # type: ignore[attr-defined]
        self.widgets.plot.set_mode(mode)
