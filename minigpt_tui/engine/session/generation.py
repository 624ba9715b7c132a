"""A generation session for the app: a loaded model, its decision stepper, and typed views of
every decision (candidates with their ranks and raw and selection probabilities, computed
here), so the screen only lays out numbers. Torch-free at import; the screen's queue worker
calls the session one operation at a time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minigpt_tui.engine.analysis.generation_rule import (
    DEFAULT_BUDGET,
    DEFAULT_SEED,
    GenerationRule,
)
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.core.files import refuse_inside_checkpoint, write_file
from minigpt_tui.engine.formats.checkpoint_folder import STEP_DIR, latest_checkpoint
from minigpt_tui.engine.session.inputs import parse_number
from minigpt_tui.engine.session.insight import (
    InsightView,
    PatternView,
    SecondOpinionView,
    insight_view,
)
from minigpt_tui.engine.session.opening import open_model
from minigpt_tui.engine.session.run_store import RunStore
from minigpt_tui.engine.session.runs import list_runs

TOP_CANDIDATES = 16
MAX_INELIGIBLE_ROWS = 8
NO_MODEL = "no model loaded: type a checkpoint, model file or RUN:latest and press enter"
HEAD_FORMS = "type a block and a head: 23.4, 23 4, L23 H4 or block 23 head 4"


# -- typed views ------------------------------------------------------------------------------
@dataclass(frozen=True)
class PieceView:
    id: int
    text: str  # the tokenizer's readable label (<bos>, <eos>, bytes with \\xNN escapes)


@dataclass(frozen=True)
class CandidateView:
    rank: int  # 1-based over the whole vocabulary by logit descending, id ascending
    id: int
    piece: str
    logit: float
    raw_probability: float
    selection_probability: float
    eligible: bool
    chosen: bool = False
    rule_choice: bool = False


@dataclass(frozen=True)
class DecisionView:
    step: int
    prefix_length: int
    chosen: CandidateView
    rule_choice: CandidateView
    forced: bool
    draw: float | None
    entropy: float  # nats, of the raw distribution
    retained: int  # ids with a non-zero selection probability
    eligible_count: int
    candidates: tuple[CandidateView, ...]
    # attention[layer][head][position]: the last position's weights over the prefix
    attention: tuple[tuple[tuple[float, ...], ...], ...] | None = None
    # Past the context: the first position (of prompt + generated) in the window the model
    # saw; prefix_length is then the window's length. 0: the whole prefix.
    window_start: int = 0


@dataclass(frozen=True)
class OutputView:
    generated_ids: tuple[int, ...]
    generated_bytes: bytes
    valid_utf8: bool
    display: str
    ended_with_eos: bool


class PatternLookup:
    """Any decision's whole pattern of one head as plain numbers, read from the rows the
    decisions recorded (no forward pass; cheap enough for the UI thread). It reads only a
    snapshot of frozen records, so the worker may go on deciding meanwhile."""

    def __init__(self, patterns: Any) -> None:
        self._patterns = patterns  # the engine's HeadPatterns

    def pattern(self, step: int, layer: int, head: int) -> PatternView | None:
        """Decision ``step``'s (1-based) pattern of ``head`` in block ``layer``; None when it
        cannot be read from the records (then the worker computes it)."""
        weights = self._patterns.pattern(step, layer, head)
        if weights is None:
            return None
        pieces = tuple(piece.text for piece in self._patterns.decisions[step - 1].prefix)
        return PatternView(layer, head, pieces, tuple(tuple(row) for row in weights.tolist()))


@dataclass(frozen=True)
class StepperView:
    """Where a generation stands: model, rule, prefix, every decision, the output."""

    model_label: str
    model_identity: str | None
    rule_label: str
    budget: int
    context: int
    prompt: tuple[PieceView, ...]
    generated: tuple[PieceView, ...]
    decisions: tuple[DecisionView, ...]
    finished: bool
    stop_reason: str | None
    output: OutputView
    forced_steps: frozenset[int] = field(default_factory=frozenset)
    second_label: str | None = None  # the second model, when one is loaded
    second_opinions: tuple[SecondOpinionView, ...] = ()  # one per decision, in order
    cached: bool = False  # decisions use the key/value cache (else each recomputes the whole prefix)
    layers: int = 0  # the model's blocks and heads per block
    heads: int = 0
    patterns: PatternLookup | None = None  # every head's pattern of every decision, when recorded
    window_note: str | None = None  # "sliding window of N positions from decision K" once one slid
    window_from: int | None = None  # K: the first decision that saw a sliding window


# -- the form's settings ---------------------------------------------------------------------
@dataclass(frozen=True)
class GenerationSettings:
    """What the form asks for: a prompt and the rule to continue it with."""

    prompt: str
    rule: GenerationRule = field(default_factory=GenerationRule)


def _number(what: str, text: str, kind: type, default: Any) -> Any:
    value = parse_number(text, what, kind, error=GenerationError)
    return default if value is None else value


def parse_settings(prompt: str, kind: str, temperature: str, top_k: str, top_p: str, seed: str,
                   budget: str) -> GenerationSettings:
    """The form as typed into settings; a malformed number or a value the rule refuses raises
    GenerationError. The sampling fields are ignored under greedy."""
    budget_value = _number("budget", budget, int, DEFAULT_BUDGET)
    if kind != "sample":
        return GenerationSettings(prompt, GenerationRule(kind, max_new_tokens=budget_value))  # greedy, or refused
    rule = GenerationRule.sample(
        _number("temperature", temperature, float, 1.0),
        top_k=_number("top-k", top_k, int, None),
        top_p=_number("top-p", top_p, float, None),
        seed=_number("seed", seed, int, DEFAULT_SEED),
        max_new_tokens=budget_value,
    )
    return GenerationSettings(prompt, rule)


# -- typed views of decisions (worker thread) -------------------------------------------------
def _candidate(candidate: Any, *, chosen: bool, rule_choice: bool) -> CandidateView:
    return CandidateView(candidate.rank, candidate.id, candidate.piece.text, float(candidate.logit),
                         float(candidate.raw_probability), float(candidate.selection_probability),
                         bool(candidate.eligible), chosen, rule_choice)


def _candidate_rows(decision: Any, tokenizer: Any) -> list[CandidateView]:
    """A decision's candidate rows by rank: its alternatives, the chosen id and the rule's
    choice, and the ineligible ids (the first :data:`MAX_INELIGIBLE_ROWS`)."""
    chosen_id, rule_id = decision.chosen.id, decision.rule_choice
    rows = [_candidate(c, chosen=c.id == chosen_id, rule_choice=c.id == rule_id) for c in decision.alternatives]
    listed = {row.id for row in rows}
    for candidate in (decision.chosen, decision.rule_candidate):
        if candidate.id not in listed:
            rows.append(_candidate(candidate, chosen=candidate.id == chosen_id, rule_choice=candidate.id == rule_id))
            listed.add(candidate.id)
    # Ineligible ids (BOS, forbidden ids) are listed wherever they rank, to show what is excluded.
    excluded = [i for i in decision.ineligible_ids[:MAX_INELIGIBLE_ROWS] if i not in listed]
    rows.extend(_candidate(c, chosen=False, rule_choice=False) for c in decision.candidates_for(excluded, tokenizer))
    rows.sort(key=lambda row: row.rank)
    return rows


def _attention_view(decision: Any) -> tuple[tuple[tuple[float, ...], ...], ...] | None:
    """A decision's attention weights as plain numbers (None when it kept none)."""
    if decision.attention is None:
        return None
    return tuple(tuple(tuple(float(w) for w in head) for head in layer.tolist())
                 for layer in decision.attention)


