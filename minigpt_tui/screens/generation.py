"""The Generation screen: step through generation one next-token decision at a time.

The model, the decision stepper and every forward pass live on a worker thread. Key presses
become operations in a first-in first-out queue that one thread worker drains in order
(so ``n n backspace`` always means two steps then one back, however fast they are typed);
after each operation the worker posts a :class:`StepperView` of plain numbers, and the
widgets lay it out. Nothing here imports torch at module level.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Header, Input, Label, Select, Static

from minigpt_tui.engine.session.generation import (
    DEFAULT_BUDGET,
    DEFAULT_SEED,
    DecisionView,
    GenerationSession,
    GenerationSettings,
    StepperView,
    parse_settings,
)
from minigpt_tui.widgets.attention_view import AttentionView
from minigpt_tui.widgets.candidate_table import CandidateTable, probability
from minigpt_tui.widgets.decision_list import DecisionList
from minigpt_tui.widgets.insight_panel import InsightPanel
from minigpt_tui.messages import GenerationFailed, GenerationUpdated, InsightReady, QueueIdle
from minigpt_tui.screens.help_texts import GENERATION_HELP
from minigpt_tui.widgets.key_bar import KeyBar
from minigpt_tui.widgets.pieces import piece_text
from minigpt_tui.widgets.prefix_view import PrefixView

if TYPE_CHECKING:
    from minigpt_tui.app import MiniGPTApp

MAX_BYTES_SHOWN = 24


@dataclass(frozen=True)
class Operation:
    """One queued piece of work: ``run`` does it on the worker; the result is a note for the user."""

    what: str
    run: Callable[[GenerationSession], str | None]
    select: str = "last"  # which decision to show afterwards: "last" or "keep"
    loads_model: bool = False


class GenerationScreen(Screen):
    HELP = GENERATION_HELP
    HELP_TITLE = "Generation"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    AUTO_FOCUS = "#candidates"  # the step keys work at once; tab reaches the form
    VERTICAL_BREAKPOINTS = [(0, "-short"), (34, "-tall")]

    DEFAULT_CSS = """
    GenerationScreen #gen-form { height: auto; padding: 0 1; background: $boost; }
    GenerationScreen .form-row { height: 1; }
    GenerationScreen .form-row Label { padding: 0 1 0 0; color: $text-muted; }
    GenerationScreen .form-row Input { margin-right: 1; }
    GenerationScreen #model { width: 1fr; }
    GenerationScreen #prompt { width: 1fr; }
    GenerationScreen #rule { width: 10; margin-right: 1; }
    GenerationScreen #temperature, GenerationScreen #top_p { width: 6; }
    GenerationScreen #top_k, GenerationScreen #budget { width: 5; }
    GenerationScreen #seed { width: 1fr; max-width: 22; }
    GenerationScreen #prefix {
        border: round $primary 50%; border-title-color: $text; border-subtitle-color: $text-muted;
    }
    GenerationScreen #gen-body { height: 1fr; }
    GenerationScreen #decisions {
        width: 28; border: round $primary 50%; border-title-color: $text;
    }
    GenerationScreen.-narrow #decisions { width: 20; }
    GenerationScreen #gen-right { width: 1fr; }
    GenerationScreen #decision-info { height: auto; max-height: 3; padding: 0 1; }
    GenerationScreen #candidates, GenerationScreen #attention {
        border: round $primary 50%; border-title-color: $text; border-subtitle-color: $text-muted;
    }
    GenerationScreen #decisions:focus, GenerationScreen #candidates:focus { border: round $primary; }
    GenerationScreen #attention { height: auto; max-height: 50%; }
    GenerationScreen.-short #attention { display: none; }
    GenerationScreen.-short.-show-attention #attention { display: block; height: 1fr; max-height: 100%; }
    GenerationScreen.-short.-show-attention #candidates { display: none; }
    GenerationScreen #gen-output { height: auto; max-height: 3; padding: 0 1; background: $boost; }
    GenerationScreen #insight {
        display: none; border: round $primary 50%; border-title-color: $text; border-subtitle-color: $text-muted;
    }
    GenerationScreen.-show-insight #insight { display: block; }
    GenerationScreen.-show-insight #candidates, GenerationScreen.-show-insight #attention { display: none; }
    GenerationScreen.-contrast #decisions { width: 40; }
    GenerationScreen.-narrow.-contrast #decisions { width: 24; }
    """

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
        Binding("m", "second_model", "2nd model", show=False),
        Binding("escape", "leave_form", "To candidates", show=False),
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
        ("Second model", "Compare each decision with a second model (m)", "second_model"),
    )

    def __init__(self) -> None:
        super().__init__()
        self.view: StepperView | None = None
        self.session: GenerationSession | None = None
        self._queue: deque[Operation] = deque()
        self._queue_lock = threading.Lock()
        self._draining = False
        self.busy = False
        # What the queue will have applied once it drains (the UI's mirror of the session).
        self._spec_applied: str | None = None
        self._settings_applied: GenerationSettings | None = None
        self._pending_model: str | None = None
        self._form_ready = False  # set in on_mount (is_mounted turns true only later)
        self.insight_kind: str | None = None  # the view shown in place of the candidates
        self.pattern_layer = 0
        self.pattern_head = 0
        self.insight: Any = None  # the InsightView shown
        self._insight_asked: tuple[Any, ...] | None = None

    @property
    def mini_app(self) -> "MiniGPTApp":
        return self.app  # type: ignore[return-value]

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Notifications carry the engine's messages and paths verbatim: no markup, since
        a shape like "[n, 2]" would read as a style tag."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    # -- layout ------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="gen-form"):
            with Horizontal(classes="form-row"):
                yield Label("model")
                yield Input(placeholder="checkpoint, model.safetensors or RUN:latest / RUN:best",
                            compact=True, id="model")
                yield Label("prompt")
                yield Input(placeholder="text the model continues", compact=True, id="prompt")
            with Horizontal(classes="form-row"):
                yield Label("rule")
                yield Select([("greedy", "greedy"), ("sample", "sample")], value="greedy", allow_blank=False,
                             compact=True, id="rule")
                yield Label("temp")
                yield Input(placeholder="1.0", compact=True, id="temperature", disabled=True)
                yield Label("top-k")
                yield Input(placeholder="all", compact=True, id="top_k", disabled=True)
                yield Label("top-p")
                yield Input(placeholder="1", compact=True, id="top_p", disabled=True)
                yield Label("seed")
                yield Input(placeholder=str(DEFAULT_SEED), compact=True, id="seed", disabled=True)
                yield Label("budget")
                yield Input(placeholder=str(DEFAULT_BUDGET), compact=True, id="budget")
        prefix = PrefixView(id="prefix")
        prefix.border_title = "Prefix"
        yield prefix
        with Horizontal(id="gen-body"):
            decisions = DecisionList(id="decisions")
            decisions.border_title = "Decisions"
            yield decisions
            with Vertical(id="gen-right"):
                yield Static(Text("Load a model (enter in the model field), then press n to take a decision.",
                                  style="dim"), id="decision-info")
                candidates = CandidateTable(id="candidates")
                candidates.border_title = "Candidates"
                yield candidates
                attention = AttentionView(id="attention")
                attention.border_title = "Attention (last position over the prefix)"
                yield attention
                insight = InsightPanel(id="insight")
                insight.border_title = "Inside"
                yield insight
        yield Static("", id="gen-output")
        yield KeyBar()

    def on_mount(self) -> None:
        self.sub_title = "Generation"
        self.session = GenerationSession(self.mini_app.settings.runs_dir)
        self._form_ready = True
        for field in self.query(Input):
            field.cursor_blink = False
        self._update_view_hint()
        if self._pending_model is not None:
            spec, self._pending_model = self._pending_model, None
            self.load_model(spec)
        else:
            self._suggest_model()

    def on_screen_resume(self) -> None:
        self.sub_title = f"Generation · {self._display_path(self.view.model_label)}" if self.view else "Generation"

    def _display_path(self, path: str) -> str:
        """A model under the runs directory is named relative to it."""
        from minigpt_tui.engine.session.run_store import RunStore

        return RunStore(self.mini_app.settings.runs_dir).display(path)

    # -- choosing a model ---------------------------------------------------------------------
    def load_model(self, spec: str) -> None:
        """Load ``spec`` (a model file, checkpoint folder or RUN:latest/best) and start over
        with the form's prompt and rule. Other screens call this ("generate with this model")."""
        if not self._form_ready:
            self._pending_model = spec
            return
        self.query_one("#model", Input).value = spec
        settings = self._read_form()
        if settings is None:
            settings = GenerationSettings(self.query_one("#prompt", Input).value)
        self._enqueue_load(spec, settings)
        self.query_one(CandidateTable).focus()

    @work(thread=True, exit_on_error=False, group="generation-suggest")
    def _suggest_model(self) -> None:
        """Fill the model field with the newest run's latest checkpoint, if there is one."""
        from minigpt_tui.engine.checkpoint.directory import latest_checkpoint
        from minigpt_tui.engine.runs import list_runs

        try:
            runs = [r for r in list_runs(self.mini_app.settings.runs_dir) if latest_checkpoint(r.checkpoints)]
        except OSError:
            return
        if runs:
            newest = max(runs, key=lambda r: (r.path.stat().st_mtime, r.name))
            self.app.call_from_thread(self._suggest, f"{newest.name}:latest")

    def _suggest(self, spec: str) -> None:
        field = self.query_one("#model", Input)
        if not field.value and self._spec_applied is None:
            field.value = spec

    # -- the form -----------------------------------------------------------------------------
    def _read_form(self, *, loud: bool = True) -> GenerationSettings | None:
        from minigpt_tui.engine.errors import MiniGPTError

        def text(name: str) -> str:
            return self.query_one(f"#{name}", Input).value

        try:
            return parse_settings(text("prompt"), str(self.query_one("#rule", Select).value), text("temperature"),
                                  text("top_k"), text("top_p"), text("seed"), text("budget"))
        except MiniGPTError as err:
            if loud:
                self.notify(str(err), title="invalid value", severity="error")
            return None

    @on(Select.Changed, "#rule")
    def _rule_changed(self, event: Select.Changed) -> None:
        sampling = event.value == "sample"
        for name in ("temperature", "top_k", "top_p", "seed"):
            self.query_one(f"#{name}", Input).disabled = not sampling

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
            return
        settings = self._read_form()
        if settings is None:
            return
        if not self._prepare(settings):
            return
        self.query_one(CandidateTable).focus()

    def _prepare(self, settings: GenerationSettings, *, force_reset: bool = False) -> bool:
        """Queue a load and/or a fresh stepper when the form differs from what is applied."""
        spec = self.query_one("#model", Input).value.strip()
        if spec and spec != self._spec_applied:
            self._enqueue_load(spec, settings)
            return True
        if self._spec_applied is None:
            self.notify("no model loaded: type a checkpoint, model file or RUN:latest in the model field",
                        title="generation", severity="warning")
            return False
        if force_reset or settings != self._settings_applied:
            changed = self._settings_applied is not None and settings != self._settings_applied
            self._settings_applied = settings

            def start(session: GenerationSession) -> str | None:
                session.configure(settings)
                return "settings changed: started over from the prompt" if changed else None

            self._enqueue(Operation("start", start))
        return True

    def _enqueue_load(self, spec: str, settings: GenerationSettings) -> None:
        self._spec_applied, self._settings_applied = spec, settings

        def load(session: GenerationSession) -> str:
            session.load(spec)
            session.configure(settings)
            return f"loaded {self._display_path(str(session.model_path))}"

        self._enqueue(Operation("load", load, loads_model=True))

    # -- actions -------------------------------------------------------------------------------
    def _ready(self) -> bool:
        settings = self._read_form()
        return settings is not None and self._prepare(settings)

    def action_step(self) -> None:
        if self._ready():
            self._enqueue(Operation("step", lambda session: session.step()))

    def action_run(self) -> None:
        if self._ready():
            self._enqueue(Operation("run", lambda session: session.run()))

    def action_back(self) -> None:
        if self._spec_applied is None:
            return
        self._enqueue(Operation("back", lambda session: session.back()))

    def action_reset(self) -> None:
        settings = self._read_form()
        if settings is None:
            return
        if self._prepare(settings, force_reset=True):
            self.notify("back to the prompt", timeout=2)

    def action_force(self) -> None:
        decision = self.query_one(DecisionList).selected
        candidate = self.query_one(CandidateTable).highlighted
        if decision is None or candidate is None:
            self.notify("take a decision first (n), then highlight a candidate to force", title="force",
                        severity="warning")
            return
        if not candidate.eligible:
            self.notify(f"id {candidate.id} ({candidate.piece}) is not eligible: it can never be chosen",
                        title="force refused", severity="error")
            return
        step, token_id = decision.step, candidate.id
        self._enqueue(Operation("force", lambda session: session.force(step, token_id)))

    def action_save_trace(self) -> None:
        from minigpt_tui.screens.path_prompt import PathPromptScreen

        if self.view is None or not self.view.decisions:
            self.notify("nothing to save yet: take a decision first (n)", title="save trace", severity="warning")
            return

        def chosen(text: str | None) -> None:
            if text:
                target = Path(text)
                self._enqueue(Operation("save", lambda session: f"trace saved: {session.save_trace(target)}",
                                        select="keep"))

        self.app.push_screen(PathPromptScreen("Save trace", "Write the trace as JSON to:",
                                              value=str(Path.cwd() / "generation-trace.json")), chosen)

    def action_toggle_attention(self) -> None:
        self.toggle_class("-show-attention")
        self._update_view_hint()

    def _update_view_hint(self) -> None:
        # Only a short terminal shows one of the two at a time; a tall one shows both.
        short = self.has_class("-short")
        showing = self.has_class("-show-attention")
        self.query_one(CandidateTable).border_subtitle = "v: attention" if short and not showing else ""
        self.query_one(AttentionView).border_subtitle = "v: candidates" if short and showing else ""

    def on_resize(self) -> None:
        self.call_after_refresh(self._update_view_hint)

    def action_leave_form(self) -> None:
        self.query_one(CandidateTable).focus()

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

    def action_pattern(self, layers: int, heads: int) -> None:
        if self.insight is None:
            return
        layer = min(max(self.pattern_layer + layers, 0), self.insight.layers - 1)
        head = min(max(self.pattern_head + heads, 0), self.insight.heads - 1)
        if (layer, head) != (self.pattern_layer, self.pattern_head):
            self.pattern_layer, self.pattern_head = layer, head
            self._request_insight()

    def _request_insight(self) -> None:
        """Queue the computation for the selected decision unless that one is already asked."""
        decision = self.query_one(DecisionList).selected
        if self.insight_kind is None or decision is None:
            return
        candidate = self.query_one(CandidateTable).highlighted
        step, layer, head = decision.step, self.pattern_layer, self.pattern_head
        candidate_id = candidate.id if candidate else None
        key = (step, decision.chosen.id, decision.forced, layer, head, candidate_id)
        if key == self._insight_asked:
            return
        self._insight_asked = key
        self.query_one(InsightPanel).border_subtitle = "working…"

        def inspect(session: GenerationSession) -> None:
            self.post_message(InsightReady(session.inspect(step, layer, head, candidate_id)))

        self._enqueue(Operation("inside", inspect, select="keep"))

    @on(InsightReady)
    def _insight_ready(self, message: InsightReady) -> None:
        view = message.view
        self.insight = view
        panel = self.query_one(InsightPanel)
        panel.show_insight(view)
        panel.border_subtitle = "l lens · x parts · h head · [ ] block · { } head"
        panel.border_title = f"Inside decision {view.step} · block {view.pattern.layer} head {view.pattern.head}"

    def action_second_model(self) -> None:
        from minigpt_tui.screens.path_prompt import PathPromptScreen

        if self._spec_applied is None:
            self.notify("load a model first", title="second model", severity="warning")
            return

        def chosen(text: str | None) -> None:
            if text is None:
                return
            spec = None if text.strip().lower() == "none" else text.strip()

            def load(session: GenerationSession) -> str:
                session.load_second(spec)
                return "second model removed" if spec is None else f"second model: {session.second_path}"

            self._enqueue(Operation("second model", load, select="keep"))

        self.app.push_screen(PathPromptScreen("Second model", "Compare each decision with (none: remove the second model):",
                                              value=""), chosen)

    # -- the queue -----------------------------------------------------------------------------
    def _enqueue(self, operation: Operation) -> None:
        with self._queue_lock:
            self._queue.append(operation)
            start = not self._draining
            self._draining = True
        self._set_busy(True)
        if start:
            self._drain_queue()

    @work(thread=True, exit_on_error=False, group="generation")
    def _drain_queue(self) -> None:
        from minigpt_tui.engine.errors import MiniGPTError

        session = self.session
        assert session is not None
        while True:
            with self._queue_lock:
                if not self._queue:
                    self._draining = False
                    break
                operation = self._queue.popleft()
            try:
                note = operation.run(session)
                view = session.view() if session.stepper is not None else None
            except (MiniGPTError, OSError) as err:
                with self._queue_lock:
                    dropped = len(self._queue)
                    self._queue.clear()
                reason = str(err) if isinstance(err, MiniGPTError) else (
                    f"{getattr(err, 'filename', '') or ''} {err.strerror or err}".strip())
                self.post_message(GenerationFailed(reason, operation.what, dropped))
                continue
            select = None if operation.select == "keep" else (len(view.decisions) if view else None)
            self.post_message(GenerationUpdated(view, note, select))
        self.post_message(QueueIdle())

    def _set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.query_one("#decisions", DecisionList).border_subtitle = "working…" if busy else ""

    @on(QueueIdle)
    def _queue_idle(self) -> None:
        with self._queue_lock:
            idle = not self._draining
        if idle:
            self._set_busy(False)

    @on(GenerationFailed)
    def _failed(self, message: GenerationFailed) -> None:
        self.notify(message.reason, title=f"{message.what} failed", severity="error")
        if message.what == "load":
            # The session keeps the previous model, if any; the mirror follows it.
            self._spec_applied = self.session.spec if self.session else None
            self._settings_applied = self.session.settings if self.session else None
        elif message.what == "start":
            self._settings_applied = self.session.settings if self.session else None

    @on(GenerationUpdated)
    def _updated(self, message: GenerationUpdated) -> None:
        if message.note:
            self.notify(message.note, timeout=3)
        view = message.view
        self.view = view
        if view is None:
            return
        decisions = self.query_one(DecisionList)
        select = message.select
        if select is None:
            current = decisions.selected
            select = current.step if current is not None else len(view.decisions)
        decisions.show_decisions(view.decisions, select=select, opinions=view.second_opinions)
        self.set_class(bool(view.second_opinions) or view.second_label is not None, "-contrast")
        decisions.border_title = "Decisions vs B" if view.second_label else "Decisions"
        self.query_one(PrefixView).show_view(view)
        self.query_one(PrefixView).border_title = f"Prefix · {view.rule_label}"
        self.sub_title = f"Generation · {self._display_path(view.model_label)}"
        self._show_selected()
        self._show_output(view)

    @on(DataTable.RowHighlighted, "#decisions")
    def _decision_highlighted(self) -> None:
        self._show_selected()

    def _show_selected(self) -> None:
        decision = self.query_one(DecisionList).selected
        self._request_insight()
        self.query_one(CandidateTable).show_decision(decision)
        prefix = (self.view.prompt + self.view.generated) if self.view else ()
        self.query_one(AttentionView).show_decision(decision, prefix)
        self.query_one("#decision-info", Static).update(self._decision_line(decision))
        table = self.query_one(CandidateTable)
        table.border_title = f"Candidates · decision {decision.step}" if decision else "Candidates"

    def _decision_line(self, decision: DecisionView | None) -> Text | Group:
        if decision is None:
            if self.view is not None:
                return Text("Press n to take the first decision, r to run to the end.", style="dim")
            return Text("Load a model (enter in the model field), then press n to take a decision.", style="dim")
        chosen = decision.chosen
        first = Text(no_wrap=True, overflow="ellipsis")
        first.append(f"#{decision.step} ", style="bold")
        first.append("forced" if decision.forced else "chose", style="bold reverse" if decision.forced else "bold")
        first.append(" ")
        first.append_text(piece_text(chosen.piece, style="bold"))
        first.append(f" id {chosen.id}")
        if decision.forced:
            rule = decision.rule_choice
            first.append(" (rule: ")
            first.append_text(piece_text(rule.piece, style="italic"))
            first.append(f" id {rule.id})")
        first.append(f" · rank {chosen.rank} · raw {probability(chosen.raw_probability).plain} · sel "
                     f"{probability(chosen.selection_probability).plain}")
        second = Text(no_wrap=True, overflow="ellipsis", style="dim")
        second.append(f"entropy {decision.entropy:.3f} nats · retained {decision.retained} of "
                      f"{decision.eligible_count} eligible")
        if decision.draw is not None:
            second.append(f" · draw {decision.draw:.4f}")
        return Group(first, second)

    def _show_output(self, view: StepperView) -> None:
        made = len(view.decisions)
        status = Text(no_wrap=True, overflow="ellipsis")
        if not view.finished:
            status.append(f"{made} of at most {view.budget} decisions", style="bold")
            status.append(" · n: one more · r: to the end", style="dim")
        else:
            status.append(f"stop: {view.stop_reason}", style="bold")
            status.append(f" after {made} decisions")
        status.append(" · UTF-8 ")
        status.append("valid" if view.output.valid_utf8 else "INVALID (shown with �)",
                      style="green" if view.output.valid_utf8 else "bold red")
        status.append(" · ")
        status.append(repr(view.output.display))
        data = view.output.generated_bytes
        raw = Text(no_wrap=True, overflow="ellipsis")
        raw.append(f"{len(data)} byte{'' if len(data) == 1 else 's'}", style="bold")
        if data:
            shown = " ".join(f"{b:02x}" for b in data[:MAX_BYTES_SHOWN])
            raw.append(f": {shown}{' …' if len(data) > MAX_BYTES_SHOWN else ''}", style="dim")
        self.query_one("#gen-output", Static).update(Group(status, raw))
