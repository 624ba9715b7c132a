"""What a decision looked like inside (lens, contributions, one head's pattern) and a second
model's opinion on it, for the Generation screen. Torch-free at import: the views are built
on the screen's worker; the lens rows and contributions are the engine's own records
(:mod:`minigpt_tui.engine.analysis.lens`), the head's pattern is turned into plain numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.analysis.site_names import head_name

if TYPE_CHECKING:
    from minigpt_tui.engine.analysis.lens import Contributions, DecisionInsight, LensRow, Part

# What "largest first" means in each view, as its title says it.
PARTS_ORDER = "largest |contribution| first"
HEADS_ORDER = "sharpest heads first"  # by the largest weight past the first position


def largest_parts(parts: Sequence[Part]) -> list[Part]:
    """The parts by size, whatever their sign (equal sizes keep the model's order)."""
    return sorted(parts, key=lambda part: -abs(part.value))


@dataclass(frozen=True)
class HeadFocus:
    """Where one head at the last position looks most, leaving out the first position: many
    heads park the weight they do not use there (an attention sink), so a head's largest
    weight elsewhere says how sharply it reads something. A one-position prefix has only
    the first position."""

    layer: int
    head: int
    position: int
    weight: float

    @property
    def name(self) -> str:
        return head_name(self.layer, self.head)


def head_focus(layer: int, head: int, weights: Sequence[float]) -> HeadFocus:
    start = 1 if len(weights) > 1 else 0
    position = max(range(start, len(weights)), key=lambda i: weights[i], default=0)
    return HeadFocus(layer, head, position, weights[position] if weights else 0.0)


def heads_by_focus(attention: Sequence[Sequence[Sequence[float]]], *, largest_first: bool = True) -> list[HeadFocus]:
    """Every head's focus, the sharpest first (equal weights keep the model's order), or in
    the model's order."""
    heads = [head_focus(layer, head, weights) for layer, block in enumerate(attention)
             for head, weights in enumerate(block)]
    return sorted(heads, key=lambda focus: -focus.weight) if largest_first else heads


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