def decision_view(decision: Any, tokenizer: Any) -> DecisionView:
    """A decision as plain numbers (worker thread)."""
    chosen_id, rule_id = decision.chosen.id, decision.rule_choice
    rows = _candidate_rows(decision, tokenizer)
    by_id = {row.id: row for row in rows}
    attention = _attention_view(decision)
    return DecisionView(
        step=decision.step,
        prefix_length=len(decision.prefix),
        chosen=by_id[chosen_id],
        rule_choice=by_id[rule_id],
        forced=bool(decision.forced),
        draw=decision.draw,
        entropy=float(decision.entropy),
        retained=decision.retained_count,
        eligible_count=decision.eligible_count,
        candidates=tuple(rows),
        attention=attention,
        window_start=decision.window_start,
    )


def parse_head(text: str, layers: int, heads: int) -> tuple[int, int]:
    """A typed block and head (``23.4``, ``23 4``, ``b23 h4``, ``L23 H4``, ``block 23 head 4``), checked
    against the model's ``layers`` blocks of ``heads`` heads; GenerationError otherwise."""
    lowered = text.strip().lower()
    numbers = re.findall(r"[0-9]+", lowered)
    words = re.sub(r"block|head|[0-9bhl.,:/\s]", "", lowered)
    if len(numbers) != 2 or words:
        raise GenerationError(f"{text.strip() or 'nothing'} names no head: {HEAD_FORMS}")
    layer, head = int(numbers[0]), int(numbers[1])
    if layer >= layers:
        raise GenerationError(f"there is no block {layer}: the model has blocks 0 to {layers - 1}")
    if head >= heads:
        raise GenerationError(f"there is no head {head}: each block has heads 0 to {heads - 1}")
    return layer, head


