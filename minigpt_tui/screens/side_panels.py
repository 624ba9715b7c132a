"""The Training screen's side panels, each shown in the loss table's place: the probes
table (``p``) and the Watch panel (``h``). The highlighted row's series (a probe's
probability, a head role's score) is drawn on the loss plot's right axis."""

from __future__ import annotations

from textual.screen import Screen

from minigpt_tui.screens.run_monitor import RunMonitor, RunWidgets
from minigpt_tui.widgets.probes_table import ProbesTable
from minigpt_tui.widgets.watch_panel import WatchPanel

PANEL_CLASSES = ("-show-probes", "-show-watch")


class SidePanels(Screen):
    """A base of the Training screen, which sets ``widgets`` and ``monitor`` when it composes."""

    widgets: RunWidgets
    monitor: RunMonitor

    def _toggle_panel(self, shown: str) -> bool:
        """Show the panel of class ``shown`` (hiding the other) or hide it; True when shown.
        Hidden, the plot draws no side series."""
        for name in PANEL_CLASSES:
            if name != shown:
                self.remove_class(name)
        self.toggle_class(shown)
        if not self.has_class(shown):
            self.widgets.plot.set_probe(None)
            return False
        return True

    def action_toggle_probes(self) -> None:
        if self._toggle_panel("-show-probes"):
            self.widgets.probes.focus()
            self.monitor.show_probe(self.widgets.probes.highlighted_probe)

    def action_toggle_watch(self) -> None:
        if self._toggle_panel("-show-watch"):
            self.widgets.watch.focus()
            self.widgets.watch.announce()

    def on_probes_table_probe_highlighted(self, message: ProbesTable.ProbeHighlighted) -> None:
        if self.has_class("-show-probes"):
            self.widgets.plot.set_probe(message.name, message.points)

    def on_watch_panel_role_highlighted(self, message: WatchPanel.RoleHighlighted) -> None:
        if self.has_class("-show-watch"):
            self.widgets.plot.set_probe(message.name, message.points, label=message.name)
