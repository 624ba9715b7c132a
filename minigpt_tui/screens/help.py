"""Help for the screen in front: every record it shows, and the keys that work everywhere.

Each screen provides its own text as the ``HELP`` class attribute (Markdown); the ideas its
words call for follow it."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from minigpt_tui.screens.concepts import concepts_in, concepts_markdown


def help_markdown(screen: Screen, global_keys: list[tuple[str, str]]) -> str:
    text = screen.HELP or f"# {type(screen).__name__}\n\nThis screen has no help text yet."
    rows = "\n".join(f"| `{key}` | {what} |" for key, what in global_keys)
    found = concepts_in(text)
    if found:
        text = f"{text}\n\n## Ideas behind these numbers\n{concepts_markdown(found)}"
    return f"{text}\n\n## Keys everywhere\n| key | action |\n|---|---|\n{rows}\n\nPress `escape` or `?` to close this help.\n"


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape", "dismiss", "Close"), Binding("question_mark", "dismiss", "Close", show=False)]

    def __init__(self, about: Screen, global_keys: list[tuple[str, str]]) -> None:
        super().__init__()
        self.about = about
        self.markdown = help_markdown(about, global_keys)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body") as body:
            body.border_title = f"Help: {getattr(self.about, 'HELP_TITLE', None) or type(self.about).__name__}"
            body.border_subtitle = "escape closes"
            # Rich's Markdown in one Static: a Markdown widget builds a widget per block and
            # per table cell, which took a few hundred milliseconds to open while training.
            from rich.markdown import Markdown  # deferred: off the first frame

            yield Static(Markdown(self.markdown), id="help-text")

    def on_mount(self) -> None:
        self.query_one("#help-body").focus()

    def action_dismiss(self, result: None = None) -> None:  # type: ignore[override]
        self.dismiss(None)
