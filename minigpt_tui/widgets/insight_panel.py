"""One panel for looking inside the selected decision: the logit lens, the contributions to
its logit, or one head's whole pattern, one at a time.

:func:`insight_view` turns the engine's records into plain numbers on the worker thread,
so the panel only lays out text on the UI thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.widgets import ContentSwitcher

from minigpt_tui.widgets.contributions_view import ContributionsView
from minigpt_tui.widgets.head_pattern_view import HeadPatternView
from minigpt_tui.widgets.lens_view import LensView

INSIGHT_KINDS = ("lens", "contributions", "pattern")


@dataclass(frozen=True)
class LensEntryView:
    id: int
    piece: str
    probability: float


@dataclass(frozen=True)
class LensRowView:
    layer: int
    chosen_rank: int
    chosen_probability: float
    top: tuple[LensEntryView, ...]


@dataclass(frozen=True)
class PatternView:
    layer: int
    head: int
    pieces: tuple[str, ...]
    weights: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class InsightView:
    """What one decision looked like inside, as plain numbers."""

    step: int
    chosen_id: int
    chosen_piece: str
    vocab_size: int
    lens: tuple[LensRowView, ...] | None = None
    contributions: tuple[Any, ...] = ()  # the engine's Contributions records (plain floats)
    pattern: PatternView | None = None


def insight_view(insight: Any, step: int, chosen_id: int, chosen_piece: str, vocab_size: int) -> InsightView:
    """Plain numbers from the engine's ``DecisionInsight`` (call it on the worker thread)."""
    lens = None
    if insight.lens is not None:
        lens = tuple(LensRowView(row.layer, row.chosen_rank, row.chosen_probability,
                                 tuple(LensEntryView(e.id, e.piece, e.probability) for e in row.top))
                     for row in insight.lens)
    pattern = None
    if insight.pattern is not None:
        p = insight.pattern
        pattern = PatternView(p.layer, p.head, tuple(piece for _, piece in p.tokens),
                              tuple(tuple(row) for row in p.weights.tolist()))
    return InsightView(step, chosen_id, chosen_piece, vocab_size, lens, tuple(insight.contributions), pattern)


class InsightPanel(ContentSwitcher):
    DEFAULT_CSS = """
    InsightPanel { height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(initial="insight-lens", **kwargs)

    def compose(self) -> Any:
        yield LensView(id="insight-lens")
        yield ContributionsView(id="insight-contributions")
        yield HeadPatternView(id="insight-pattern")

    @property
    def kind(self) -> str:
        return (self.current or "insight-lens").removeprefix("insight-")

    def show_kind(self, kind: str) -> None:
        self.current = f"insight-{kind}"

    def show_insight(self, view: InsightView | None) -> None:
        """Fill every view from ``view`` (None: back to the hints)."""
        lens = self.query_one(LensView)
        parts = self.query_one(ContributionsView)
        pattern = self.query_one(HeadPatternView)
        if view is None:
            lens.show_lens(None)
            parts.show_contributions(None)
            pattern.show_pattern()
            return
        lens.show_lens(view.lens, view.chosen_id, view.chosen_piece, view.vocab_size)
        parts.show_contributions(view.contributions or None)
        if view.pattern is None:
            pattern.show_pattern()
        else:
            pattern.show_pattern(view.pattern.layer, view.pattern.head, view.pattern.pieces, view.pattern.weights)

