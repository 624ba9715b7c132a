"""The Generation screen: step through generation one next-token decision at a time.

The model, the decision stepper and every forward pass live on a worker thread. Key presses
become operations in a first-in first-out queue that one thread worker drains in order
(so ``n n backspace`` always means two steps then one back, however fast they are typed);
after each operation the worker posts a :class:`StepperView` of plain numbers, and the
widgets lay it out. Nothing here imports torch at module level.
"""

from __future__ import annotations

import json
import os
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
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Header, Input, Label, Select, Static

from minigpt_tui.widgets.attention_view import AttentionView
from minigpt_tui.widgets.candidate_table import CandidateTable
from minigpt_tui.widgets.decision_list import DecisionList
from minigpt_tui.widgets.generation_views import (
    CandidateView,
    DecisionView,
    OutputView,
    PieceView,
    StepperView,
)
from minigpt_tui.widgets.key_bar import KeyBar
from minigpt_tui.widgets.pieces import piece_text
from minigpt_tui.widgets.prefix_view import PrefixView

if TYPE_CHECKING:
    from minigpt_tui.app import MiniGPTApp

TOP_CANDIDATES = 16
MAX_INELIGIBLE_ROWS = 8
DEFAULT_SEED = 31415  # the engine's default sampling seed (engine.generation.DEFAULT_SEED)
DEFAULT_BUDGET = 24
MAX_BYTES_SHOWN = 24

GENERATION_HELP = """\
# Generation

Steps through generation one next-token decision at a time. Each decision is one forward pass
over the whole prefix (on a worker thread), one distribution over the vocabulary, and one
chosen id.

## Keys
| key | action |
|---|---|
| `enter` | in the model field: load the model; in any other field: apply the settings and start over |
| `n` | take one decision |
| `r` | run: decide until a stop (EOS, the budget, or the context is full) |
| `backspace` | step back one decision (the sampling generator is restored, so `n` redoes it exactly) |
| `ctrl+r` | reset to the prompt (apply changed settings) |
| `f` | force the highlighted candidate instead of the rule's choice at the selected decision; later decisions are undone and you continue from there |
| `w` | save the trace (JSON: model, rule, prompt ids, every decision with logits and probabilities, output) |
| `v` | on a small terminal, switch between the candidates and the attention view |
| `escape` | leave the form for the candidate table |

## Form
- **model**: a checkpoint folder, a `model.safetensors` file, or `RUN:latest` / `RUN:best` / `RUN:STEP` for a run in the runs directory.
- **prompt**: encoded with the model's own tokenizer, BOS first, no EOS.
- **rule**: *greedy* takes the highest eligible logit (a tie goes to the smaller id). *sample* divides the logits by the **temp**erature, keeps the **top-k** highest, then the smallest set whose probability reaches **top-p**, renormalizes, and draws with its own generator seeded by **seed** (one draw per decision, so a forced decision does not shift later draws). Blank top-k / top-p means no cut.
- **budget**: the most new ids to generate.

## Prefix
The ids the model sees next, as pieces: the prompt, then the generated pieces in bold; a forced piece is reversed.
Spaces show as ·, newlines as ↵. The count is prefix length against the model's context.

## Decisions
One row per decision: its number (with `*` when you forced it), the chosen piece (reversed when forced) and its
selection probability **p**. The highlighted row is the decision shown on the right; move it to look back.

## Decision line
The chosen piece and id; the rule's own pick when you forced another; **entropy** of the raw distribution in nats
(0: certain; ln V: uniform); how many ids the rule **retained** out of the **eligible** ones (BOS is never eligible);
the uniform **draw** in [0, 1) under sampling.

## Candidates
The top ids of the selected decision by logit, plus the chosen id and the rule's pick if they rank lower,
and the ineligible ids (BOS, which is never chosen) wherever they rank:
- **rank**: 1-based by logit, ties by smaller id.
- **logit**: the model's score for the last position.
- **raw p**: softmax of all logits (the model's own distribution), with a bar scaled to the most probable candidate (it shows even when every probability is small).
- **sel p**: the probability the rule selected from: zero outside the retained set (ineligible, cut by top-k or top-p); under greedy, the eligible softmax.
- **elig**: ✓ when the id may be chosen at all, ✗ when not (BOS, forbidden ids).
- **▶** before the rank marks the chosen id (bold; forced ones are also named in the decision line), **◇** the rule's own pick when another id was forced.

## Attention
For the selected decision, each layer's (**L**) and head's (**H**) attention weights from the last position over
the prefix, one cell per position: the cell's height is the weight relative to the row's largest, bold from 0.5
and dim under 0.1 (each row sums to 1); the axis above shows each position's first character (^ is BOS), and
each row ends with its largest weight and where it falls.

## Output
While deciding: how many decisions of the budget. At the end: the **stop** reason (eos: the model chose EOS;
budget: the budget is spent; context: the prefix fills the context), the generated **bytes** (EOS excluded),
whether they are valid **UTF-8**, and the text (invalid bytes shown as �).
"""


