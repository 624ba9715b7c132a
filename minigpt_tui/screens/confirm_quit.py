"""Asked before quitting while a run is active and has updates not yet saved. Training goes
on behind the dialog: the Training screen keeps its count current (:meth:`show_unsaved`)."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class ConfirmQuitScreen(ModalScreen[str | None]):
    """Dismisses with "save", "discard" or None (stay)."""

    # Focused as the dialog is composed, before a key typed right after the one that opened it
    # is handled (a focus set in on_mount comes after it, and the key goes elsewhere).
    AUTO_FOCUS = "#save"
    BINDINGS = [Binding("escape", "stay", "Stay"),
                # The buttons stand in a row: the arrow keys move between them, as tab does.
                Binding("left", "app.focus_previous", show=False), Binding("right", "app.focus_next", show=False)]

    def __init__(self, unsaved_updates: int) -> None:
        super().__init__()
        self.unsaved_updates = unsaved_updates
        self.run_active = True

    @staticmethod
    def unsaved_text(unsaved_updates: int, active: bool) -> str:
        if not active:
            return "The run has ended; nothing more will be trained."
        if not unsaved_updates:
            return "A run is active; every update so far is saved."
        plural = "s" if unsaved_updates != 1 else ""
        return f"A run is active with {unsaved_updates} unsaved update{plural}."

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-quit") as box:
            box.border_title = "Quit?"
            yield Label(self.unsaved_text(self.unsaved_updates, self.run_active), id="unsaved")
            yield Label("Save stops the run at the next update and saves a checkpoint first.")
            with Horizontal(classes="buttons"):
                yield Button("Save and quit", id="save", variant="primary")
                yield Button("Quit without saving", id="discard", variant="error")
                yield Button("Stay", id="stay")

    def show_unsaved(self, unsaved_updates: int, *, active: bool) -> None:
        """The run behind the dialog moved on: say how many updates are unsaved now."""
        if (unsaved_updates, active) == (self.unsaved_updates, self.run_active):
            return
        self.unsaved_updates, self.run_active = unsaved_updates, active
        # Once composed, whether mounted yet or not: a count given while the dialog mounts
        # must not leave the label with the count it was composed with.
        for label in self.query("#unsaved").results(Label):
            label.update(self.unsaved_text(unsaved_updates, active))

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "stay" else event.button.id)

    def action_stay(self) -> None:
        self.dismiss(None)
