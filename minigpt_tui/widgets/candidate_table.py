"""One decision's candidates: rank, id, piece, logit, raw probability (with a bar),
selection probability under the rule, and eligibility (✓/✗). ▶ marks the chosen id, ◇ the
rule's own pick when another was forced."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from minigpt_tui.widgets.generation_views import CandidateView, DecisionView
from minigpt_tui.widgets.pieces import bar, piece_text

BAR_WIDTH = 8
PIECE_WIDTH = 10


def probability(value: float) -> Text:
    return Text(f"{value:.4f}" if value >= 1e-4 or value == 0 else f"{value:.1e}", justify="right")


class CandidateTable(DataTable):
    DEFAULT_CSS = """
    CandidateTable { height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.decision: DecisionView | None = None

    def on_mount(self) -> None:
        for label, key in (("rank", "rank"), ("id", "id"), ("piece", "piece"),
                           ("logit", "logit"), ("raw p", "raw"), ("", "bar"), ("sel p", "selection"),
                           ("elig", "eligible")):
            self.add_column(label, key=key)

    def show_decision(self, decision: DecisionView | None) -> None:
        keep_row = self.cursor_row if decision is not None and self.decision is not None \
            and decision.step == self.decision.step else None
        self.decision = decision
        self.clear()
        if decision is None:
            return
        for candidate in decision.candidates:
            self.add_row(*self._cells(candidate), key=str(candidate.id))
        chosen_row = next((i for i, c in enumerate(decision.candidates) if c.chosen), 0)
        row = keep_row if keep_row is not None and keep_row < len(decision.candidates) else chosen_row
        self.move_cursor(row=row, animate=False, scroll=True)

    def _cells(self, candidate: CandidateView) -> tuple[Any, ...]:
        style = "bold" if candidate.chosen else ("dim" if not candidate.eligible else "")
        if candidate.chosen:
            mark = Text("▶", style="bold")
        elif candidate.rule_choice:
            mark = Text("◇", style="italic")
        else:
            mark = Text(" ")
        piece = piece_text(candidate.piece, style=style)
        piece.truncate(PIECE_WIDTH, overflow="ellipsis")
        rank = mark + Text(f"{candidate.rank:>4}", style=style)
        return (
            rank,
            Text(str(candidate.id), justify="right", style=style),
            piece,
            Text(f"{candidate.logit:.3f}", justify="right", style=style),
            probability(candidate.raw_probability),
            Text(bar(candidate.raw_probability, BAR_WIDTH), style="bold" if candidate.chosen else ""),
            probability(candidate.selection_probability),
            Text("✓" if candidate.eligible else "✗", justify="center",
                 style="" if candidate.eligible else "bold"),
        )

    @property
    def highlighted(self) -> CandidateView | None:
        if self.decision is None or not 0 <= self.cursor_row < len(self.decision.candidates):
            return None
        return self.decision.candidates[self.cursor_row]
