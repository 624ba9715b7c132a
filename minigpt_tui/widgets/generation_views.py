"""Plain records of a generation run, built on the worker thread from the engine's decision
stepper, so that the widgets never touch a tensor: the UI thread only lays out numbers."""

from __future__ import annotations

from dataclasses import dataclass, field


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


@dataclass(frozen=True)
class OutputView:
    generated_ids: tuple[int, ...]
    generated_bytes: bytes
    valid_utf8: bool
    display: str
    ended_with_eos: bool


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
