"""The decisions made so far, one row each: its number (``*`` when forced), the chosen piece
(reversed when forced) and its selection probability; with a second model, also the chosen
id's probability under that model (**pB**) and KL(A||B) of the two distributions. The
highlighted row is the decision the other panels show.

The piece column takes the width the number and the probability leave: a long piece is cut
with an ellipsis (``·Answ…``) so both numbers stay in view, as in the candidate table.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from minigpt_tui.engine.session.generation import DecisionView, StepperView
from minigpt_tui.widgets.numbers import short_probability
from minigpt_tui.widgets.pieces import fitted_piece, piece_text

PIECE_WIDTH = 10  # the widest piece cell
MIN_PIECE_WIDTH = 3
PROBABILITY_WIDTH = 4  # 0.79 or 4e-3
CELL_PADDING = 2
PIECE_LABEL = "piece"
WITH_P_FROM = 34  # a list this wide keeps p beside the second model's pB and KL


def step_label(decision: DecisionView) -> str:
    return f"{decision.step}{'*' if decision.forced else ''}"


def fit_piece(width: int, step_width: int) -> int:
    """The piece cell's width in a list ``width`` cells wide (scrollbar excluded) whose
    widest step label is ``step_width`` cells."""
    room = width - step_width - PROBABILITY_WIDTH - 3 * CELL_PADDING
    return min(PIECE_WIDTH, max(MIN_PIECE_WIDTH, room))


def opinion_cells(opinion: Any) -> list[Text]:
    """The second model's pB (bold where its top choice differs) and KL(A||B) cells."""
    kl = max(opinion.kl, 0.0)  # a rounding hair below zero reads as 0
    return [Text(short_probability(opinion.probability), justify="right", style="" if opinion.top1_agree else "bold"),
            Text(f"{kl:.2f}" if kl >= 0.005 or kl == 0 else short_probability(kl), justify="right")]


def _unchanged_rows(old: tuple[DecisionView, ...], old_opinions: tuple[Any, ...],
                    decisions: tuple[DecisionView, ...], opinions: tuple[Any, ...]) -> int:
    """How many leading rows are the same decisions (and opinions) as before."""
    common = 0
    while common < min(len(old), len(decisions)) and old[common] is decisions[common] and (
            not opinions or opinions[common] == old_opinions[common]):
        common += 1
    return common


class DecisionList(DataTable):
    DEFAULT_CSS = """
    DecisionList { height: 1fr; scrollbar-size-vertical: 1; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.border_title = "Decisions"
        self.decisions: tuple[DecisionView, ...] = ()
        self.opinions: tuple[Any, ...] = ()  # the second model's SecondOpinionView per decision
        self.piece_width = fit_piece(0, 1)

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        self.clear(columns=True)
        columns = [("#", "step"), (PIECE_LABEL, "piece")]
        if self._shows_p:
            columns.append(("p", "p"))
        if self.opinions:
            columns += [("pB", "p_b"), ("KL", "kl")]
        for label, key in columns:
            self.add_column(label, key=key, width=self.piece_width if key == "piece" else None)

    @property
    def _shows_p(self) -> bool:
        """With a second model a narrow list leaves out p (the candidates show it)."""
        return not self.opinions or self.size.width >= WITH_P_FROM

    @property
    def _number_columns(self) -> int:
        """p (unless left out), then pB and KL with a second model."""
        return int(self._shows_p) + (2 if self.opinions else 0)

    def _fit(self, decisions: tuple[DecisionView, ...]) -> int:
        step_width = max((len(step_label(d)) for d in decisions), default=1)
        scrolls = len(decisions) + 1 > self.size.height  # the header row included
        scrollbar = self.styles.scrollbar_size_vertical if scrolls else 0
        # No wider than the widest piece, so short pieces keep the probabilities close by.
        widest = max((piece_text(d.chosen.piece).cell_len for d in decisions), default=0)
        more = (self._number_columns - 1) * (PROBABILITY_WIDTH + CELL_PADDING)  # fit_piece counts one
        return min(fit_piece(self.size.width - scrollbar - more, step_width), max(len(PIECE_LABEL), widest))

    def on_resize(self) -> None:
        if self._fit(self.decisions) != self.piece_width or len(self.columns) != 2 + self._number_columns:
            self.show_decisions(self.decisions, select=self.cursor_row + 1, opinions=self.opinions)

    def show_decisions(self, decisions: tuple[DecisionView, ...], select: int | None = None,
                       opinions: tuple[Any, ...] = ()) -> None:
        """Replace the rows (only what changed is redrawn); ``select`` is a 1-based step;
        ``opinions`` (one per decision) adds the second model's columns."""
        old, old_opinions = self.decisions, self.opinions
        self.decisions = decisions
        self.opinions = opinions
        if self._refit_columns(decisions):
            old = ()
        common = _unchanged_rows(old, old_opinions, decisions, opinions)
        if common < len(old):
            self.clear()
            common = 0
        for index, decision in enumerate(decisions[common:], start=common):
            self.add_row(*self._row_cells(decision, opinions[index] if opinions else None), key=str(decision.step))
        if select is not None and decisions:
            self.move_cursor(row=min(max(select, 1), len(decisions)) - 1, animate=False, scroll=True)

    def _refit_columns(self, decisions: tuple[DecisionView, ...]) -> bool:
        """Rebuild the columns if the piece width or the number columns changed (the rows go
        with them); whether they were rebuilt."""
        columns_changed = len(self.columns) != 2 + self._number_columns
        piece_width = self._fit(decisions)
        if piece_width == self.piece_width and not columns_changed:
            return False
        self.piece_width = piece_width
        self._add_columns()
        return True

    def _row_cells(self, decision: DecisionView, opinion: Any | None) -> list[Text]:
        chosen = decision.chosen
        cells = [
            Text(step_label(decision), justify="right"),
            fitted_piece(chosen.piece, self.piece_width, style="reverse" if decision.forced else ""),
        ]
        if self._shows_p:
            cells.append(Text(short_probability(chosen.selection_probability), justify="right"))
        if opinion is not None:
            cells += opinion_cells(opinion)
        return cells

    def show_view(self, view: StepperView, select: int | None) -> None:
        """The decisions of ``view`` (with the second model's opinions, if any); ``select`` is
        a 1-based step, None to keep the selected decision (the last when none is)."""
        if select is None:
            current = self.selected
            select = current.step if current is not None else len(view.decisions)
        self.show_decisions(view.decisions, select=select, opinions=view.second_opinions)
        self.border_title = "Decisions vs B" if view.second_label else "Decisions"

    @property
    def selected(self) -> DecisionView | None:
        if not self.decisions or not 0 <= self.cursor_row < len(self.decisions):
            return None
        return self.decisions[self.cursor_row]
