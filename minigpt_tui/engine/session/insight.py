"""Plain-number views of what a decision looked like inside (lens, contributions, one head's
pattern) and of a second model's opinion on it, for the Generation screen. Torch-free at
import: the views are built on the screen's worker from the engine's lens and contrast records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

INSIGHT_KINDS = ("lens", "contributions", "pattern")


@dataclass(frozen=True)
class LensEntryView:
    id: int
    piece: str
    probability: float


@dataclass(frozen=True)
class LensRowView:
    layer: int  # 0: the embeddings; l: after block l - 1
    chosen_rank: int
    chosen_probability: float
    top: tuple[LensEntryView, ...]


@dataclass(frozen=True)
class ContributionPartsView:
    id: int
    piece: str
    logit: float
    embedding: float
    heads: tuple[tuple[float, ...], ...]
    attention_bias: tuple[float, ...]
    ffn: tuple[float, ...]
    norm_bias: float
    total: float


@dataclass(frozen=True)
class PatternView:
    layer: int
    head: int
    pieces: tuple[str, ...]
    weights: tuple[tuple[float, ...], ...]  # [query][key]


@dataclass(frozen=True)
class InsightView:
    """One decision's lens, contributions (chosen id first) and one head's pattern."""

    step: int
    chosen_id: int
    chosen_piece: str
    vocab_size: int
    layers: int
    heads: int
    lens: tuple[LensRowView, ...]
    contributions: tuple[ContributionPartsView, ...]
    pattern: PatternView


@dataclass(frozen=True)
class SecondOpinionView:
    """A second model reading the same prefix as one decision: KL(A||B), top-1 agreement,
    and the chosen id's rank and probability under the second model."""

    step: int
    kl: float
    top1_agree: bool
    rank: int
    probability: float


def insight_view(insight: Any, step: int, chosen_id: int, chosen_piece: str, model_config: Any,
                 vocab_size: int) -> InsightView:
    """Plain numbers from the engine's ``DecisionInsight`` (lens, contributions and pattern all asked)."""
    lens = tuple(LensRowView(row.layer, row.chosen_rank, row.chosen_probability,
                             tuple(LensEntryView(e.id, e.piece, e.probability) for e in row.top))
                 for row in insight.lens)
    parts = tuple(ContributionPartsView(c.id, c.piece, c.logit, c.embedding, c.heads, c.attention_bias, c.ffn,
                                    c.norm_bias, c.total) for c in insight.contributions)
    p = insight.pattern
    pattern = PatternView(p.layer, p.head, tuple(piece for _, piece in p.tokens),
                          tuple(tuple(row) for row in p.weights.tolist()))
    return InsightView(step, chosen_id, chosen_piece, vocab_size, model_config.layers, model_config.heads,
                       lens, parts, pattern)
