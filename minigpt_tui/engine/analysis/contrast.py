"""Two models on one path: where and how much a second checkpoint disagrees with a first.

Both models read the same ids: the prompt, then either A's own choices under a rule (the
continuation ``generate`` would print for A) or a given continuation. Each model makes one
forward pass over the whole path, and each position where a next id is decided reports
KL(A || B) of the raw distributions (nats), whether the top-1 ids agree (highest logit,
ties to the smaller id), and the next id's rank and probability in each model. The same
computation on both sides means a model contrasted with itself gives KL exactly 0.

``contrast_models(a, b, prompt, rule=..., continuation=None)`` takes two loaded portable
models (``model``, ``tokenizer``, optionally ``identity`` and ``path``) and returns a
:class:`Contrast`. ``second_opinion(b, decision)`` compares one decision of a stepper with
a second model reading the same prefix (the Generation screen's second model column). Models whose tokenizers differ are refused: their ids mean different
things.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.analysis.generation import DecisionStepper, GenerationRule
from minigpt_tui.engine.analysis.lens import token_rank
from minigpt_tui.engine.models.model import MiniGPT, evaluating

CONTRAST_FORMAT = "minigpt-tui-contrast"
CONTRAST_VERSION = 1


@dataclass(frozen=True)
class ContrastPosition:
    """One decided position of the path, seen by both models."""

    step: int  # 1-based: the step-th id after the prompt
    prefix_length: int
    id: int  # the id the path takes next
    piece: str
    kl: float  # KL(A || B), nats
    top1_agree: bool
    top1_a: int
    top1_b: int
    rank_a: int
    rank_b: int
    probability_a: float
    probability_b: float

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "prefix_length": self.prefix_length, "id": self.id, "piece": self.piece,
                "kl": self.kl, "top1_agree": self.top1_agree, "top1_a": self.top1_a, "top1_b": self.top1_b,
                "rank_a": self.rank_a, "rank_b": self.rank_b, "probability_a": self.probability_a,
                "probability_b": self.probability_b}


@dataclass(frozen=True)
class ContrastModel:
    path: str | None
    identity: str | None
    family: str


@dataclass(frozen=True)
class Contrast:
    prompt: str
    prompt_ids: tuple[int, ...]
    path_source: str  # "a" (A's choices under ``rule``) or "continuation"
    rule: GenerationRule | None
    path_ids: tuple[int, ...]  # the ids after the prompt
    model_a: ContrastModel
    model_b: ContrastModel
    tokenizer_identity: str
    positions: tuple[ContrastPosition, ...]

    @property
    def most_changed(self) -> int | None:
        """The step with the largest KL (the first of equals); None without positions."""
        if not self.positions:
            return None
        return max(self.positions, key=lambda p: (p.kl, -p.step)).step

    @property
    def agreement(self) -> float:
        return sum(p.top1_agree for p in self.positions) / len(self.positions)

    @property
    def mean_kl(self) -> float:
        return sum(p.kl for p in self.positions) / len(self.positions)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": CONTRAST_FORMAT,
            "version": CONTRAST_VERSION,
            "models": {name: {"path": m.path, "identity": m.identity, "family": m.family}
                       for name, m in (("a", self.model_a), ("b", self.model_b))},
            "tokenizer_identity": self.tokenizer_identity,
            "prompt": self.prompt,
            "prompt_ids": list(self.prompt_ids),
            "path_source": self.path_source,
            "rule": None if self.rule is None else self.rule.to_json(),
            "path_ids": list(self.path_ids),
            "positions": [p.to_json() for p in self.positions],
            "most_changed": self.most_changed,
            "mean_kl": self.mean_kl,
            "top1_agreement": self.agreement,
        }


def _describe(portable: Any) -> ContrastModel:
    path = getattr(portable, "path", None)
    return ContrastModel(None if path is None else str(path), getattr(portable, "identity", None),
                         portable.model.config.family)


def _path_logits(model: MiniGPT, ids: Sequence[int], last_only: bool = False) -> Tensor:
    """Float64 logits [T, V] of one evaluation-mode forward over ``ids`` ([1, V]: the last
    position's alone, as a decision computes them)."""
    with evaluating(model), torch.no_grad():
        out = model(torch.tensor([list(ids)], dtype=torch.int64), last_only=last_only)
    return out.logits[0].detach().to(torch.float64)


def compare_position(step: int, prefix_length: int, next_id: int, piece: str, logits_a: Tensor,
                     logits_b: Tensor) -> ContrastPosition:
    """Two models' logits at one position, compared: KL(A || B), top-1 ids, the next id's place."""
    la, lb = logits_a.to(torch.float64), logits_b.to(torch.float64)
    log_p, log_q = torch.log_softmax(la, dim=-1), torch.log_softmax(lb, dim=-1)
    kl = float((log_p.exp() * (log_p - log_q)).sum())
    top_a, top_b = int(torch.argmax(la)), int(torch.argmax(lb))
    return ContrastPosition(step, prefix_length, next_id, piece, kl, top_a == top_b, top_a, top_b,
                            token_rank(la, next_id), token_rank(lb, next_id), float(log_p[next_id].exp()),
                            float(log_q[next_id].exp()))


def second_opinion(b: Any, decision: Any) -> ContrastPosition:
    """A second model on one decision of a stepper: B reads the decision's prefix and is
    compared with the decision's own logits (A's). With a recomputing stepper and B the same
    model, KL is exactly 0."""
    if decision.logits.shape[-1] != b.model.vocab_size:
        raise GenerationError(f"the second model has {b.model.vocab_size} output ids, "
                              f"the first {decision.logits.shape[-1]}")
    ids = decision.prefix_ids
    if len(ids) > b.model.config.context:
        raise GenerationError(f"the prefix of {len(ids)} ids does not fit the second model's context "
                              f"of {b.model.config.context}")
    logits_b = _path_logits(b.model, ids, last_only=True)[-1]
    return compare_position(decision.step, len(ids), decision.chosen.id, decision.chosen.piece.text,
                            decision.logits, logits_b)


def check_same_tokenizer(a: Any, b: Any) -> None:
    """Refuse two models whose ids mean different things (one line)."""
    tokenizer = a.tokenizer
    if tokenizer.identity != b.tokenizer.identity:
        raise GenerationError(
            f"the two models use different tokenizers ({tokenizer.vocab_size} ids, {tokenizer.identity[:12]} "
            f"vs {b.tokenizer.vocab_size} ids, {b.tokenizer.identity[:12]}): their ids cannot be compared")
    if a.model.vocab_size != b.model.vocab_size:
        raise GenerationError(f"the two models have {a.model.vocab_size} and {b.model.vocab_size} output ids")


def contrast_models(a: Any, b: Any, prompt: str, *, rule: GenerationRule | None = None,
                    continuation: str | None = None) -> Contrast:
    """Both models along one path (see the module docstring)."""
    check_same_tokenizer(a, b)
    tokenizer = a.tokenizer
    prompt_ids = tuple(tokenizer.encode_prompt(prompt))
    if continuation is not None:
        if rule is not None:
            raise GenerationError("give either a rule for A's choices or a continuation, not both")
        following = tokenizer.encode(continuation, bos=False, eos=False)
        if not following:
            raise GenerationError("the continuation is empty: give at least one character")
        source = "continuation"
    else:
        rule = rule if rule is not None else GenerationRule.greedy()
        stepper = DecisionStepper.from_portable(a, prompt, rule, top_n=1)
        stepper.run()
        following = stepper.generated_ids
        source = "a"
    path = list(prompt_ids) + list(following)
    reading = path[:-1]  # the last id is decided, never read
    for name, portable in (("A", a), ("B", b)):
        context = portable.model.config.context
        if len(reading) > context:
            raise GenerationError(f"the path of {len(path)} ids does not fit model {name}'s context of {context}")
    logits_a, logits_b = _path_logits(a.model, reading), _path_logits(b.model, reading)
    positions = []
    first = len(prompt_ids) - 1
    for step, index in enumerate(range(first, len(reading)), start=1):
        next_id = path[index + 1]
        positions.append(compare_position(step, index + 1, next_id, tokenizer.piece_text(next_id),
                                          logits_a[index], logits_b[index]))
    return Contrast(prompt, prompt_ids, source, rule, tuple(following), _describe(a), _describe(b),
                    tokenizer.identity, tuple(positions))
