"""The Training screen's plot: where it shows and its keys. From ``WIDE_FROM`` columns the
plot shows beside the loss table; below, the two take turns (``v``), and a plot key shows
the plot in the table's place. The keys: a log y scale (``l``), smoothing (``m``: off, then a
moving average keeping more of the past each time), the series shown (``y``: loss,
learning rate, gradient norm) and a zoom to the last N updates (``+`` / ``-``). The plot's
title names the mode."""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.screen import Screen

from minigpt_tui.screens.run_monitor import RunWidgets
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


class PlotControls(Screen):
    """A base of the Training screen, which sets ``widgets`` when it composes."""

    WIDE_FROM = 120  # from this width the table and the plot both show
    widgets: RunWidgets

    def action_toggle_view(self) -> None:
        if self.size.width >= self.WIDE_FROM:  # both show: say so rather than do nothing
            self.notify(f"the table and the plot both show from {self.WIDE_FROM} columns; v switches them on a "
                        "narrower terminal", title="table/plot", timeout=4, markup=False)
            return
        self.toggle_class("-show-plot")
        self._update_view_hint()

    def on_resize(self, event: events.Resize) -> None:
        self._update_view_hint(event.size.width)

    def _update_view_hint(self, width: int | None = None) -> None:
        """Below the wide breakpoint the table and the plot take turns (``v``): say so."""
        narrow = (width if width is not None else self.size.width) < self.WIDE_FROM
        showing_plot = self.has_class("-show-plot")
        self.widgets.table.border_subtitle = "v: plot" if narrow and not showing_plot else ""
        self.widgets.plot.border_subtitle = f"v: table · {PLOT_KEYS_HINT}" if narrow and showing_plot else PLOT_KEYS_HINT

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
        if not self.has_class("-wide") and not self.has_class("-show-plot"):
            self.add_class("-show-plot")
            self._update_view_hint()
        self.widgets.plot.set_mode(mode)