# -- form ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GenerationSettings:
    prompt: str
    kind: str = "greedy"
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = DEFAULT_SEED
    budget: int = DEFAULT_BUDGET


def _number(what: str, text: str, kind: type, default: Any) -> Any:
    from minigpt_tui.engine.errors import GenerationError
    from minigpt_tui.engine.session.inputs import parse_number

    value = parse_number(text, what, kind, error=GenerationError)
    return default if value is None else value


def parse_settings(prompt: str, kind: str, temperature: str, top_k: str, top_p: str, seed: str,
                   budget: str) -> GenerationSettings:
    """The form as typed into settings; a malformed number raises GenerationError. Ranges are
    checked by the engine's rule when the stepper is built."""
    from minigpt_tui.engine.errors import GenerationError

    if kind not in ("greedy", "sample"):
        raise GenerationError(f"unknown rule '{kind}' (choose greedy or sample)")
    budget_value = _number("budget", budget, int, DEFAULT_BUDGET)
    if kind == "greedy":
        return GenerationSettings(prompt, "greedy", budget=budget_value)
    return GenerationSettings(
        prompt,
        "sample",
        temperature=_number("temperature", temperature, float, 1.0),
        top_k=_number("top-k", top_k, int, None),
        top_p=_number("top-p", top_p, float, None),
        seed=_number("seed", seed, int, DEFAULT_SEED),
        budget=budget_value,
    )


# -- the worker side ----------------------------------------------------------------------------
def _vector(decision: Any, *names: str) -> Any:
    for name in names:
        value = getattr(decision, name, None)
        if value is not None:
            return value
    return None


def _candidate(candidate: Any, *, chosen: bool, rule_choice: bool) -> CandidateView:
    return CandidateView(candidate.rank, candidate.id, candidate.piece.text, float(candidate.logit),
                         float(candidate.raw_probability), float(candidate.selection_probability),
                         bool(candidate.eligible), chosen, rule_choice)


def _candidate_from_vectors(decision: Any, token_id: int, tokenizer: Any, *, chosen: bool,
                            rule_choice: bool) -> CandidateView:
    import torch

    logits = decision.logits.to(torch.float64)
    raw = torch.softmax(logits, dim=-1)
    selection = _vector(decision, "selection_probabilities", "selection")
    value = logits[token_id]
    rank = int((logits > value).sum()) + int((logits[:token_id] == value).sum()) + 1
    return CandidateView(rank, token_id, tokenizer.piece_text(token_id), float(value), float(raw[token_id]),
                         float(selection[token_id]) if selection is not None else 0.0,
                         bool(decision.eligible[token_id]), chosen, rule_choice)


