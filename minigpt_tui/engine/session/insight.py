"""What a decision looked like inside (lens, contributions, one head's pattern) and a second
model's opinion on it, for the Generation screen. Torch-free at import: the views are built
on the screen's worker; the lens rows and contributions are the engine's own records
(:mod:`minigpt_tui.engine.analysis.lens`), the head's pattern is turned into plain numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from minigpt_tui.engine.analysis.lens import Contributions, DecisionInsight, LensRow

INSIGHT_KINDS = ("lens", "contributions", "pattern")


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
    lens: tuple[LensRow, ...]
    contributions: tuple[Contributions, ...]
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


def insight_view(insight: DecisionInsight, step: int, chosen_id: int, chosen_piece: str, model_config: Any,
                 vocab_size: int) -> InsightView:
    """The view of the engine's ``DecisionInsight`` (lens, contributions and pattern all asked)."""
    p = insight.pattern
    pattern = PatternView(p.layer, p.head, tuple(piece for _, piece in p.tokens),
                          tuple(tuple(row) for row in p.weights.tolist()))
    return InsightView(step, chosen_id, chosen_piece, vocab_size, model_config.layers, model_config.heads,
                       insight.lens, insight.contributions, pattern)
