"""One panel for looking inside the selected decision: the logit lens, the contributions to
its logit, or one head's whole pattern, one at a time.

The session's :class:`InsightView` holds plain numbers built on the worker thread, so the
panel only lays out text on the UI thread.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from textual.widgets import ContentSwitcher

from minigpt_tui.engine.session.generation import DecisionView, PatternLookup, StepperView
from minigpt_tui.engine.session.insight import InsightView, PatternView
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
        # Every head's pattern of every decision, read from the decisions' records (no forward
        # pass), and the model's blocks and heads: both follow the generation's view.
        self.lookup: PatternLookup | None = None
        self.shape = (0, 0)
        self._looked: tuple[int, PatternView] | None = None  # the decision and pattern read from the records
        self._last_read: tuple[tuple[Any, ...], PatternView | None] | None = None

    def follow(self, view: StepperView) -> None:
        self.lookup = view.patterns
        self.shape = (view.layers, view.heads)
        steps = {decision.step for decision in view.decisions}
        if self.inspected is not None and self.inspected.step not in steps:
            self.forget()  # reset (ctrl+r) or back undid the decision shown: never name it again

    def forget(self) -> None:
        """Back to the hints: the decision shown is gone."""
        self.inspected = None
        self._asked = None
        self._looked = None
        self.show_insight(None)
        self.border_subtitle = ""
        self._show_title()

    def move_pattern(self, layers: int, heads: int) -> bool:
        """Move the pattern's block and head by these steps, within the model; True when they changed."""
        return self.go_to(self.pattern_layer + layers, self.pattern_head + heads)

    def go_to(self, layer: int, head: int) -> bool:
        """Show block ``layer``'s head ``head`` (held within the model); True when it changed."""
        blocks, heads = self.shape
        if not blocks and self.inspected is not None:
            blocks, heads = self.inspected.layers, self.inspected.heads
        if not blocks:
            return False
        layer, head = min(max(layer, 0), blocks - 1), min(max(head, 0), heads - 1)
        if (layer, head) == (self.pattern_layer, self.pattern_head):
            return False
        self.pattern_layer, self.pattern_head = layer, head
        self.query_one(HeadRoleGrid).show_head(layer, head)
        return True

    def look_up(self, step: int) -> bool:
        """Show decision ``step``'s pattern of the chosen head, read from the records; False
        when they do not hold it (then the worker computes it)."""
        pattern = self.recorded(step)
        if pattern is None:
            return False
        if self.inspected is not None and self.inspected.step == step:
            self.inspected = replace(self.inspected, pattern=pattern)
        self._looked = (step, pattern)
        self.query_one(HeadPatternView).show_pattern(pattern.layer, pattern.head, pattern.pieces, pattern.weights)
        self._show_title()
        return True

    def recorded(self, step: int) -> PatternView | None:
        """Decision ``step``'s pattern of the chosen head, read from the records (None: they
        do not hold it); the last one read is kept, so the head view and the attention
        picture read it once."""
        key = (step, self.pattern_layer, self.pattern_head, self.lookup)
        if self._last_read is None or self._last_read[0] != key:
            found = None if self.lookup is None else self.lookup.pattern(*key[:3])
            self._last_read = (key, found)
        return self._last_read[1]

    def pattern_of(self, step: int) -> PatternView | None:
        """Decision ``step``'s pattern of the chosen head: from the records, else the one the
        worker computed for the view shown (None when neither holds it)."""
        recorded = self.recorded(step)
        if recorded is not None:
            return recorded
        view = self.inspected
        if view is not None and view.step == step and (view.pattern.layer, view.pattern.head) == (
                self.pattern_layer, self.pattern_head) and view.pattern.weights:
            return view.pattern
        return None

    def ask(self, decision: DecisionView, candidate_id: int | None, *, head: bool = True) -> bool:
        """Mark the panel working for ``decision`` (and the candidate, and the block and head
        unless ``head`` is false: its pattern is read from the records); False when that one is
        asked already."""
        shown = (self.pattern_layer, self.pattern_head) if head else None
        key = (decision.step, decision.chosen.id, decision.forced, shown, candidate_id)
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
        block and head) in the border. The chosen head's pattern is read from the records when
        they hold it (the head may have changed since the view was asked for)."""
        recorded = self.recorded(view.step)
        self._looked = None if recorded is None else (view.step, recorded)
        if recorded is not None:
            view = replace(view, pattern=recorded)
        self.inspected = view
        self.show_insight(view)
        self.border_subtitle = ""  # the result is in: the keys again, not "working…"
        self._show_title()

    def _show_title(self) -> None:
        """The border names what the view shown reads: the lens and the parts a decision, the
        head view also its block and head (and the keys that change them)."""
        pattern = self.kind == "pattern"
        view = self.inspected
        shown = (view.step, view.pattern) if view is not None else None
        if pattern and self._looked is not None:
            shown = self._looked
        if shown is None:
            self.border_title = "Inside"
            return
        step, head = shown
        self.border_title = f"Inside decision {step}" + (f" · block {head.layer} head {head.head}" if pattern else "")
        if self.border_subtitle != WORKING:
            self.border_subtitle = "l lens · x parts · h head" + (" · [ ] block · { } head" if pattern else "")
