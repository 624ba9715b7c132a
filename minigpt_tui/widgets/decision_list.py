"""The decisions made so far, one row each: its number (``*`` when forced), the chosen piece
(reversed when forced) and its selection probability. The highlighted row is the decision
the other panels show.

The piece column takes the width the number and the probability leave: a long piece is cut
with an ellipsis (``·Answ…``) so both numbers stay in view, as in the candidate table.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from minigpt_tui.engine.session.generation import DecisionView
from minigpt_tui.widgets.numbers import short_probability
from minigpt_tui.widgets.pieces import fitted_piece, piece_text

PIECE_WIDTH = 10  # the widest piece cell
MIN_PIECE_WIDTH = 3
PROBABILITY_WIDTH = 4  # 0.79 or 4e-3
CELL_PADDING = 2
PIECE_LABEL = "piece"


def step_label(decision: DecisionView) -> str:
    return f"{decision.step}{'*' if decision.forced else ''}"


def fit_piece(width: int, step_width: int) -> int:
    """The piece cell's width in a list ``width`` cells wide (scrollbar excluded) whose
    widest step label is ``step_width`` cells."""
    room = width - step_width - PROBABILITY_WIDTH - 3 * CELL_PADDING
    return min(PIECE_WIDTH, max(MIN_PIECE_WIDTH, room))


class DecisionList(DataTable):
    DEFAULT_CSS = """
    DecisionList { height: 1fr; scrollbar-size-vertical: 1; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.decisions: tuple[DecisionView, ...] = ()
        self.piece_width = fit_piece(0, 1)

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        self.clear(columns=True)
        for label, key in (("#", "step"), (PIECE_LABEL, "piece"), ("p", "p")):
            self.add_column(label, key=key, width=self.piece_width if key == "piece" else None)

    def _fit(self, decisions: tuple[DecisionView, ...]) -> int:
        step_width = max((len(step_label(d)) for d in decisions), default=1)
        scrolls = len(decisions) + 1 > self.size.height  # the header row included
        scrollbar = self.styles.scrollbar_size_vertical if scrolls else 0
        # No wider than the widest piece, so short pieces keep the probabilities close by.
        widest = max((piece_text(d.chosen.piece).cell_len for d in decisions), default=0)
        return min(fit_piece(self.size.width - scrollbar, step_width), max(len(PIECE_LABEL), widest))

    def on_resize(self) -> None:
        if self._fit(self.decisions) != self.piece_width:
            self.show_decisions(self.decisions, select=self.cursor_row + 1)

    def show_decisions(self, decisions: tuple[DecisionView, ...], select: int | None = None) -> None:
        """Replace the rows (only what changed is redrawn); ``select`` is a 1-based step."""
        old = self.decisions
        self.decisions = decisions
        piece_width = self._fit(decisions)
        common = 0
        if piece_width != self.piece_width:
            self.piece_width = piece_width
            self._add_columns()
            old = ()
        while common < min(len(old), len(decisions)) and old[common] is decisions[common]:
            common += 1
        if common < len(old):
            self.clear()
            common = 0
        for decision in decisions[common:]:
            chosen = decision.chosen
            self.add_row(
                Text(step_label(decision), justify="right"),
                fitted_piece(chosen.piece, self.piece_width, style="reverse" if decision.forced else ""),
                Text(short_probability(chosen.selection_probability), justify="right"),
                key=str(decision.step),
            )
        if select is not None and decisions:
            self.move_cursor(row=min(max(select, 1), len(decisions)) - 1, animate=False, scroll=True)

    @property
    def selected(self) -> DecisionView | None:
        if not self.decisions or not 0 <= self.cursor_row < len(self.decisions):
            return None
        return self.decisions[self.cursor_row]
