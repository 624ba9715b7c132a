"""Keys typed ahead into a dialog. A terminal delivers keys typed quickly back to back, so a
key typed right after the one that opens a dialog is handed to the screen below before the
dialog opens, and reaches the app only once the dialog is in front: a tab then moved on in
the dialog, but a character was lost. It belongs in the dialog's field, and goes there."""

from __future__ import annotations

from textual import events
from textual.screen import ModalScreen, Screen

from minigpt_tui.widgets.text_fields import is_text_field


def pass_to_field(front: Screen, event: events.Key) -> bool:
    """Type ``event``, a printable key that reached the app from a widget, into the text field
    of the dialog ``front`` when that field has the keyboard; True when it did. (A field stops
    the printable keys it takes, so any that reaches the app while a dialog's field has the
    keyboard was typed before the dialog opened.)"""
    field = front.focused
    if not (isinstance(front, ModalScreen) and event.is_printable and event.character and is_text_field(field)):
        return False
    assert field is not None
    event.stop()
    event.prevent_default()
    field.post_message(events.Key(event.key, event.character))
    return True
