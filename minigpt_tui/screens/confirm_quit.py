"""Asked before quitting while a run is active and has updates not yet saved."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class ConfirmQuitScreen(ModalScreen[str | None]):
    """Dismisses with "save", "discard" or None (stay)."""

    BINDINGS = [Binding("escape", "stay", "Stay")]

    def __init__(self, unsaved_updates: int) -> None:
        super().__init__()
        self.unsaved_updates = unsaved_updates

    def compose(self) -> ComposeResult:
        plural = "s" if self.unsaved_updates != 1 else ""
        with Vertical(id="confirm-quit") as box:
            box.border_title = "Quit?"
            yield Label(f"A run is active with {self.unsaved_updates} unsaved update{plural}.")
            yield Label("Save stops the run at the next update and saves a checkpoint first.")
            with Horizontal(classes="buttons"):
                yield Button("Save and quit", id="save", variant="primary")
                yield Button("Quit without saving", id="discard", variant="error")
                yield Button("Stay", id="stay")

    def on_mount(self) -> None:
        self.query_one("#save", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "stay" else event.button.id)

    def action_stay(self) -> None:
        self.dismiss(None)
