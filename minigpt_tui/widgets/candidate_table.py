"""One decision's candidates: rank, id, piece, logit, raw probability (with a bar scaled to
the most probable candidate shown, so it shows even when every probability is small),
selection probability under the rule, and whether the rule may draw it (✓; *cut* by top-k or
top-p; ✗ never eligible). ▶ marks the chosen id, ◇ the
rule's own pick when another was forced.

The piece column and the bar take the width the numbers leave: on an 80-column terminal a
piece is cut at 8 cells and the bar is 3 cells (24 steps), so every column stays in view.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from minigpt_tui.engine.session.generation import CandidateView, DecisionView
from minigpt_tui.widgets.numbers import table_probability
from minigpt_tui.widgets.pieces import bar, fitted_piece

BAR_WIDTH = 8  # the widest bar
MIN_BAR_WIDTH = 3
PIECE_WIDTH = 10  # the widest piece cell
MIN_PIECE_WIDTH = 6
# Cells the other columns take, padding included: rank ▶ and 3 digits, a 3-digit id, a logit
# like -12.345, two probabilities like 0.4778 or 4.2e-3, and the elig mark under its label.
CELL_PADDING = 2
OTHER_COLUMNS_WIDTH = (4 + 3 + 7 + 6 + 6 + 4) + CELL_PADDING * 6
COLUMNS = (("rank", "rank"), ("id", "id"), ("piece", "piece"), ("logit", "logit"), ("raw p", "raw"),
           ("", "bar"), ("sel p", "selection"), ("elig", "eligible"))


def probability(value: float) -> Text:
    """0.4778 from 0.005 up, else 4.2e-3; 0 for zero (the rule in :mod:`numbers`)."""
    return Text(table_probability(value), justify="right")


@dataclass(frozen=True)
class CandidateFit:
    piece: int
    bar: int


def fit_columns(width: int) -> CandidateFit:
    """Piece and bar widths for a table ``width`` cells wide (scrollbar excluded)."""
    room = width - OTHER_COLUMNS_WIDTH - 2 * CELL_PADDING  # for the piece and the bar cells
    piece = min(PIECE_WIDTH, max(MIN_PIECE_WIDTH, room - MIN_BAR_WIDTH))
    return CandidateFit(piece, min(BAR_WIDTH, max(0, room - piece)))


def _row_to_show(decision: DecisionView, keep_row: int | None) -> int:
    """``keep_row`` where the decision has that row, else the chosen candidate's (else the first)."""
    if keep_row is not None and keep_row < len(decision.candidates):
        return keep_row
    return next((i for i, c in enumerate(decision.candidates) if c.chosen), 0)


class CandidateTable(DataTable):
    DEFAULT_CSS = """
    CandidateTable { height: 1fr; scrollbar-size-vertical: 1; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.border_title = "Candidates"
        self.decision: DecisionView | None = None
        self.fit = fit_columns(0)
        self.bar_scale = 0.0  # the largest raw probability of the decision's candidates

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        self.clear(columns=True)
        for label, key in COLUMNS:
            self.add_column(label, key=key, width=self.fit.piece if key == "piece" else None)

    def on_resize(self) -> None:
        fit = fit_columns(self.size.width - self.styles.scrollbar_size_vertical)
        if fit != self.fit:
            self.fit = fit
            self._add_columns()
            self.show_decision(self.decision, keep_row=self.cursor_row)

    def show_decision(self, decision: DecisionView | None, *, keep_row: int | None = None) -> None:
        if keep_row is None and self._same_decision(decision):
            keep_row = self.cursor_row
        self.decision = decision
        self.border_title = f"Candidates · decision {decision.step}" if decision else "Candidates"
        self.clear()
        if decision is None:
            return
        self.bar_scale = max((c.raw_probability for c in decision.candidates), default=0.0)
        for candidate in decision.candidates:
            self.add_row(*self._cells(candidate), key=str(candidate.id))
        self.move_cursor(row=_row_to_show(decision, keep_row), animate=False, scroll=True)

    def _same_decision(self, decision: DecisionView | None) -> bool:
        """``decision`` is the step shown now (redrawn): the cursor stays on its row."""
        return decision is not None and self.decision is not None and decision.step == self.decision.step

    def _cells(self, candidate: CandidateView) -> tuple[Any, ...]:
        style = "bold" if candidate.chosen else ("dim" if not candidate.eligible else "")
        if candidate.chosen:
            mark = Text("▶", style="bold")
        elif candidate.rule_choice:
            mark = Text("◇", style="italic")
        else:
            mark = Text(" ")
        piece = fitted_piece(candidate.piece, self.fit.piece, style=style)
        rank = mark + Text(f"{candidate.rank:>3}", style=style)
        return (
            rank,
            Text(str(candidate.id), justify="right", style=style),
            piece,
            Text(f"{candidate.logit:.3f}", justify="right", style=style),
            probability(candidate.raw_probability),
            Text(bar(candidate.raw_probability / self.bar_scale if self.bar_scale > 0 else 0.0, self.fit.bar),
                 style="bold" if candidate.chosen else ""),
            probability(candidate.selection_probability),
            self._kept_mark(candidate),
        )

    def _kept_mark(self, candidate: CandidateView) -> Text:
        """✓ the rule may draw it; cut: eligible, but outside the top-k / top-p the rule keeps;
        ✗ never eligible (BOS, a forbidden id)."""
        if not candidate.eligible:
            return Text("✗", justify="center", style="bold")
        decision = self.decision
        if decision is not None and decision.retained < decision.eligible_count and candidate.selection_probability == 0:
            return Text("cut", justify="center", style="dim")
        return Text("✓", justify="center")

    @property
    def highlighted(self) -> CandidateView | None:
        if self.decision is None or not 0 <= self.cursor_row < len(self.decision.candidates):
            return None
        return self.decision.candidates[self.cursor_row]
