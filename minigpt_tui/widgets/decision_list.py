"""The decisions made so far, one row each: its number (``*`` when forced), the chosen piece
(reversed when forced) and its selection probability. The highlighted row is the decision
the other panels show."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from minigpt_tui.widgets.generation_views import DecisionView
from minigpt_tui.widgets.pieces import piece_text

PIECE_WIDTH = 10


class DecisionList(DataTable):
    DEFAULT_CSS = """
    DecisionList { height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.decisions: tuple[DecisionView, ...] = ()

    def on_mount(self) -> None:
        for label, key in (("#", "step"), ("piece", "piece"), ("p", "p")):
            self.add_column(label, key=key)

    def show_decisions(self, decisions: tuple[DecisionView, ...], select: int | None = None) -> None:
        """Replace the rows (only what changed is redrawn); ``select`` is a 1-based step."""
        old = self.decisions
        self.decisions = decisions
        common = 0
        while common < min(len(old), len(decisions)) and old[common] is decisions[common]:
            common += 1
        if common < len(old):
            self.clear()
            common = 0
        for decision in decisions[common:]:
            chosen = decision.chosen
            piece = piece_text(chosen.piece, style="reverse" if decision.forced else "")
            piece.truncate(PIECE_WIDTH, overflow="ellipsis")
            self.add_row(
                Text(f"{decision.step}{'*' if decision.forced else ''}", justify="right"),
                piece,
                Text(f"{chosen.selection_probability:.2f}", justify="right"),
                key=str(decision.step),
            )
        if select is not None and decisions:
            self.move_cursor(row=min(max(select, 1), len(decisions)) - 1, animate=False, scroll=True)

    @property
    def selected(self) -> DecisionView | None:
        if not self.decisions or not 0 <= self.cursor_row < len(self.decisions):
            return None
        return self.decisions[self.cursor_row]
