"""The Checkpoints screen's layout: the runs panel beside the checkpoint panels or, on a
terminal too narrow for both, aside while the keyboard works in the panels (b, or focusing
the tree, brings it back). The screen's CSS hides ``#runs`` under ``-runs-aside`` unless
the screen is ``-wide``."""

from __future__ import annotations

from collections.abc import Callable

from textual import events
from textual.screen import Screen

from minigpt_tui.widgets.checkpoint_panels import CheckpointPanels
from minigpt_tui.widgets.run_tree import RunTree


class RunsBesideScreen(Screen):
    """A screen with a RunTree beside CheckpointPanels; its bindings name the actions
    ``runs_aside`` and ``runs_beside``."""

    @property
    def runs_aside(self) -> bool:
        """Whether the runs panel is hidden now (only ever below RUNS_BESIDE_FROM columns)."""
        return self.has_class("-runs-aside") and not self.has_class("-wide")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "runs_aside":
            return not self.has_class("-wide") and not self.runs_aside
        if action == "runs_beside":
            return self.runs_aside
        return True

    def on_resize(self) -> None:
        self.call_after_refresh(self.refresh_bindings)

    def _set_runs_aside(self, aside: bool) -> None:
        self.set_class(aside, "-runs-aside")
        self.refresh_bindings()

    def action_runs_aside(self) -> None:
        self._set_runs_aside(True)
        if self.focused is None or self.focused is self.query_one(RunTree):
            self._focus_panels()

    def action_runs_beside(self) -> None:
        self._set_runs_aside(False)
        self.query_one(RunTree).focus()

    def _focus_panels(self) -> None:
        self.query_one(CheckpointPanels).focus_active_panel()

    def action_focus_next(self) -> None:
        self._focus_from_keyboard(self.focus_next)

    def action_focus_previous(self) -> None:
        self._focus_from_keyboard(self.focus_previous)

    def _focus_from_keyboard(self, move: Callable[[], object]) -> None:
        # Leaving the tree from the keyboard puts it aside on a narrow screen; a click never
        # does, since moving the panels under the pointer would change what the click hits.
        tree = self.query_one(RunTree)
        from_tree = self.focused is tree
        move()
        if from_tree and not self.has_class("-wide") and self.focused is not tree:
            self._set_runs_aside(True)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        if self.has_class("-runs-aside") and isinstance(event.widget, RunTree):
            self._set_runs_aside(False)
