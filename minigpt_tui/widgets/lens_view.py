"""The logit lens of one decision: a layer x top-k table with the chosen id highlighted, and
a sparkline of the chosen id's rank by layer (taller is better: rank 1 is a full cell).

Rows come from the engine's lens records (``layer``, ``stream``, ``top`` entries with ``id``,
``piece`` and ``probability``, ``chosen_rank``, ``chosen_probability``), computed on a worker.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.containers import ScrollableContainer
from textual.widgets import Static

from minigpt_tui.engine.session.view_names import LENS_LEGEND, resid_name
from minigpt_tui.widgets.numbers import short_probability
from minigpt_tui.widgets.pieces import fitted_piece

LEVELS = "▁▂▃▄▅▆▇█"
PIECE_CELLS = 6
EMPTY = "Press l to compute the logit lens of the selected decision."


def rank_sparkline(ranks: Sequence[int], vocab_size: int) -> str:
    """One glyph per layer: full for rank 1, lowest for the last rank, log-scaled between."""
    top = math.log(max(vocab_size, 2))
    glyphs = []
    for rank in ranks:
        height = 1.0 - math.log(max(rank, 1)) / top
        glyphs.append(LEVELS[min(max(int(height * len(LEVELS)), 0), len(LEVELS) - 1)])
    return "".join(glyphs)


def layer_label(layer: int) -> str:
    """The stream a lens row reads, named as everywhere else: ``embed``, ``block N resid``."""
    return resid_name(layer)


def lens_text(rows: Sequence[Any], chosen_id: int, chosen_piece: str, vocab_size: int) -> Text:
    out = Text(no_wrap=True)
    ranks = [row.chosen_rank for row in rows]
    out.append("chosen ", style="dim")
    out.append_text(fitted_piece(chosen_piece, 12, style="bold reverse"))
    out.append(f" {chosen_id} · rank by layer ", style="dim")
    out.append(rank_sparkline(ranks, vocab_size), style="bold")
    out.append("  " + " → ".join(str(rank) for rank in ranks) + "\n", style="dim")
    cells = max(len(layer_label(row.layer)) for row in rows) + 1
    out.append(f"{'stream':<{cells}}{'rank':>5} {'p':>5}  top ids (p)\n", style="bold")
    for row in rows:
        out.append(f"{layer_label(row.layer):<{cells}}{row.chosen_rank:>5} "
                   f"{short_probability(row.chosen_probability):>5}  ")
        for entry in row.top:
            chosen = entry.id == chosen_id
            out.append_text(fitted_piece(entry.piece, PIECE_CELLS, style="bold reverse" if chosen else ""))
            out.append(f" {short_probability(entry.probability)}  ", style="bold" if chosen else "dim")
        out.append("\n")
    out.append(LENS_LEGEND, style="dim")
    return out


class LensView(ScrollableContainer):
    DEFAULT_CSS = """
    LensView { height: auto; max-height: 1fr; }
    LensView > Static { width: auto; height: auto; padding: 0 1; }
    """

    def compose(self) -> Any:
        yield Static(Text(EMPTY, style="dim"), id="lens-text")

    def show_lens(self, rows: Sequence[Any] | None, chosen_id: int = 0, chosen_piece: str = "",
                  vocab_size: int = 2) -> None:
        target = self.query_one("#lens-text", Static)
        if not rows:
            target.update(Text(EMPTY, style="dim"))
            return
        target.update(lens_text(rows, chosen_id, chosen_piece, vocab_size))
