"""What the Generation screen opens about its decisions: the lens, contributions and head
pattern of one decision, the head-role grid, a second model's view, the Text view of a
text's per-token loss and activation patching. A base of :class:`GenerationScreen`, which
holds the operation queue and the widgets these read; every computation goes to its worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from textual import on, work
from textual.binding import Binding
from textual.screen import Screen

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.session import operations
from minigpt_tui.engine.session.generation import parse_head
from minigpt_tui.engine.session.head_role_view import stepper_key
from minigpt_tui.engine.session.run_store import RunStore
from minigpt_tui.engine.session.worker_failures import attempt
from minigpt_tui.messages import (
    HeadRolesReady,
    InsightReady,
    PatchDefaultsReady,
    TextScored,
)
from minigpt_tui.screens.patch_view import open_patching
from minigpt_tui.screens.path_prompt import PathPromptScreen
from minigpt_tui.screens.text_view import TextViewScreen
from minigpt_tui.widgets.attention_view import AttentionView
from minigpt_tui.widgets.candidate_table import CandidateTable
from minigpt_tui.widgets.contributions_view import ContributionsView
from minigpt_tui.widgets.decision_list import DecisionList
from minigpt_tui.widgets.generation_form import GenerationForm
from minigpt_tui.widgets.head_role_grid import HeadRoleGrid
from minigpt_tui.widgets.insight_panel import InsightPanel
from minigpt_tui.widgets.run_tree import checkpoint_choices

if TYPE_CHECKING:
    from minigpt_tui.app import MiniGPTApp


class DecisionViews(Screen):
    """The Generation screen's views of a decision (see the module's docstring)."""

    BINDINGS = [Binding("b", "toggle_order", "Order", show=False),  # merged with GenerationScreen's
                Binding("u", "toggle_rule", "Greedy/sample", show=False)]

    # Set by GenerationScreen: what the insight panel shows, and the queue its worker drains.
    insight_kind: str | None
    queue: Any

    def _enqueue(self, operation: operations.Operation) -> None:
        raise NotImplementedError  # GenerationScreen queues it for its worker

    def _update_view_hint(self) -> None:
        raise NotImplementedError  # GenerationScreen says which view the narrow screen shows

    # -- looking inside a decision ------------------------------------------------------------
    def action_insight(self, kind: str) -> None:
        """Show the lens, the contributions or the head pattern of the selected decision in
        place of the candidates (the same key again goes back)."""
        if self.insight_kind == kind:
            self.insight_kind = None
            self.remove_class("-show-insight")
            self.query_one(CandidateTable).focus()
            return
        if self.query_one(DecisionList).selected is None:
            self.notify("take a decision first (n), then look inside it", title="inside", severity="warning")
            return
        self.insight_kind = kind
        self.add_class("-show-insight")
        self.query_one(InsightPanel).show_kind(kind)
        self.query_one(DecisionList).focus()  # up and down choose the decision to look inside
        self._request_insight()
        self._request_head_roles()

    def action_toggle_attention(self) -> None:
        """On a short terminal, the attention in place of the candidates (and back); a tall one
        shows both, and says so."""
        if not self.has_class("-short"):
            self.notify("the candidates and the attention both show on a terminal 34 rows or taller; "
                        "v switches between them on a shorter one", title="attention", timeout=4)
            return
        self.toggle_class("-show-attention")
        self._update_view_hint()

    def action_toggle_rule(self) -> None:
        """Greedy or sample (the form's rule field); the next decision starts over with it."""
        form = self.query_one(GenerationForm)
        if form.toggle_rule() == "sample":
            self.notify("sampling: set temp, top-k, top-p and seed in the form; n or ctrl+r starts over with them",
                        title="rule", timeout=4)
        else:
            self.notify("greedy: the most probable id each time; n or ctrl+r starts over", title="rule", timeout=3)

    def action_toggle_order(self) -> None:
        """List the parts (x) and the attention's heads largest first or in the model's order."""
        parts = self.query_one(ContributionsView)
        largest = not parts.largest_first
        parts.set_order(largest)
        self.query_one(AttentionView).set_order(largest)
        self.notify("largest first: parts by |contribution|, heads by their sharpest weight" if largest
                    else "model order: parts and heads as the model computes them", title="order", timeout=3)

    def action_pattern(self, layers: int, heads: int) -> None:
        if self.query_one(InsightPanel).move_pattern(layers, heads):
            self._show_picture()
            self._show_head()

    def _show_picture(self) -> None:
        """The attention view's picture: the chosen head's whole pattern of the selected
        decision, read from the decisions' records (no forward pass), else the one the head
        view's worker computed."""
        decision = self.query_one(DecisionList).selected
        panel = self.query_one(InsightPanel)
        pattern = None if decision is None else panel.pattern_of(decision.step)
        self.query_one(AttentionView).show_picture((panel.pattern_layer, panel.pattern_head), pattern)

    def _show_head(self) -> None:
        """The chosen head's pattern of the selected decision: read from the decisions' records
        at once, else computed on the worker."""
        decision = self.query_one(DecisionList).selected
        if decision is None or not self.query_one(InsightPanel).look_up(decision.step):
            self._request_insight()

    def action_type_head(self) -> None:
        """Ask for a block and head (``23.4``) and show its pattern in the head view."""
        panel = self.query_one(InsightPanel)
        blocks, heads = panel.shape
        if self.query_one(DecisionList).selected is None or not blocks:
            self.notify("take a decision first (n), then press j to type a block and head", title="head",
                        severity="warning")
            return

        def chosen(text: str | None) -> None:
            if text is None:
                return
            try:
                layer, head = parse_head(text, blocks, heads)
            except GenerationError as err:
                self.notify(str(err), title="head", severity="error")
                return
            moved = panel.go_to(layer, head)
            if moved:
                self._show_picture()
            if self.insight_kind != "pattern":
                self.action_insight("pattern")
            elif moved:
                self._show_head()

        self.app.push_screen(PathPromptScreen(
            "Go to a head", f"Block 0-{blocks - 1} and head 0-{heads - 1}, as 23.4, L23 H4 or block 23 head 4:",
            placeholder="block.head, like 1.0"), chosen)

    def action_toggle_cache(self) -> None:
        """Decide with the key/value cache or over the whole prefix; the decisions made are redone."""
        if self.queue.spec_applied is None:
            self.notify("load a model first", title="kv cache", severity="warning")
            return
        self._enqueue(operations.Operation("kv cache", lambda session: session.toggle_kv_cache(), select="keep"))

    def _request_insight(self) -> None:
        """Queue the computation for the selected decision unless that one is already asked
        (the head view's pattern is read from the records when they hold it)."""
        decision = self.query_one(DecisionList).selected
        if self.insight_kind is None or decision is None:
            return
        candidate = self.query_one(CandidateTable).highlighted
        candidate_id = candidate.id if candidate else None
        panel = self.query_one(InsightPanel)
        recorded = self.insight_kind == "pattern" and panel.look_up(decision.step)
        if panel.ask(decision, candidate_id, head=not recorded):
            self._enqueue(operations.inspect(decision.step, panel.pattern_layer, panel.pattern_head, candidate_id,
                                             lambda view: self.post_message(InsightReady(view))))

    @on(InsightReady)
    def _insight_ready(self, message: InsightReady) -> None:
        self.query_one(InsightPanel).show_inspected(message.view)
        self._show_picture()  # a pattern the records did not hold may have come with it

    def _request_head_roles(self) -> None:
        """Queue every head's role scores once per loaded model, while the head view shows."""
        if self.insight_kind != "pattern" or self.view is None:
            return
        if self.query_one(HeadRoleGrid).ask(stepper_key(self.view)):
            self._enqueue(operations.head_roles(lambda view: self.post_message(HeadRolesReady(view))))

    @on(HeadRolesReady)
    def _head_roles_ready(self, message: HeadRolesReady) -> None:
        self.query_one(HeadRoleGrid).show_roles(message.view)

    def action_head_role(self) -> None:
        if self.insight_kind != "pattern":
            self.notify("press h for the head view first; o then shows the next head role", title="head roles",
                        severity="warning")
            return
        self.query_one(HeadRoleGrid).cycle_role()

    def action_second_model(self) -> None:
        if self.queue.spec_applied is None:
            self.notify("load a model first", title="second model", severity="warning")
            return
        self._list_second_models()

    @work(thread=True, exclusive=True, exit_on_error=False, group="second-model-choices")
    def _list_second_models(self) -> None:
        """The runs' checkpoints, listed on a worker as the compare dialog lists them."""
        listings = attempt(RunStore(cast("MiniGPTApp", self.app).settings.runs_dir).scan)
        choices = checkpoint_choices(listings) if isinstance(listings, tuple) else []  # unreadable: type a path
        self.app.call_from_thread(self._ask_second_model, choices)

    def _ask_second_model(self, choices: list[tuple[str, str]]) -> None:
        if self.view is not None and self.view.second_label is not None:
            choices = [("none: remove the second model", "none"), *choices]

        def chosen(text: str | None) -> None:
            if text is not None:
                self._enqueue(operations.second_model(None if text.strip().lower() == "none" else text.strip()))

        self.app.push_screen(PathPromptScreen(
            "Second model", "Compare each decision with (choose or type; none: remove the second model):",
            value="", placeholder="RUN:latest, RUN:best, RUN:STEP, a checkpoint folder or a model file",
            choices=choices), chosen)

    # -- the Text view -------------------------------------------------------------------------
    def action_score(self) -> None:
        """Ask for a text (the one on screen, or a file), score it on the worker, then show it."""
        if self.queue.spec_applied is None:
            self.notify("load a model first", title="score", severity="warning")
            return
        on_screen = "\0screen"  # no typed path is this
        choices = [("the prompt and continuation on screen", on_screen)] if self.view is not None else []

        def chosen(text: str | None) -> None:
            if text is not None:
                self._enqueue(operations.score(None if text == on_screen else text,
                                               lambda view: self.post_message(TextScored(view))))

        self.app.push_screen(PathPromptScreen(
            "Score a text", "Colour each token by its loss: the text on screen, or a UTF-8 text file:",
            placeholder="a path to a UTF-8 text file", choices=choices), chosen)

    @on(TextScored)
    def _text_scored(self, message: TextScored) -> None:
        self.app.push_screen(TextViewScreen(message.view))

    # -- activation patching -------------------------------------------------------------------
    def action_patch(self) -> None:
        """Ask for a corrupt prompt against the selected decision's context, then sweep on the worker."""
        decision = self.query_one(DecisionList).selected
        if decision is None:
            self.notify("take a decision first (n), then press p to patch its context", title="patching",
                        severity="warning")
            return
        self._enqueue(operations.patch_defaults(decision.step, lambda d: self.post_message(PatchDefaultsReady(d))))

    @on(PatchDefaultsReady)
    def _patch_defaults_ready(self, message: PatchDefaultsReady) -> None:
        d = message.defaults
        open_patching(self, self._enqueue, d.clean, d.answer, d.against)
