"""One panel for looking inside the selected decision: the logit lens, the contributions to
its logit, or one head's whole pattern, one at a time.

The session's :class:`InsightView` holds plain numbers built on the worker thread, so the
panel only lays out text on the UI thread.
"""

from __future__ import annotations

from typing import Any

from textual.widgets import ContentSwitcher

from minigpt_tui.engine.session.generation import DecisionView
from minigpt_tui.engine.session.insight import InsightView
from minigpt_tui.widgets.contributions_view import ContributionsView
from minigpt_tui.widgets.head_pattern_view import HeadPatternView
from minigpt_tui.widgets.head_role_grid import HeadRoleGrid
from minigpt_tui.widgets.lens_view import LensView

WORKING = "working…"


class InsightPanel(ContentSwitcher):
    DEFAULT_CSS = """
    InsightPanel { height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(initial="insight-lens", **kwargs)
        self.border_title = "Inside"
        self.pattern_layer = 0  # the block and head the pattern view shows
        self.pattern_head = 0
        self.inspected: InsightView | None = None  # the view shown
        self._asked: tuple[Any, ...] | None = None

    def move_pattern(self, layers: int, heads: int) -> bool:
        """Move the pattern's block and head by these steps, within the model; True when they changed."""
        if self.inspected is None:
            return False
        layer = min(max(self.pattern_layer + layers, 0), self.inspected.layers - 1)
        head = min(max(self.pattern_head + heads, 0), self.inspected.heads - 1)
        if (layer, head) == (self.pattern_layer, self.pattern_head):
            return False
        self.pattern_layer, self.pattern_head = layer, head
        self.query_one(HeadRoleGrid).show_head(layer, head)
        return True

    def ask(self, decision: DecisionView, candidate_id: int | None) -> bool:
        """Mark the panel working for ``decision`` (and the candidate, block and head); False
        when that one is asked already."""
        key = (decision.step, decision.chosen.id, decision.forced, self.pattern_layer, self.pattern_head, candidate_id)
        if key == self._asked:
            return False
        self._asked = key
        self.border_subtitle = WORKING
        return True

    def compose(self) -> Any:
        yield LensView(id="insight-lens")
        yield ContributionsView(id="insight-contributions")
        yield HeadPatternView(id="insight-pattern")

    @property
    def kind(self) -> str:
        return (self.current or "insight-lens").removeprefix("insight-")

    def show_kind(self, kind: str) -> None:
        self.current = f"insight-{kind}"
        self._show_title()

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
        pattern.show_pattern(view.pattern.layer, view.pattern.head, view.pattern.pieces, view.pattern.weights)

    def show_inspected(self, view: InsightView) -> None:
        """Fill every view from ``view`` and name the decision (and, for the head view, the
        block and head) in the border."""
        self.inspected = view
        self.show_insight(view)
        self.border_subtitle = ""  # the result is in: the keys again, not "working…"
        self._show_title()

    def _show_title(self) -> None:
        """The border names what the view shown reads: the lens and the parts a decision, the
        head view also its block and head (and the keys that change them)."""
        view = self.inspected
        if view is None:
            self.border_title = "Inside"
            return
        pattern = self.kind == "pattern"
        self.border_title = f"Inside decision {view.step}" + (
            f" · block {view.pattern.layer} head {view.pattern.head}" if pattern else "")
        if self.border_subtitle != WORKING:
            self.border_subtitle = "l lens · x parts · h head" + (" · [ ] block · { } head" if pattern else "")
