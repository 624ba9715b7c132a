"""How long values are cut for showing: one rule for the command line, the app and the
resume preview (the last character kept is an ellipsis)."""

from __future__ import annotations

ELLIPSIS = "…"


def shorten(text: str, width: int) -> str:
    """``text`` when it fits in ``width`` characters, else its start and an ellipsis."""
    return text if len(text) <= width else text[: width - 1] + ELLIPSIS


def counted(value: object, noun: str, plural: str | None = None) -> str:
    """``value`` and ``noun``, the noun plural unless the value is 1: "1 point", "13 points"
    (``plural`` where adding an s is wrong)."""
    return f"{value} {noun if value == 1 else plural or noun + 's'}"
