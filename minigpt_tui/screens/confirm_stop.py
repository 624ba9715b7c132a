"""Asked before the app stops a run that another process trains (an attached run): the
run, the process that would end, and that quitting the app would leave it running."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class ConfirmStopScreen(ModalScreen[bool]):
    """Dismisses with True only when the stop button is pressed."""

    DEFAULT_CSS = """
    ConfirmStopScreen { align: center middle; }
    ConfirmStopScreen #confirm-stop {
        width: auto; max-width: 90%; height: auto;
        border: round $warning; background: $surface; padding: 1 2;
    }
    ConfirmStopScreen .buttons { height: auto; margin-top: 1; }
    ConfirmStopScreen Button { margin-right: 1; }
    """

    BINDINGS = [Binding("escape", "keep", "Keep following"),
                Binding("left", "app.focus_previous", show=False), Binding("right", "app.focus_next", show=False)]

    def __init__(self, run_name: str, process: str) -> None:
        super().__init__()
        self.run_name = run_name
        self.process = process

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-stop") as box:
            box.border_title = "Stop a run this app did not start?"
            yield Label(f"Stop the run {self.run_name}?")
            yield Label(f"It is trained by {self.process}, not by this app.")
            yield Label("It saves at its next update and that process ends.")
            yield Label("Quitting the app instead leaves it running.")
            with Horizontal(classes="buttons"):
                yield Button("Keep following", id="keep", variant="primary")
                yield Button("Stop the run", id="stop", variant="error")

    def on_mount(self) -> None:
        self.query_one("#keep", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "stop")

    def action_keep(self) -> None:
        self.dismiss(False)
