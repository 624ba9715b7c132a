"""Asked before a run folder is deleted: what goes, and how much disk it frees."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class ConfirmDeleteScreen(ModalScreen[bool]):
    """Dismisses with True only when the delete button is pressed."""

    DEFAULT_CSS = """
    ConfirmDeleteScreen { align: center middle; }
    ConfirmDeleteScreen #confirm-delete {
        width: auto; max-width: 90%; height: auto;
        border: round $error; background: $surface; padding: 1 2;
    }
    ConfirmDeleteScreen .buttons { height: auto; margin-top: 1; }
    ConfirmDeleteScreen Button { margin-right: 1; }
    """

    BINDINGS = [Binding("escape", "keep", "Keep"),
                # The buttons stand in a row: the arrow keys move between them, as tab does.
                Binding("left", "app.focus_previous", show=False), Binding("right", "app.focus_next", show=False)]

    def __init__(self, what: str, details: list[str]) -> None:
        super().__init__()
        self.what = what
        self.details = details

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-delete") as box:
            box.border_title = "Delete?"
            yield Label(f"Delete {self.what}?")
            for line in self.details:
                yield Label(line)
            yield Label("This cannot be undone.")
            with Horizontal(classes="buttons"):
                yield Button("Keep", id="keep", variant="primary")
                yield Button("Delete", id="delete", variant="error")

    def on_mount(self) -> None:
        self.query_one("#keep", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "delete")

    def action_keep(self) -> None:
        self.dismiss(False)
