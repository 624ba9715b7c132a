"""The Generation screen: step through generation one next-token decision at a time.

The model, the decision stepper and every forward pass live on a worker thread that drains
the :class:`OperationQueue` the keys fill; after each operation it posts a
:class:`StepperView` of plain numbers, and the widgets lay it out. No torch at module level.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Header, Input

from minigpt_tui.engine.core.errors import GenerationError, MiniGPTError
from minigpt_tui.engine.session import operations
from minigpt_tui.engine.session.generation import (
    GenerationSession,
    GenerationSettings,
    StepperView,
)
from minigpt_tui.engine.session.insight import InsightView
from minigpt_tui.engine.session.worker_failures import attempt
from minigpt_tui.messages import (
    GenerationFailed,
    GenerationUpdated,
    QueueIdle,
)
from minigpt_tui.screens.decision_views import DecisionViews
from minigpt_tui.screens.help_texts import GENERATION_HELP
from minigpt_tui.screens.path_prompt import PathPromptScreen
from minigpt_tui.screens.steering_view import SteeringKey
from minigpt_tui.widgets.attention_view import AttentionView
from minigpt_tui.widgets.candidate_table import CandidateTable
from minigpt_tui.widgets.decision_info import DecisionInfo
from minigpt_tui.widgets.decision_list import DecisionList
from minigpt_tui.widgets.generation_form import GenerationForm
from minigpt_tui.widgets.generation_output import GenerationOutput
from minigpt_tui.widgets.head_role_grid import HeadRoleGrid
from minigpt_tui.widgets.insight_panel import InsightPanel
from minigpt_tui.widgets.key_bar import KeyBar
from minigpt_tui.widgets.opening_progress import OpeningProgress
from minigpt_tui.widgets.pieces import piece_tests, visible_piece
from minigpt_tui.widgets.prefix_view import PrefixView

if TYPE_CHECKING:
    from minigpt_tui.app import MiniGPTApp


class GenerationScreen(SteeringKey, DecisionViews):
    HELP = GENERATION_HELP
    HELP_TITLE = "Generation"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    AUTO_FOCUS = "#candidates"  # once a model is loaded the step keys work at once; tab reaches the form
    VERTICAL_BREAKPOINTS = [(0, "-short"), (34, "-tall")]

    CSS_PATH = Path(__file__).with_name("generation.tcss")

    BINDINGS = [
        Binding("n", "step", "Next"),
        Binding("r", "run", "Run"),
        Binding("backspace", "back", "Back"),
        Binding("ctrl+r", "reset", "Reset"),
        Binding("f", "force", "Force"),
        Binding("w", "save_trace", "Save"),
        Binding("v", "toggle_attention", "Attention", show=False),
        Binding("l", "insight('lens')", "Lens"),
        Binding("x", "insight('contributions')", "Parts"),
        Binding("h", "insight('pattern')", "Head"),
        Binding("left_square_bracket", "pattern(-1, 0)", "Layer -", show=False),
        Binding("right_square_bracket", "pattern(1, 0)", "Layer +", show=False),
        Binding("left_curly_bracket", "pattern(0, -1)", "Head -", show=False),
        Binding("right_curly_bracket", "pattern(0, 1)", "Head +", show=False),
        Binding("j", "type_head", "Go to head", show=False),
        Binding("k", "toggle_cache", "KV cache", show=False),
        Binding("o", "head_role", "Role", show=False),
        Binding("m", "second_model", "2nd model", show=False),
        Binding("p", "patch", "Patch", show=False),
        Binding("s", "score", "Score", show=False),  # the key bar is full at 80 columns; ? and the palette list it
        Binding("escape", "leave_form", "Leave form"),
    ]
    PALETTE_COMMANDS = (
        ("Next decision", "Take one decision (n)", "step"),
        ("Run to the end", "Decide until EOS, the budget or a full context (r)", "run"),
        ("Back one decision", "Undo the last decision (backspace)", "back"),
        ("Reset to the prompt", "Start over from the prompt with the form's settings (ctrl+r)", "reset"),
        ("Save trace", "Write the generation trace as JSON (w)", "save_trace"),
        ("Logit lens", "Each layer's guess for the selected decision (l)", "insight('lens')"),
        ("Contributions", "Split the chosen logit into embedding, heads and blocks (x)", "insight('contributions')"),
        ("Head pattern", "One head's whole attention pattern over the prefix (h)", "insight('pattern')"),
        ("Head role", "Show the next role in the head view's grid of every head's score (o)", "head_role"),
        ("Go to a head", "Type a block and head (23.4) for the head view (j)", "type_head"),
        ("Order of parts and heads", "Largest first or the model's order, in the parts and attention (b)", "toggle_order"),
        ("KV cache or whole prefix", "Decide over the key/value cache or recompute the whole prefix (k)",
         "toggle_cache"),
        ("Second model", "Compare each decision with a second model (m)", "second_model"),
        ("Activation patching", "Which layer and position restore the selected decision's answer (p)", "patch"),
        ("Score a text", "Each token of a text coloured by its loss, in the Text view (s)", "score"),
    )

    def __init__(self) -> None:
        super().__init__()
        self.view: StepperView | None = None
        self.session: GenerationSession | None = None
        self.queue = operations.OperationQueue()  # also what the session will have applied once it drains
        self._pending_model: str | None = None
        self._form_ready = False  # set in on_mount (is_mounted turns true only later)
        self.insight_kind: str | None = None  # the view shown in place of the candidates
        self._busy = False  # the worker has operations to do

    @property
    def insight(self) -> InsightView | None:
        return self.query_one(InsightPanel).inspected

    @property
    def mini_app(self) -> "MiniGPTApp":
        return self.app  # type: ignore[return-value]

    # -- layout ------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        yield GenerationForm(id="gen-form")
        yield OpeningProgress(id="opening")
        yield PrefixView(id="prefix")
        with Horizontal(id="gen-body"):
            yield DecisionList(id="decisions")
            with Vertical(id="gen-right"):
                yield DecisionInfo(id="decision-info")
                yield CandidateTable(id="candidates")
                yield AttentionView(id="attention")
                yield InsightPanel(id="insight")
        yield GenerationOutput(id="gen-output")
        yield KeyBar()

    def on_mount(self) -> None:
        self.sub_title = "Generation"
        self.session = GenerationSession(self.mini_app.settings.runs_dir)
        self.queue.reading = self.query_one(OpeningProgress).report  # the weights a load reads
        self._form_ready = True
        for field in self.query(Input):
            field.cursor_blink = False
        self._update_view_hint()
        if self._pending_model is not None:
            spec, self._pending_model = self._pending_model, None
            self.load_model(spec)
        else:
            # Nothing to step through yet; n loads the suggested model and decides. The
            # keyboard stays out of the form, so a key typed next never edits the model field.
            self.query_one(CandidateTable).focus()
            self._suggest_model()

    def on_screen_resume(self) -> None:
        self._show_title()
        if self.focused is not None and self.query_one(GenerationForm) in self.focused.ancestors:
            self.query_one(CandidateTable).focus()  # arriving from another screen: keys act, not type

    def _show_title(self) -> None:
        """The subtitle names the model shown, relative to the runs directory."""
        model = self.session.display(self.view.model_label) if self.view and self.session else None
        self.sub_title = f"Generation · {model}" if model else "Generation"

    # -- choosing a model ---------------------------------------------------------------------
    def load_model(self, spec: str) -> None:
        """Load ``spec`` (a model file, checkpoint folder or RUN:latest/best) and start over
        with the form's prompt and rule. Other screens call this ("generate with this model")."""
        if not self._form_ready:
            self._pending_model = spec
            return
        self.query_one("#model", Input).value = spec
        settings = self._read_form() or GenerationSettings(self.query_one(GenerationForm).text("prompt"))
        self._enqueue(self.queue.load(spec, settings))
        self.query_one(CandidateTable).focus()

    @work(thread=True, exit_on_error=False, group="generation-suggest")
    def _suggest_model(self) -> None:
        """Fill the model field with the newest run's latest checkpoint, if there is one."""
        assert self.session is not None
        # Only a suggestion: a runs folder that cannot be read leaves the field empty.
        spec = attempt(self.session.suggested_spec)
        if isinstance(spec, str):
            self.app.call_from_thread(self._suggest, spec)

    def _suggest(self, spec: str) -> None:
        field = self.query_one("#model", Input)
        if not field.value and self.queue.spec_applied is None:
            field.value = spec

    # -- the form -----------------------------------------------------------------------------
    def _read_form(self) -> GenerationSettings | None:
        try:
            return self.query_one(GenerationForm).settings()
        except MiniGPTError as err:
            self.notify(str(err), title="invalid value", severity="error")
            return None

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.input.id == "model":
            spec = event.value.strip()
            if not spec:
                self.notify("type a checkpoint folder, model file, or RUN:latest / RUN:best", title="model",
                            severity="warning")
                return
            self.load_model(spec)
        elif self._ready():
            self.query_one(CandidateTable).focus()

    def _ready(self, *, force_reset: bool = False) -> bool:
        """Queue a load and/or a fresh stepper when the form differs from what is applied;
        False when the form cannot be applied."""
        settings = self._read_form()
        if settings is None:
            return False
        try:
            operation = self.queue.prepare(self.query_one(GenerationForm).spec, settings, force_reset=force_reset)
        except GenerationError as err:
            self.notify(str(err), title="generation", severity="warning")
            return False
        if operation is not None:
            self._enqueue(operation)
        return True

    # -- actions -------------------------------------------------------------------------------
    def action_step(self) -> None:
        if self._ready():
            self._enqueue(operations.Operation("step", lambda session: session.step()))

    def action_run(self) -> None:
        if self.queue.request_stop():  # r again while a run goes on stops it
            self.notify("stopping the run after this decision", timeout=2)
            return
        if self._ready():
            self._enqueue(operations.run_to_end())

    def action_back(self) -> None:
        if self.queue.spec_applied is not None:
            self._enqueue(operations.Operation("back", lambda session: session.back()))

    def action_reset(self) -> None:
        if self._ready(force_reset=True):
            self.notify("back to the prompt", timeout=2)

    def action_force(self) -> None:
        """Ask for the id or piece to take at the selected decision instead of the rule's
        choice (the highlighted candidate, offered as the choice), then force it on the worker."""
        decision = self.query_one(DecisionList).selected
        if decision is None:
            self.notify("take a decision first (n), then press f to force another id there", title="force",
                        severity="warning")
            return
        candidate = self.query_one(CandidateTable).highlighted
        step = decision.step

        def chosen(text: str | None) -> None:
            if text is not None:
                self._force_typed(step, text)

        # Enter on the empty field takes the highlighted candidate; anything typed replaces it.
        highlighted = [(f"the highlighted candidate: id {candidate.id} {visible_piece(candidate.piece)}",
                        str(candidate.id))] if candidate is not None else []
        self.app.push_screen(PathPromptScreen(
            f"Force decision {step}",
            "Take instead of the rule's choice: a token id, or a piece as the candidates show it "
            '(·the), or in double quotes as typed (" the"). Later decisions are undone.',
            placeholder="an id like 1234, or a piece like ·the", choices=highlighted), chosen)

    def _force_typed(self, step: int, typed: str) -> None:
        """Force the id ``typed`` names (a number), else the piece it spells."""
        if re.fullmatch(r"-?[0-9]+", typed):
            self._enqueue(operations.force(step, int(typed)))
            return
        tests = piece_tests(typed)
        if tests is None:
            self.notify(f"{typed} does not read as quoted text: quote a piece as in JSON "
                        '(\\" for a quote, \\n for a newline)', title="force refused", severity="error")
            return
        self._enqueue(operations.force_piece(step, tests, typed))

    def action_save_trace(self) -> None:
        if self.view is None or not self.view.decisions:
            self.notify("nothing to save yet: take a decision first (n)", title="save trace", severity="warning")
            return

        def chosen(text: str | None) -> None:
            if text:
                self._enqueue(operations.save_trace(Path(text)))

        self.app.push_screen(PathPromptScreen("Save trace", "Write the trace as JSON to:",
                                              value=str(Path.cwd() / "generation-trace.json")), chosen)

    def _update_view_hint(self) -> None:
        # Only a short terminal shows one of the two at a time; a tall one shows both.
        short = self.has_class("-short")
        showing = self.has_class("-show-attention")
        self.query_one(CandidateTable).border_subtitle = "v: attention" if short and not showing else ""
        self.query_one(AttentionView).border_subtitle = "v: candidates" if short and showing else ""

    def on_resize(self) -> None:
        self.call_after_refresh(self._update_view_hint)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "leave_form":  # in the key bar only while the form has the keyboard
            return self.focused is not None and self.query_one(GenerationForm) in self.focused.ancestors
        return True

    def action_leave_form(self) -> None:
        self.query_one(CandidateTable).focus()

    # -- the queue -----------------------------------------------------------------------------
    def _enqueue(self, operation: operations.Operation) -> None:
        start = self.queue.push(operation)
        self._set_busy(True)
        if start:
            self._drain_queue()

    @work(thread=True, exit_on_error=False, group="generation")
    def _drain_queue(self) -> None:
        session, post = self.session, self.post_message
        assert session is not None
        self.queue.drain(session, lambda view, note, select: post(GenerationUpdated(view, note, select)),
                         lambda reason, what, dropped: post(GenerationFailed(reason, what, dropped)),
                         # while a run goes on, its rows arrive and the selection stays where it is
                         lambda view: post(GenerationUpdated(view, None, None, partial=True)))
        self.post_message(QueueIdle())

    def _set_busy(self, busy: bool) -> None:
        self._busy = busy
        self._show_decisions_subtitle()

    def _show_decisions_subtitle(self) -> None:
        """Under the decisions: working… while the worker has operations, else the second
        model's name (the pB and KL columns are its)."""
        second = self.view.second_label if self.view is not None else None
        if self._busy or second is None or self.session is None:
            subtitle = "working…" if self._busy else ""
        else:
            subtitle = f"B: {self.session.short_name(second)}"
        self.query_one("#decisions", DecisionList).border_subtitle = subtitle

    @on(QueueIdle)
    def _queue_idle(self) -> None:
        if self.queue.idle:
            self._set_busy(False)

    @on(GenerationFailed)
    def _failed(self, message: GenerationFailed) -> None:
        self.notify(message.reason, title=f"{message.what} failed", severity="error")
        self.refresh()  # whole screen: a library may have printed over it (a Rust panic) before it failed
        self.query_one(HeadRoleGrid).forget_pending()  # dropped with the queue: asked again later
        if self.session is not None:  # the session keeps the previous model, if any; the mirror follows it
            self.queue.follow(self.session, message.what)

    @on(GenerationUpdated)
    def _updated(self, message: GenerationUpdated) -> None:
        if message.note:
            self.notify(message.note, timeout=3)
        view = message.view
        self.view = view
        if view is None:
            if self.session is not None and self.session.portable is not None:  # loaded, waiting for a prompt
                self.queue.follow(self.session, "load")
                self.query_one("#prompt", Input).focus()
            return
        self.query_one(DecisionList).show_view(view, message.select)
        self.query_one(InsightPanel).follow(view)
        self.set_class(bool(view.second_opinions) or view.second_label is not None, "-contrast")
        self.query_one(PrefixView).show_view(view)
        self._show_decisions_subtitle()
        self._show_title()
        if not message.partial:  # a run still going shows its decisions, not the last one's insides
            self._show_selected()
            self._request_head_roles()  # a model loaded while the head view shows
        self.query_one(GenerationOutput).show_output(view)

    @on(DataTable.RowHighlighted, "#decisions")
    def _decision_highlighted(self) -> None:
        self._show_selected()

    def _show_selected(self) -> None:
        decision = self.query_one(DecisionList).selected
        self._request_insight()
        self.query_one(CandidateTable).show_decision(decision)
        prefix = (self.view.prompt + self.view.generated) if self.view else ()
        self.query_one(AttentionView).show_decision(decision, prefix)
        self._show_picture()  # the chosen head's picture, above the rows
        self.query_one(DecisionInfo).show_decision(decision, loaded=self.view is not None)
