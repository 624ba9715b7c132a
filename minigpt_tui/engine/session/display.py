"""How values are shown: long ones cut (the last character kept is an ellipsis) and byte
sizes in decimal units, one rule for the command line, the app and the resume preview."""

from __future__ import annotations

ELLIPSIS = "…"


def shorten(text: str, width: int) -> str:
    """``text`` when it fits in ``width`` characters, else its start and an ellipsis."""
    return text if len(text) <= width else text[: width - 1] + ELLIPSIS


def counted(value: object, noun: str, plural: str | None = None) -> str:
    """``value`` and ``noun``, the noun plural unless the value is 1: "1 point", "13 points"
    (``plural`` where adding an s is wrong)."""
    return f"{value} {noun if value == 1 else plural or noun + 's'}"


def human_bytes(count: int) -> str:
    """1234 -> '1.2 kB' (decimal units, as the app and ``cache list`` both say); exact below 1000."""
    if count < 1000:
        return f"{count} B"
    value = float(count)
    for unit in ("kB", "MB", "GB", "TB"):
        value /= 1000
        if value < 1000 or unit == "TB":
            return f"{value:.1f} {unit}"
    return f"{count} B"
