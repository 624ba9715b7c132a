"""What counts as a text field: a widget that takes printable keys as text, so a screen's
letter and digit keys cannot reach their actions while it has the keyboard."""

from __future__ import annotations

from textual.widget import Widget
from textual.widgets import Input, TextArea


def is_text_field(widget: Widget | None) -> bool:
    return isinstance(widget, (Input, TextArea))
