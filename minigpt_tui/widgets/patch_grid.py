"""The activation-patching grid: a row per layer (or per head of one layer), a column per
position labelled by the corrupt prompt's pieces, each cell the engine's ``restored`` for
that site, coloured by how much of the clean answer it brings back (see :func:`legend`).
The effects are the engine's own records (plain floats), computed on the worker."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from minigpt_tui.engine.session.view_names import patch_site_name
from minigpt_tui.widgets.pieces import fitted_piece

# (lowest restored, style, legend label); a value takes the last level it reaches
LEVELS = ((float("-inf"), "white on dark_blue", "< 0"), (0.0, "", "0"), (0.1, "on grey30", "≥ .1"),
          (0.3, "on dark_orange3", "≥ .3"), (0.6, "black on orange1", "≥ .6"), (0.9, "bold black on gold1", "≥ .9"))
PIECE_CELLS = 6


def restored_style(value: float | None) -> str:
    if value is None:
        return "dim"
    style = LEVELS[0][1]
    for low, level_style, _ in LEVELS:
        if value >= low:
            style = level_style
    return style


def restored_cell(value: float | None) -> Text:
    """Five cells: ``+0.87`` (``  —  `` where clean and corrupt give the same difference)."""
    return Text("  —  " if value is None else f"{value:+.2f}", style=restored_style(value))


def legend() -> Text:
    out = Text("restored: ", style="dim")
    for _, style, label in LEVELS:
        out.append(f" {label} ", style=style or "dim")
        out.append(" ")
    out.append(" — no gap", style="dim")
    return out


def position_label(position: int, piece: str, differs: bool) -> Text:
    label = Text(f"{position}", style="bold" if differs else "dim")
    label.append("*" if differs else " ")
    label.append_text(fitted_piece(piece, PIECE_CELLS, style="reverse" if differs else ""))
    return label


class PatchGrid(DataTable):
    """Rows ``(site, layer, head)``: a layer of one site kind, or one head of a layer, each
    labelled with its site's name (``block 3 attn``, ``block 3 head 1``, ``embed``)."""

    DEFAULT_CSS = """
    PatchGrid { height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="cell", zebra_stripes=False, **kwargs)
        self.cells: dict[tuple[int, int], Any] = {}  # (row, position) -> the engine's Effect
        self.rows_shown: list[tuple[str, int, int | None]] = []

    def show_effects(self, effects: Iterable[Any], rows: Sequence[tuple[str, int, int | None]],
                     pieces: Sequence[str], differing: frozenset[int]) -> None:
        """Lay out ``rows`` (site, layer, head) x the positions of ``pieces``."""
        at = {(e.site, e.layer, e.head, e.position): e for e in effects}
        cursor = self.cursor_coordinate
        self.clear(columns=True)
        self.cells, self.rows_shown = {}, list(rows)
        for position, piece in enumerate(pieces):
            self.add_column(position_label(position, piece, position in differing), key=str(position))
        for index, (site, layer, head) in enumerate(rows):
            cells = []
            for position in range(len(pieces)):
                effect = at.get((site, layer, head, position))
                if effect is not None:
                    self.cells[(index, position)] = effect
                cells.append(restored_cell(effect.restored) if effect is not None else Text("  …  ", style="dim"))
            label = patch_site_name(site, layer, head)
            self.add_row(*cells, label=Text(label, style="bold"), key=str(index))
        if rows and pieces:  # once laid out: a scroll to the cursor before that lands off the cells
            self.call_after_refresh(self.move_cursor, row=min(cursor.row, len(rows) - 1),
                                    column=min(cursor.column, len(pieces) - 1), animate=False)

    @property
    def selected(self) -> Any:
        """The effect under the cursor (None where there is none)."""
        return self.cells.get((self.cursor_coordinate.row, self.cursor_coordinate.column))

    def values(self) -> dict[tuple[str, int, int | None, int], float | None]:
        """Every shown cell's restored, keyed (site, layer, head, position)."""
        return {(e.site, e.layer, e.head, e.position): e.restored for e in self.cells.values()}
