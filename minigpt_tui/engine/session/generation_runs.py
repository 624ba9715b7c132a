"""Generation as the command line runs it, over models already opened (:mod:`.opening`), so
the app can run the same use cases on the model it holds:

- :func:`generation_rules`: the rules a request names (greedy, one sampling rule per temperature);
- :func:`generate_trace` (``generate``): every decision of one rule, the trace as JSON and, when
  an :class:`InsightRequest` asks, what each decision looked like inside;
- :func:`infer_record` (``infer``): the greedy continuation as one record;
- :class:`ProbeRun` (``probes``): a probes file under every model and rule;
- :func:`contrast_pair` (``contrast``): two models on one path.

Torch-free at import: the engine is imported inside the functions that run it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.analysis.generation_rule import GenerationRule
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.session.steering import SteeringRequest, compared_decisions

if TYPE_CHECKING:
    from minigpt_tui.engine.analysis.contrast import Contrast
    from minigpt_tui.engine.analysis.generation import DecisionStepper
    from minigpt_tui.engine.analysis.lens import DecisionInsight

DEFAULT_PARTS = 12  # contributions listed per decision unless asked otherwise


def generation_rules(*, greedy: bool, temperatures: Sequence[float], top_k: int | None, top_p: float | None,
                     seed: int, budget: int, forbidden: tuple[int, ...] = ()) -> list[GenerationRule]:
    """The rules asked for: greedy (also when no temperature is given), then one sampling rule
    per temperature, each with the same budget, seed and forbidden ids."""
    rules = []
    if greedy or not temperatures:
        rules.append(GenerationRule("greedy", max_new_tokens=budget, seed=seed, forbidden_ids=forbidden))
    for temperature in temperatures:
        rules.append(GenerationRule("sample", temperature, top_k, top_p, seed, budget, forbidden))
    return rules


def greedy_rule(budget: int) -> GenerationRule:
    return GenerationRule("greedy", max_new_tokens=budget)


@dataclass(frozen=True)
class InsightRequest:
    """Which views of each decision to add: lens, contributions (chosen, candidates), a pattern;
    how many parts the contributions list (None: all) and in which order."""

    lens: bool
    contributions: bool
    candidates: tuple[int, ...]
    pattern: tuple[int, int] | None
    parts: int | None = DEFAULT_PARTS
    model_order: bool = False

    @property
    def wanted(self) -> bool:
        return self.lens or self.contributions or bool(self.candidates) or self.pattern is not None

    def check(self, model: Any) -> None:
        """Refuse an unknown block, head or candidate before any decision is made."""
        from minigpt_tui.engine.analysis.lens import (  # deferred: imports torch
            check_head,
            check_token_id,
        )

        if self.pattern is not None:
            check_head(model, *self.pattern)
        for token_id in self.candidates:
            check_token_id(model, token_id)

    def inspect(self, stepper: Any, top: int) -> list[DecisionInsight]:
        """One insight per decision the stepper made (none when no view was asked for)."""
        from minigpt_tui.engine.analysis.lens import (  # deferred: imports torch
            inspect_decision,
        )

        if not self.wanted:
            return []
        return [inspect_decision(stepper.model, stepper.tokenizer, d.prefix_ids, d.chosen.id, lens=self.lens,
                                 lens_top=top, contributions=self.contributions, candidate_ids=self.candidates,
                                 pattern=self.pattern)
                for d in stepper.decisions]


NO_INSIGHT = InsightRequest(False, False, (), None)


@dataclass(frozen=True)
class TraceRequest:
    """One traced generation: the prompt, its rule, ``top`` alternatives kept per decision,
    the key/value cache (None: the model's default), the last position's attention, whether
    to stop at the context, the whole logits in the trace, the insight views and a steering
    (:mod:`.steering`)."""

    prompt: str
    rule: GenerationRule
    top: int = 3
    kv_cache: bool | None = None
    attention: bool = False
    stop_at_context: bool = False
    full_logits: bool = False
    insight: InsightRequest = NO_INSIGHT
    steering: SteeringRequest | None = None

    def __post_init__(self) -> None:
        if self.steering is not None and self.insight.wanted:
            raise GenerationError("the lens, contributions and patterns read the model without the steering: "
                                  "ask for them without --steer-*")


@dataclass(frozen=True)
class GeneratedTrace:
    """The stepper that made the decisions, its trace as JSON (each decision with its insight
    views merged in) and the insights themselves, one per decision when asked for; with a
    steering compared, the unsteered stepper beside it."""

    stepper: DecisionStepper
    trace: dict[str, Any]
    insights: list[DecisionInsight] = field(default_factory=list)
    unsteered: DecisionStepper | None = None


def generate_trace(portable: Any, request: TraceRequest) -> GeneratedTrace:
    """Step ``portable`` through the request's decisions (``generate``); with a steering, its
    sites edit every decision's forward, the trace records it and, when asked, the unsteered
    decisions are made too and compared step by step."""
    request.insight.check(portable.model)
    steering = None if request.steering is None else request.steering.make(portable)
    sites = None
    if steering is not None:
        prompt_length = len(portable.tokenizer.encode_prompt(request.prompt))
        sites = steering.sites(portable.model.config, prompt_length, request.rule.max_new_tokens)
    stepper = _stepped(portable, request, sites)
    trace = stepper.trace(full_logits=request.full_logits)
    insights = request.insight.inspect(stepper, request.top)
    for decision_json, insight in zip(trace["decisions"], insights):
        decision_json.update(insight.to_json())
    if steering is None:
        return GeneratedTrace(stepper, trace, insights)
    trace["steering"] = steering.record()
    unsteered = _stepped(portable, request, None) if request.steering and request.steering.compare else None
    if unsteered is not None:
        trace["unsteered"] = {"output": unsteered.output(), "stop_reason": unsteered.stop_reason,
                              "compared": compared_decisions(unsteered, stepper)}
    return GeneratedTrace(stepper, trace, insights, unsteered)


def _stepped(portable: Any, request: TraceRequest, sites: Any) -> DecisionStepper:
    """A stepper run to the end under the request (``sites``: edits in every forward)."""
    from minigpt_tui.engine.analysis.generation import (  # deferred: imports torch
        DecisionStepper,
        default_kv_cache,
    )

    cached = default_kv_cache(portable.model) if request.kv_cache is None else request.kv_cache
    stepper = DecisionStepper.from_portable(portable, request.prompt, request.rule, use_kv_cache=cached,
                                            attention=request.attention, top_n=request.top,
                                            stop_at_context=request.stop_at_context, sites=sites)
    stepper.run()
    return stepper


def steering_beside(portable: Any, prompt: str, rule: GenerationRule, steering: SteeringRequest,
                    kv_cache: bool | None = None) -> dict[str, Any]:
    """The app's side-by-side view: ``prompt``'s decisions under ``rule`` without and with the
    steering, each following its own choices (``compared`` rows), the steering's record and both
    outputs."""
    request = TraceRequest(prompt, rule, top=1, kv_cache=kv_cache, steering=replace(steering, compare=True))
    generated = generate_trace(portable, request)
    return {"steering": generated.trace["steering"], **generated.trace["unsteered"],
            "steered_output": generated.trace["output"]}


@dataclass(frozen=True)
class InferRecord:
    """The greedy continuation of a prompt as ``infer`` reports it; ``display`` is the text
    as it can be shown (invalid UTF-8 as U+FFFD)."""

    record: dict[str, Any]
    display: str


def infer_record(portable: Any, prompt: str, budget: int) -> InferRecord:
    """The greedy continuation of ``prompt`` (``budget`` new tokens at most) with the model's
    identity, parameter counts, the first decision's logits digest and the tied alias."""
    from minigpt_tui.engine.analysis.generation import (  # deferred: imports torch
        DecisionStepper,
    )
    from minigpt_tui.engine.core.tensors import tensor_bytes  # deferred: imports torch
    from minigpt_tui.engine.models.model import (  # deferred: imports torch
        count_parameters,
    )

    stepper = DecisionStepper.from_portable(portable, prompt, greedy_rule(budget), top_n=1)
    stepper.run()
    out = stepper.output()
    tensors, scalars = count_parameters(portable.model)
    model = portable.model
    record = {
        "model_path": str(portable.path),
        "model_id": portable.identity,
        "device": "cpu",
        "precision": str(model.dtype).removeprefix("torch."),
        "prompt": prompt,
        "prompt_ids": out["prompt_ids"],
        "generated_ids": out["generated_ids"],
        "generated_bytes": out["generated_bytes"],
        "valid_utf8": out["valid_utf8"],
        "text": out["text"],
        "stop_reason": stepper.stop_reason,
        "first_logits_sha256": hashlib.sha256(tensor_bytes(stepper.decisions[0].logits)).hexdigest(),
        "named_parameter_tensors": tensors,
        "parameter_scalars": scalars,
        "tied_alias": portable.tied_alias,
    }
    return InferRecord(record, out["display"])


@dataclass(frozen=True)
class ProbeRun:
    """A probes file (None: the bundled one) under some rules. Made before any model opens,
    so that a bad file is refused first; :meth:`run` runs it over opened models."""

    rules: tuple[GenerationRule, ...]
    prompts: str | None = None

    def __post_init__(self) -> None:
        from minigpt_tui.engine.analysis.generation import (  # deferred: imports torch
            load_probes,
        )

        if self.prompts:
            load_probes(self.prompts)  # one line for a bad file

    def run(self, models: Sequence[tuple[str, Any]]) -> dict[str, Any]:
        """Every probe under every (label, model) and rule: completion, expected, match, stop."""
        from minigpt_tui.engine.analysis.generation import (  # deferred: imports torch
            run_probes,
        )

        return run_probes(models, list(self.rules), self.prompts)


def contrast_pair(first: Any, second: Any, prompt: str, *, rule: GenerationRule | None = None,
                  continuation: str | None = None) -> Contrast:
    """Models A and B on one path (A's choices under ``rule``, or the given ``continuation``):
    KL(A||B), top-1 agreement and ranks per position."""
    from minigpt_tui.engine.analysis.contrast import (  # deferred: imports torch
        contrast_models,
    )

    if (rule is None) == (continuation is None):
        raise GenerationError("a contrast follows either a rule or a continuation")
    return contrast_models(first, second, prompt, rule=rule, continuation=continuation)
