"""One way to put untrusted text in front of a person: every control character escaped.

Tensor names, metadata values, file names, pieces and error messages come from files and
command lines the user may not have written. Printed raw, ``ESC [ 2 J`` clears the screen
and an OSC sequence retitles the terminal. :func:`escape_controls` shows each C0 and C1
control character, DEL and any lone surrogate as a visible backslash escape; JSON output
does not need it (``json.dumps`` escapes them already).
"""

from __future__ import annotations

from functools import cache

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


@cache
def _escape_table() -> dict[int, str]:
    table: dict[int, str] = {}
    for code in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]:
        table[code] = _NAMED.get(chr(code), f"\\x{code:02x}")
    for code in range(0xD800, 0xE000):  # lone surrogates (undecodable bytes of a command line)
        table[code] = f"\\u{code:04x}"
    return table


def escape_controls(text: object) -> str:
    """``text`` (any value, as ``str``) with every control character made visible."""
    return str(text).translate(_escape_table())