def _output_view(output: dict[str, Any]) -> OutputView:
    return OutputView(tuple(output["generated_ids"]), bytes(output["generated_bytes"]),
                      bool(output["valid_utf8"]), str(output["display"]), bool(output["ended_with_eos"]))


def _has_checkpoint(checkpoints: Path) -> bool:
    """A run's checkpoints folder holds one; False when it cannot be read (one unreadable
    run never hides the others' suggestion)."""
    try:
        return latest_checkpoint(checkpoints) is not None
    except OSError:
        return False


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
        self.second: Any = None  # a second model whose opinion each decision shows
        self.second_path: Path | None = None
        self._opinions: dict[Any, SecondOpinionView] = {}
        self.kv_cache: bool | None = None  # None: the model's default (the cache, except in exact precision)

    def display(self, path: str) -> str:
        """``path`` named relative to the runs directory when it lies under it."""
        return RunStore(self.runs_dir).display(path)

    def short_name(self, path: str) -> str:
        """A model's name in a few cells: ``RUN step N`` for a checkpoint of a run in the
        runs directory, else the file's name (its folder's too for a ``model.safetensors``)."""
        shown = Path(self.display(path))
        parts = shown.parts
        if not shown.is_absolute() and len(parts) >= 3 and parts[1] == "checkpoints":
            step = STEP_DIR.match(parts[2])
            if step is not None:
                return f"{parts[0]} step {int(step.group(1))}"
        if shown.name == "model.safetensors" and shown.parent.name:
            return f"{shown.parent.name}/{shown.name}"
        return shown.name or str(shown)

    def suggested_spec(self) -> str | None:
        """``RUN:latest`` for the newest run that has a checkpoint; None when there is none
        or the runs directory cannot be read."""
        try:
            runs = [r for r in list_runs(self.runs_dir) if _has_checkpoint(r.checkpoints)]
            if not runs:
                return None
            newest = max(runs, key=lambda r: (r.path.stat().st_mtime, r.name))
        except OSError:
            return None
        return f"{newest.name}:latest"

    def load(self, spec: str) -> None:
        portable = open_model(spec, self.runs_dir)
        self.portable, self.spec, self.model_path = portable, spec, portable.path
        self.stepper, self.settings = None, None
        self._views.clear()
        self.load_second(None)  # it was compared with the previous model

    def configure(self, settings: GenerationSettings) -> None:
        from minigpt_tui.engine.analysis.generation import (  # deferred: imports torch
            DecisionStepper,
            default_kv_cache,
        )

        if self.portable is None:
            raise GenerationError(NO_MODEL)
        cached = default_kv_cache(self.portable.model) if self.kv_cache is None else self.kv_cache
        self.stepper = DecisionStepper.from_portable(self.portable, settings.prompt, settings.rule, attention=True,
                                                     top_n=TOP_CANDIDATES, use_kv_cache=cached)
        self.settings = settings
        self._views.clear()

    def toggle_kv_cache(self) -> str:
        """Switch between the key/value cache and recomputing the whole prefix, and redo the
        decisions made so far that way (forced ones forced again). Returns a note."""
        stepper = self._require()
        made = stepper.decisions
        self.kv_cache = not stepper.use_kv_cache
        self.configure(self.settings)
        for decision in made:
            if self.stepper.finished:
                break
            if decision.forced:
                self.stepper.force(decision.chosen.id)
            else:
                self.stepper.step()
        mode = "the key/value cache" if self.kv_cache else "the whole prefix recomputed"
        return f"decisions use {mode}" + (f": {len(made)} redone" if made else "")

    def _require(self) -> Any:
        if self.stepper is None:
            raise GenerationError(NO_MODEL)
        return self.stepper

    def step(self) -> None:
        self._require().step()

    def run(self, going: Callable[[], bool] | None = None) -> str | None:
        """Decide until a stop; ``going()``, asked after each decision, may end it sooner
        (the decisions made stay)."""
        stepper = self._require()
        stepper.run(going)
        return None if stepper.finished else f"run stopped after decision {len(stepper.decisions)}"

    def back(self) -> None:
        self._require().back()

    def reset(self) -> None:
        self._require().reset()

    def force(self, step: int, token_id: int) -> None:
        """Take ``token_id`` at decision ``step`` (1-based), undoing it and every later one."""
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

    def find_piece(self, tests: Sequence[Callable[[str], bool]], typed: str) -> int:
        """The smallest id whose piece passes the first of ``tests`` that any piece passes
        (``typed`` names the piece in the refusal)."""
        tokenizer = self._require().tokenizer
        pieces = [tokenizer.piece_text(token_id) for token_id in range(tokenizer.vocab_size)]
        for test in tests:
            found = next((token_id for token_id, piece in enumerate(pieces) if test(piece)), None)
            if found is not None:
                return found
        raise GenerationError(f"no token has the piece {typed}: type an id, or a piece as the candidates show it")

    def load_second(self, spec: str | None) -> None:
        """A second model (same tokenizer) read beside each decision; None removes it."""
        from minigpt_tui.engine.analysis.contrast import (  # deferred: imports torch
            check_same_tokenizer,
        )

        if spec is None:
            self.second, self.second_path = None, None
            self._opinions.clear()
            return
        if self.portable is None:
            raise GenerationError(NO_MODEL)
        portable = open_model(spec, self.runs_dir)
        check_same_tokenizer(self.portable, portable)
        self.second, self.second_path = portable, portable.path
        self._opinions.clear()

    def inspect(self, step: int, layer: int, head: int, candidate_id: int | None = None) -> InsightView:
        """Decision ``step`` (1-based) inside: lens, contributions of the chosen id (and of
        ``candidate_id``), and head ``head`` of block ``layer`` over the whole prefix."""
        from minigpt_tui.engine.analysis.lens import (  # deferred: imports torch
            inspect_decision,
        )

        stepper = self._require()
        if not 1 <= step <= len(stepper.decisions):
            raise GenerationError(f"there is no decision {step} to look inside")
        decision = stepper.decisions[step - 1]
        model = stepper.model
        extra = [candidate_id] if candidate_id is not None and candidate_id != decision.chosen.id else []
        insight = inspect_decision(model, stepper.tokenizer, decision.prefix_ids, decision.chosen.id, lens=True,
                                   contributions=True, candidate_ids=extra, pattern=(layer, head))
        return insight_view(insight, step, decision.chosen.id, decision.chosen.piece.text, model.config,
                            model.vocab_size)

    def _second_opinions(self, decisions: Any) -> tuple[SecondOpinionView, ...]:
        from minigpt_tui.engine.analysis.contrast import (  # deferred: imports torch
            second_opinion,
        )

        opinions = []
        for decision in decisions:
            opinion = self._opinions.get(decision)
            if opinion is None:
                position = second_opinion(self.second, decision)
                opinion = self._opinions[decision] = SecondOpinionView(
                    decision.step, position.kl, position.top1_agree, position.rank_b, position.probability_b)
            opinions.append(opinion)
        alive = set(decisions)
        for stale in [d for d in self._opinions if d not in alive]:
            del self._opinions[stale]
        return tuple(opinions)

    def save_trace(self, target: Path, full_logits: bool = False) -> Path:
        """The trace as ``generate --json`` writes it (``full_logits`` as ``--full-logits``)."""
        refuse_inside_checkpoint(target, "trace")
        stepper = self._require()
        trace = stepper.trace(self.model_path, full_logits=full_logits)
        text = json.dumps(trace, indent=1, ensure_ascii=False) + "\n"
        return write_file(target, text.encode("utf-8"), what="trace", how_to_replace=None)  # the app has no --force

    def _decision_views(self, stepper: Any) -> list[DecisionView]:
        """The stepper's decisions as views, each made once; views of decisions gone are dropped."""
        decisions = []
        for decision in stepper.decisions:
            cached = self._views.get(decision)
            if cached is None:
                cached = self._views[decision] = decision_view(decision, stepper.tokenizer)
            decisions.append(cached)
        alive = set(stepper.decisions)
        for stale in [d for d in self._views if d not in alive]:
            del self._views[stale]
        return decisions

    def view(self) -> StepperView:
        stepper = self._require()
        tokenizer = stepper.tokenizer
        decisions = self._decision_views(stepper)
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
            output=_output_view(output),
            forced_steps=frozenset(d.step for d in decisions if d.forced),
            second_label=str(self.second_path) if self.second is not None else None,
            second_opinions=self._second_opinions(stepper.decisions) if self.second is not None else (),
            cached=bool(stepper.use_kv_cache),
            layers=stepper.model.config.layers,
            heads=stepper.model.config.heads,
            patterns=_pattern_lookup(stepper),
            window_note=stepper.window_note(),
            window_from=stepper.window_from,
        )


def _pattern_lookup(stepper: Any) -> PatternLookup | None:
    patterns = stepper.head_patterns()
    return None if patterns is None else PatternLookup(patterns)
