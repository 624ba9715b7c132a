"""A small dialog that asks for one line of text: a path to open, a run's new name, the
checkpoint to compare with, where to save a trace. Optional choices are listed above the
field. The field has the keyboard when the dialog opens; down (or up) moves to the choices,
and enter on an empty field takes the highlighted choice."""

from __future__ import annotations

from collections.abc import Sequence

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option


class PathPromptScreen(ModalScreen[str | None]):
    """Dismisses with the text entered (stripped, non-empty) or None when cancelled."""

    DEFAULT_CSS = """
    PathPromptScreen { align: center middle; }
    PathPromptScreen #path-prompt {
        width: 76; max-width: 100%; height: auto; max-height: 90%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    PathPromptScreen #path-prompt-choices { height: auto; max-height: 12; margin-bottom: 1; }
    PathPromptScreen .dim { color: $text-muted; width: 100%; }  /* a long prompt wraps, never cut */
    """

    # Focused as the dialog is composed, before a key typed right after the one that opened it
    # is handled (a focus set in on_mount comes after it, and the key goes elsewhere).
    AUTO_FOCUS = "#path-prompt-input"
    BINDINGS = [Binding("escape", "cancel", "Cancel"),
                Binding("down,up", "to_choices", "Choices", show=False)]

    def __init__(self, title: str, prompt: str, *, value: str = "", placeholder: str = "",
                 choices: Sequence[tuple[str, str]] = ()) -> None:
        """``choices`` are (label, value) pairs listed above the field."""
        super().__init__()
        self.title_text = title
        self.prompt = prompt
        self.value = value
        self.placeholder = placeholder
        self.choices = tuple(choices)

    def compose(self) -> ComposeResult:
        with Vertical(id="path-prompt") as box:
            box.border_title = self.title_text
            box.border_subtitle = ("↓ choices · enter accepts · escape cancels" if self.choices
                                 else "enter accepts · escape cancels")
            yield Label(self.prompt, classes="dim")
            if self.choices:
                yield OptionList(*(Option(label, id=str(index)) for index, (label, _value) in enumerate(self.choices)),
                                 id="path-prompt-choices")
            yield Input(value=self.value, placeholder=self.placeholder, id="path-prompt-input")

    def on_mount(self) -> None:
        field = self.query_one(Input)
        field.cursor_blink = False
        field.cursor_position = len(field.value)

    def action_to_choices(self) -> None:
        if self.choices:
            self.query_one(OptionList).focus()

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        index = int(event.option.id or 0)
        self.dismiss(self.choices[index][1])

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text and self.choices:
            highlighted = self.query_one(OptionList).highlighted
            self.dismiss(self.choices[highlighted or 0][1])
            return
        if not text:
            self.notify("type something first, or press escape", severity="warning")
            return
        self.dismiss(text)

    def action_cancel(self) -> None:
        self.dismiss(None)