def decision_view(decision: Any, tokenizer: Any) -> DecisionView:
    """A decision as plain numbers (worker thread)."""
    chosen_id, rule_id = decision.chosen.id, decision.rule_choice
    rows = [_candidate(c, chosen=c.id == chosen_id, rule_choice=c.id == rule_id) for c in decision.alternatives]
    listed = {row.id for row in rows}
    if chosen_id not in listed:
        rows.append(_candidate(decision.chosen, chosen=True, rule_choice=chosen_id == rule_id))
        listed.add(chosen_id)
    if rule_id not in listed:
        rows.append(_candidate_from_vectors(decision, rule_id, tokenizer, chosen=False, rule_choice=True))
        listed.add(rule_id)
    # Ineligible ids (BOS, forbidden ids) are listed wherever they rank, to show what is excluded.
    for token_id in [int(i) for i in (~decision.eligible).nonzero().flatten().tolist()][:MAX_INELIGIBLE_ROWS]:
        if token_id not in listed:
            rows.append(_candidate_from_vectors(decision, token_id, tokenizer, chosen=False, rule_choice=False))
    rows.sort(key=lambda row: row.rank)
    by_id = {row.id: row for row in rows}
    selection = _vector(decision, "selection_probabilities", "selection")
    retained = int((selection > 0).sum()) if selection is not None else 0
    attention = None
    if decision.attention is not None:
        attention = tuple(tuple(tuple(float(w) for w in head) for head in layer.tolist())
                          for layer in decision.attention)
    return DecisionView(
        step=decision.step,
        prefix_length=len(decision.prefix),
        chosen=by_id[chosen_id],
        rule_choice=by_id[rule_id],
        forced=bool(decision.forced),
        draw=decision.draw,
        entropy=float(decision.entropy),
        retained=retained,
        eligible_count=int(decision.eligible.sum()),
        candidates=tuple(rows),
        attention=attention,
    )


