"""One head's whole attention pattern as a heat map: a row per query position, a cell per
key position (the prefix tokens label both axes), taller and bolder for more weight. It
scrolls both ways, so a long prefix fits an 80x24 terminal.

The pattern comes from the engine's head-pattern record (weights as plain floats), computed
on a worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.containers import ScrollableContainer
from textual.widgets import Static

from minigpt_tui.widgets.attention_view import heat_cell
from minigpt_tui.widgets.head_role_grid import HeadRoleGrid
from minigpt_tui.widgets.pieces import SPECIAL_PIECES, fitted_piece, visible_piece

LABEL_CELLS = 10  # "123 piece·" before the cells
EMPTY = "Press h to show one head's whole pattern (layer and head: [ ] and { })."


def axis_glyph(piece: str) -> str:
    return "^" if piece in SPECIAL_PIECES else (visible_piece(piece)[:1] or "·")


def pattern_text(layer: int, head: int, pieces: Sequence[str], weights: Sequence[Sequence[float]]) -> Text:
    out = Text(no_wrap=True)
    out.append(f"block {layer} head {head} · query (rows) x key (columns)\n", style="bold")
    out.append(" " * LABEL_CELLS + "".join(axis_glyph(p) for p in pieces) + "\n", style="dim")
    for query, (piece, row) in enumerate(zip(pieces, weights)):
        out.append(f"{query:>3} ", style="dim")
        out.append_text(fitted_piece(piece, LABEL_CELLS - 4))
        out.append(" " * (LABEL_CELLS - 4 - fitted_piece(piece, LABEL_CELLS - 4).cell_len))
        row_max = max(row[: query + 1], default=0.0)
        for key, weight in enumerate(row[: query + 1]):
            glyph, style = heat_cell(weight, row_max)
            out.append(glyph, style=style)
        if row:
            top = max(range(query + 1), key=lambda i: row[i])
            out.append(f"  {row[top]:.2f}@{top}", style="dim")
        out.append("\n")
    out.append("height: weight / row max · bold ≥ 0.5 · dim < 0.1 · ^ <bos>", style="dim")
    return out


class HeadPatternView(ScrollableContainer):
    DEFAULT_CSS = """
    HeadPatternView { height: 1fr; }
    HeadPatternView > Static { width: auto; height: auto; padding: 0 1; }
    """

    def compose(self) -> Any:
        yield HeadRoleGrid(id="head-roles")  # every head's role score, above the one head's pattern
        yield Static(Text(EMPTY, style="dim"), id="head-pattern-text")

    def show_pattern(self, layer: int | None = None, head: int | None = None, pieces: Sequence[str] = (),
                     weights: Sequence[Sequence[float]] = ()) -> None:
        target = self.query_one("#head-pattern-text", Static)
        if layer is None or head is None or not weights:
            target.update(Text(EMPTY, style="dim"))
            return
        target.update(pattern_text(layer, head, pieces, weights))
