"""One head's attention as a picture: a query x key grid of shaded cells, like a heat map.
Each terminal line holds two query positions (the upper half block is the first, the lower
half the second), each column one key position, so a cell is about square. The shade is the
weight itself (dark 0 to bright 1, on a square-root scale so small weights still show); the
cells past the diagonal, which a query never sees, stay blank.

A long prefix shows its last ``PICTURE_POSITIONS`` positions (queries and keys), and says so.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from rich.color import Color
from rich.segment import Segment
from rich.style import Style

from minigpt_tui.widgets.head_role_grid import ramp_colour
from minigpt_tui.widgets.painted_lines import BOLD, DIM, Line, message_line
from minigpt_tui.widgets.pieces import axis_glyph

UPPER, LOWER = "▀", "▄"
SHADES = 24  # distinct shades: a weight is drawn at the nearest of them
PICTURE_POSITIONS = 64  # the last positions drawn (queries and keys)
LABEL_CELLS = 5  # " 12  " before the cells: the first query of the line


def shade_level(weight: float) -> int:
    """A weight's shade, 0 (dark) to SHADES (bright), on a square-root scale."""
    return round(math.sqrt(min(max(weight, 0.0), 1.0)) * SHADES)


@functools.lru_cache(maxsize=SHADES + 1)
def shade_colour(level: int) -> Color:
    return ramp_colour(level / SHADES)


@functools.lru_cache(maxsize=(SHADES + 2) ** 2)
def cell_style(upper: int | None, lower: int | None) -> Style | None:
    """Upper half ``upper``'s shade over lower half ``lower``'s (None: a cell never seen)."""
    if upper is None and lower is None:
        return None
    if upper is None:
        return Style(color=shade_colour(lower))  # type: ignore[arg-type]  # drawn with LOWER
    return Style(color=shade_colour(upper), bgcolor=None if lower is None else shade_colour(lower))


def cell(upper: float | None, lower: float | None) -> Segment:
    up = None if upper is None else shade_level(upper)
    down = None if lower is None else shade_level(lower)
    glyph = " " if up is None and down is None else (LOWER if up is None else UPPER)
    return Segment(glyph, cell_style(up, down))


def picture_row(weights: Sequence[Sequence[float]], query: int, first: int, last: int) -> Line:
    """The line of queries ``query`` and ``query + 1`` over keys ``first..last - 1``."""
    upper = weights[query]
    lower = weights[query + 1] if query + 1 < last else None
    line: Line = [Segment(f"{query:>{LABEL_CELLS - 2}}  ", DIM)]
    for key in range(first, last):
        line.append(cell(upper[key] if key <= query else None,
                         None if lower is None or key > query + 1 else lower[key]))
    return line


def picture_lines(layer: int, head: int, pieces: Sequence[str], weights: Sequence[Sequence[float]]) -> list[Line]:
    """The picture of block ``layer``'s head ``head`` over ``pieces`` (``weights[query][key]``):
    a title, the key axis, two queries a line, and how to read it."""
    length = len(weights)
    first = max(0, length - PICTURE_POSITIONS)
    shown = f"positions {first}-{length - 1} of {length}" if first else f"{length} positions"
    lines: list[Line] = [[Segment(f"block {layer} head {head}", BOLD),
                          Segment(f" · query (rows, two a line) x key (columns) · {shown}", DIM)],
                         message_line(" " * LABEL_CELLS + "".join(axis_glyph(p) for p in pieces[first:length]))]
    lines += [picture_row(weights, query, first, length) for query in range(first, length, 2)]
    lines.append(message_line("shade: weight, dark 0 to bright 1 · ▀ upper query, ▄ lower · "
                              "[ ] block · { } head · j: type one"))
    return lines
