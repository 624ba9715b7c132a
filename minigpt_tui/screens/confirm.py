"""A question asked before something that cannot be taken back: what it is, its details,
a safe button (focused, and escape) and the button that acts."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class ConfirmScreen(ModalScreen[bool]):
    """Dismisses with True only when the acting button is pressed."""

    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen #confirm {
        width: auto; max-width: 90%; height: auto;
        background: $surface; padding: 1 2; border: round $error;
    }
    ConfirmScreen.-warning #confirm { border: round $warning; }
    ConfirmScreen .buttons { height: auto; margin-top: 1; }
    ConfirmScreen Button { margin-right: 1; }
    """

    # Focused as the dialog is composed, before a key typed right after the one that opened it
    # is handled (a focus set in on_mount comes after it, and the key goes elsewhere).
    AUTO_FOCUS = "#keep"
    BINDINGS = [Binding("escape", "keep", "Keep"),
                # The buttons stand in a row: the arrow keys move between them, as tab does.
                Binding("left", "app.focus_previous", show=False), Binding("right", "app.focus_next", show=False)]

    def __init__(self, title: str, lines: list[str], *, keep: str, act: str, warning: bool = False) -> None:
        super().__init__(classes="-warning" if warning else None)
        self.title_text = title
        self.lines = lines
        self.keep_label = keep
        self.act_label = act

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm") as box:
            box.border_title = self.title_text
            for line in self.lines:
                yield Label(line)
            with Horizontal(classes="buttons"):
                yield Button(self.keep_label, id="keep", variant="primary")
                yield Button(self.act_label, id="act", variant="error")

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "act")

    def action_keep(self) -> None:
        self.dismiss(False)
