"""One head's whole attention pattern as a heat map: a row per query position, a cell per
key position (the prefix tokens label both axes), taller and bolder for more weight. It
scrolls both ways, so a long prefix fits an 80x24 terminal.

The pattern comes from the engine's head-pattern record (weights as plain floats), computed
on a worker.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.segment import Segment
from rich.text import Text
from textual.containers import ScrollableContainer

from minigpt_tui.widgets.attention_view import STYLES, heat_runs
from minigpt_tui.widgets.head_role_grid import HeadRoleGrid
from minigpt_tui.widgets.painted_lines import BOLD, DIM, Line, PaintedLines, lines_text, message_line
from minigpt_tui.widgets.pieces import axis_glyph, fitted_piece

LABEL_CELLS = 10  # "123 piece·" before the cells
EMPTY = "Press h to show one head's whole pattern (layer and head: [ ] and { })."


@functools.lru_cache(maxsize=1024)  # every head move draws the same pieces again
def piece_label(piece: str) -> tuple[Segment, ...]:
    """A piece fitted to its cells, padded to them, as segments (its own styles kept)."""
    label = fitted_piece(piece, LABEL_CELLS - 4)
    console = Console(width=LABEL_CELLS, color_system=None)
    return (*label.render(console, end=""), Segment(" " * (LABEL_CELLS - 4 - label.cell_len)))


def query_line(query: int, piece: str, row: Sequence[float]) -> Line:
    """Query ``query``'s row: its position and piece, a glyph per key up to the diagonal, and
    its largest weight with where it falls."""
    line: Line = [Segment(f"{query:>3} ", DIM), *piece_label(piece)]
    seen = row[: query + 1]
    line += [Segment(text, STYLES[style]) for text, style in heat_runs(seen)]
    if seen:
        top = max(range(len(seen)), key=lambda i: seen[i])
        line.append(Segment(f"  {seen[top]:.2f}@{top}", DIM))
    return line


def pattern_lines(layer: int, head: int, pieces: Sequence[str], weights: Sequence[Sequence[float]]) -> list[Line]:
    lines: list[Line] = [[Segment(f"block {layer} head {head} · query (rows) x key (columns)", BOLD)],
                         message_line(" " * LABEL_CELLS + "".join(axis_glyph(p) for p in pieces))]
    lines += [query_line(query, piece, row) for query, (piece, row) in enumerate(zip(pieces, weights))]
    return [*lines, message_line("height: weight / row max · bold ≥ 0.5 · dim < 0.1 · ^ <bos>")]


def pattern_text(layer: int, head: int, pieces: Sequence[str], weights: Sequence[Sequence[float]]) -> Text:
    return lines_text(pattern_lines(layer, head, pieces, weights))


class HeadPatternView(ScrollableContainer):
    DEFAULT_CSS = """
    HeadPatternView { height: 1fr; }
    HeadPatternView > PaintedLines { width: auto; height: auto; padding: 0 1; }
    """

    def compose(self) -> Any:
        yield HeadRoleGrid(id="head-roles")  # every head's role score, above the one head's pattern
        yield PaintedLines([message_line(EMPTY)], id="head-pattern-text")

    def show_pattern(self, layer: int | None = None, head: int | None = None, pieces: Sequence[str] = (),
                     weights: Sequence[Sequence[float]] = ()) -> None:
        """Draw one head's pattern (nothing given: the hint); another head of the same decision
        keeps the size, so only this view is painted again, without a layout."""
        target = self.query_one("#head-pattern-text", PaintedLines)
        if layer is None or head is None or not weights:
            target.show_message(EMPTY)
            return
        target.show_lines(pattern_lines(layer, head, pieces, weights))