class GenerationSession:
    """The loaded model and its stepper. Only the screen's queue worker calls these methods,
    one at a time, in the order the keys were pressed."""

    def __init__(self, runs_dir: Path) -> None:
        self.runs_dir = runs_dir
        self.portable: Any = None
        self.spec: str | None = None
        self.model_path: Path | None = None
        self.stepper: Any = None
        self.settings: GenerationSettings | None = None
        self._views: dict[Any, DecisionView] = {}

    def load(self, spec: str) -> None:
        from minigpt_tui.engine.checkpoint.portable import load_portable_model
        from minigpt_tui.engine.runs import resolve_model_file

        path = resolve_model_file(spec, self.runs_dir)
        portable = load_portable_model(path)
        if portable.tokenizer is None:
            from minigpt_tui.engine.errors import GenerationError

            raise GenerationError(f"{path} holds no tokenizer: it cannot generate text")
        self.portable, self.spec, self.model_path = portable, spec, path
        self.stepper, self.settings = None, None
        self._views.clear()

    def configure(self, settings: GenerationSettings) -> None:
        from minigpt_tui.engine.errors import GenerationError
        from minigpt_tui.engine.generation import DecisionStepper, GenerationRule

        if self.portable is None:
            raise GenerationError("no model loaded: type a checkpoint, model file or RUN:latest and press enter")
        if settings.kind == "greedy":
            rule = GenerationRule.greedy(settings.budget)
        else:
            rule = GenerationRule.sample(settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
                                         seed=settings.seed, max_new_tokens=settings.budget)
        self.stepper = DecisionStepper.from_portable(self.portable, settings.prompt, rule, attention=True,
                                                     top_n=TOP_CANDIDATES)
        self.settings = settings
        self._views.clear()

    def _require(self) -> Any:
        from minigpt_tui.engine.errors import GenerationError

        if self.stepper is None:
            raise GenerationError("no model loaded: type a checkpoint, model file or RUN:latest and press enter")
        return self.stepper

    def step(self) -> None:
        self._require().step()

    def run(self) -> None:
        self._require().run()

    def back(self) -> None:
        self._require().back()

    def reset(self) -> None:
        self._require().reset()

    def force(self, step: int, token_id: int) -> None:
        """Take ``token_id`` at decision ``step`` (1-based), undoing it and every later one."""
        from minigpt_tui.engine.errors import GenerationError

        stepper = self._require()
        if not 1 <= step <= len(stepper.decisions) + 1:
            raise GenerationError(f"there is no decision {step} to force")
        undone = []
        while len(stepper.decisions) >= step:
            undone.append(stepper.back())
        try:
            stepper.force(token_id)
        except GenerationError:
            # Put the undone decisions back exactly (the rule redoes them, forced ones are re-forced).
            for decision in reversed(undone):
                if decision.forced:
                    stepper.force(decision.chosen.id)
                else:
                    stepper.step()
            raise

    def save_trace(self, target: Path) -> Path:
        stepper = self._require()
        trace = stepper.trace(self.model_path)
        target = target.expanduser()
        if target.is_dir():
            raise IsADirectoryError(f"{target} is a folder")
        text = json.dumps(trace, indent=1, ensure_ascii=False) + "\n"
        tmp = target.with_name(f".{target.name}.partial-{os.getpid()}")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return target

    def view(self) -> StepperView:
        stepper = self._require()
        tokenizer = stepper.tokenizer
        decisions = []
        for decision in stepper.decisions:
            cached = self._views.get(decision)
            if cached is None:
                cached = self._views[decision] = decision_view(decision, tokenizer)
            decisions.append(cached)
        alive = set(stepper.decisions)
        for stale in [d for d in self._views if d not in alive]:
            del self._views[stale]
        output = stepper.output()
        prompt = tuple(PieceView(i, tokenizer.piece_text(i)) for i in stepper.prompt_ids)
        generated = tuple(PieceView(d.chosen.id, d.chosen.piece) for d in decisions)
        portable = self.portable
        return StepperView(
            model_label=str(self.model_path) if self.model_path else (self.spec or ""),
            model_identity=getattr(portable, "identity", None),
            rule_label=stepper.rule.label,
            budget=stepper.rule.max_new_tokens,
            context=stepper.context,
            prompt=prompt,
            generated=generated,
            decisions=tuple(decisions),
            finished=stepper.finished,
            stop_reason=stepper.stop_reason,
            output=OutputView(tuple(output["generated_ids"]), bytes(output["generated_bytes"]),
                              bool(output["valid_utf8"]), str(output["display"]), bool(output["ended_with_eos"])),
            forced_steps=frozenset(d.step for d in decisions if d.forced),
        )


# -- messages -------------------------------------------------------------------------------------
class GenerationUpdated(Message):
    def __init__(self, view: StepperView | None, note: str | None = None, select: int | None = None) -> None:
        super().__init__()
        self.view = view
        self.note = note
        self.select = select


class GenerationFailed(Message):
    def __init__(self, reason: str, what: str, dropped: int) -> None:
        super().__init__()
        self.reason = reason
        self.what = what
        self.dropped = dropped


class QueueIdle(Message):
    pass


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
    """

    BINDINGS = [
        Binding("n", "step", "Next"),
        Binding("r", "run", "Run"),
        Binding("backspace", "back", "Back"),
        Binding("ctrl+r", "reset", "Reset"),
        Binding("f", "force", "Force"),
        Binding("w", "save_trace", "Save trace"),
        Binding("v", "toggle_attention", "Attention", show=False),
        Binding("escape", "leave_form", "To candidates", show=False),
    ]
    PALETTE_COMMANDS = (
        ("Next decision", "Take one decision (n)", "step"),
        ("Run to the end", "Decide until EOS, the budget or a full context (r)", "run"),
        ("Back one decision", "Undo the last decision (backspace)", "back"),
        ("Reset to the prompt", "Start over from the prompt with the form's settings (ctrl+r)", "reset"),
        ("Save trace", "Write the generation trace as JSON (w)", "save_trace"),
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
        decisions.show_decisions(view.decisions, select=select)
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
        first.append(f" · rank {chosen.rank} · raw {chosen.raw_probability:.4f} · sel "
                     f"{chosen.selection_probability:.4f}")
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
