"""How a token piece is drawn: visible whitespace, specials set apart, shared by every panel
that shows pieces (prefix, candidates, merges, the tokenizer's try-it field)."""

from __future__ import annotations

import json
from collections.abc import Callable

from rich.markup import escape
from rich.text import Text

from minigpt_tui.engine.core.printable import escape_controls

SPECIAL_PIECES = ("<bos>", "<eos>")
# Whitespace inside a piece would vanish between cell borders; these marks keep it visible.
WHITESPACE_MARKS = {" ": "·", "\n": "↵", "\t": "→", "\r": "␍"}


def plain_cell(value: object) -> str:
    """A table cell of untrusted text (a name or value read from a file) as a string:
    control characters and markup escaped (a string cell of a rich table is read as
    markup), drawn as any other string cell."""
    return escape(escape_controls(value))


def visible_piece(text: str) -> str:
    """A piece label with spaces, newlines and tabs drawn as marks (``' the'`` -> ``'·the'``)
    and every other control character escaped."""
    if text in SPECIAL_PIECES:
        return text
    return escape_controls("".join(WHITESPACE_MARKS.get(ch, ch) for ch in text))


def piece_tests(typed: str) -> tuple[Callable[[str], bool], ...] | None:
    """How a typed piece is looked up, in order: in double quotes, the piece exactly as JSON
    text reads (``" the"``, ``"12"``); else the piece as the screens draw it (``·the``), then
    as typed. None for quotes that do not read as JSON text."""
    if len(typed) >= 2 and typed.startswith('"') and typed.endswith('"'):
        try:
            exact = json.loads(typed)
        except ValueError:
            return None
        return (lambda piece: piece == exact,) if isinstance(exact, str) else None
    return (lambda piece: visible_piece(piece) == typed, lambda piece: piece == typed)


def piece_text(text: str, *, style: str = "") -> Text:
    """A piece as rich Text: specials dim italic, whitespace marks dim, the rest as given."""
    if text in SPECIAL_PIECES:
        return Text(text, style=f"italic {style}".strip() + " dim")
    out = Text(style=style)
    for ch in text:
        mark = WHITESPACE_MARKS.get(ch)
        if mark is not None:
            out.append(mark, style="dim")
        elif (shown := escape_controls(ch)) != ch:
            out.append(shown, style="dim")
        else:
            out.append(ch)
    return out


def fitted_piece(text: str, width: int, *, style: str = "") -> Text:
    """``piece_text`` cut to ``width`` cells, its end replaced by an ellipsis when longer, so
    the columns beside a piece cell stay in view."""
    piece = piece_text(text, style=style)
    piece.truncate(width, overflow="ellipsis")
    return piece


def piece_chips(pieces: list[tuple[int, str]], *, highlight_from: int | None = None,
                marked: set[int] | None = None) -> Text:
    """Pieces side by side between thin dim separators; positions from ``highlight_from``
    on (the generated part) bold, positions in ``marked`` (forced choices) reversed.
    Only bold, dim and reverse are used, so the chips read in light and dark themes."""
    out = Text()
    marked = marked or set()
    for position, (_token_id, text) in enumerate(pieces):
        generated = highlight_from is not None and position >= highlight_from
        style = "bold reverse" if position in marked else ("bold" if generated else "")
        out.append("▕" if position else "", style="dim")
        out.append_text(piece_text(text, style=style))
    return out


def bar(fraction: float, width: int) -> str:
    """A horizontal bar of ``width`` cells filled to ``fraction`` in eighths of a cell."""
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[part] if part else ""
    return ("█" * full + partial).ljust(width)


def axis_glyph(piece: str) -> str:
    """One character standing for a piece on an attention axis (``^`` for a special piece)."""
    return "^" if piece in SPECIAL_PIECES else (visible_piece(piece)[:1] or "·")
