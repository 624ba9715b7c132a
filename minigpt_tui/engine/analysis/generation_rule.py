"""The generation rule: how the next id is chosen from a logit vector, and how many ids may
be generated. A validated record without torch, so the session layer and the app's form
build the same rule the decision stepper (``analysis.generation``) runs."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.core.tokenizer import EOS

RULE_KINDS = ("greedy", "sample")
DEFAULT_SEED = 31415
DEFAULT_BUDGET = 24
U64_MAX = 2**64 - 1


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind_problem(rule: GenerationRule) -> str | None:
    return None if rule.kind in RULE_KINDS else f"unknown rule '{rule.kind}' (choose greedy or sample)"


def _temperature_problem(rule: GenerationRule) -> str | None:
    if not _is_number(rule.temperature):
        return f"temperature must be a number, got {rule.temperature!r}"
    if not math.isfinite(rule.temperature) or rule.temperature <= 0:
        return f"temperature must be a finite number above 0, got {rule.temperature}"
    return None


def _top_k_problem(rule: GenerationRule) -> str | None:
    if rule.top_k is None or (_is_integer(rule.top_k) and rule.top_k >= 1):
        return None
    return f"top-k must be an integer of at least 1, got {rule.top_k}"


def _top_p_problem(rule: GenerationRule) -> str | None:
    if rule.top_p is None or (_is_number(rule.top_p) and 0 < rule.top_p <= 1):
        return None
    return f"top-p must be in (0, 1], got {rule.top_p}"


def _budget_problem(rule: GenerationRule) -> str | None:
    if _is_integer(rule.max_new_tokens) and rule.max_new_tokens >= 1:
        return None
    return f"the new-token budget must be at least 1, got {rule.max_new_tokens}"


def _seed_problem(rule: GenerationRule) -> str | None:
    if _is_integer(rule.seed) and 0 <= rule.seed <= U64_MAX:
        return None
    return f"the sampling seed must be an unsigned 64-bit integer, got {rule.seed}"


def _forbidden_problem(rule: GenerationRule) -> str | None:
    for token_id in rule.forbidden_ids:
        if not _is_integer(token_id) or token_id < 0:
            return f"forbidden id {token_id!r} is not a token id"
    if EOS in rule.forbidden_ids:
        # EOS is what lets a continuation end; forbidding it would hide every EOS stop.
        return "EOS (id 1) cannot be forbidden: it is how a continuation ends"
    return None


# Checked in this order; the first problem found is the one reported.
RULE_CHECKS: tuple[Callable[[GenerationRule], str | None], ...] = (
    _kind_problem, _temperature_problem, _top_k_problem, _top_p_problem, _budget_problem, _seed_problem,
    _forbidden_problem,
)


@dataclass(frozen=True)
class GenerationRule:
    """How the next id is chosen from a logit vector, and how many ids may be generated."""

    kind: str = "greedy"
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = DEFAULT_SEED
    max_new_tokens: int = DEFAULT_BUDGET
    forbidden_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "forbidden_ids", tuple(self.forbidden_ids))
        for check in RULE_CHECKS:
            problem = check(self)
            if problem is not None:
                raise GenerationError(problem)
        object.__setattr__(self, "forbidden_ids", tuple(sorted(set(self.forbidden_ids))))

    @staticmethod
    def greedy(max_new_tokens: int = DEFAULT_BUDGET, forbidden_ids: Sequence[int] = ()) -> GenerationRule:
        return GenerationRule("greedy", max_new_tokens=max_new_tokens, forbidden_ids=tuple(forbidden_ids))

    @staticmethod
    def sample(temperature: float = 1.0, *, top_k: int | None = None, top_p: float | None = None,
               seed: int = DEFAULT_SEED, max_new_tokens: int = DEFAULT_BUDGET,
               forbidden_ids: Sequence[int] = ()) -> GenerationRule:
        return GenerationRule("sample", temperature, top_k, top_p, seed, max_new_tokens, tuple(forbidden_ids))

    @property
    def label(self) -> str:
        """A short human name: ``greedy`` or ``sample t=0.7 k=5 p=0.9 seed=31415``."""
        if self.kind == "greedy":
            return "greedy"
        parts = [f"sample t={self.temperature:g}"]
        if self.top_k is not None:
            parts.append(f"k={self.top_k}")
        if self.top_p is not None:
            parts.append(f"p={self.top_p:g}")
        parts.append(f"seed={self.seed}")
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["forbidden_ids"] = list(self.forbidden_ids)
        data["label"] = self.label
        return data

    @staticmethod
    def from_json(data: dict[str, Any]) -> GenerationRule:
        names = ("kind", "temperature", "top_k", "top_p", "seed", "max_new_tokens", "forbidden_ids")
        values = {k: data[k] for k in names if k in data}
        if "forbidden_ids" in values:
            values["forbidden_ids"] = tuple(values["forbidden_ids"])
        return GenerationRule(**values)
