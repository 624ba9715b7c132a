"""Per-token loss over a text: where in it the model is surprised.

The text is encoded as a prompt is (BOS where the tokenizer adds one). Every id after the
first is scored: its loss (−log p in nats, float64 softmax of the model's logits), its
probability, its rank over the whole vocabulary (logit descending, then id ascending) and
the five likeliest ids. A text longer than the context is read in windows of the context's
length that advance by ``stride`` ids (less than the context, so windows overlap); each id is scored once, in the first window where
it has all the context the stride leaves (the first window scores every id it holds).
The mean of the losses is the evaluation loss of the same windows.

``compare_scores`` sets a second model's scores beside the first's (same tokenizer) and
orders the ids by how much better or worse it predicts them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.analysis.generation import token_rank, top_ranked
from minigpt_tui.engine.models.model import evaluating

TOP = 5


@dataclass(frozen=True)
class TokenScore:
    position: int  # index of the id in the encoded text
    id: int
    piece: str
    loss: float
    probability: float
    rank: int
    top: tuple[tuple[int, str, float], ...]  # (id, piece, probability)

    def to_json(self) -> dict[str, Any]:
        return {"position": self.position, "id": self.id, "piece": self.piece, "loss": self.loss,
                "probability": self.probability, "rank": self.rank,
                "top": [{"id": i, "piece": p, "probability": q} for i, p, q in self.top]}


@dataclass(frozen=True)
class TextScore:
    ids: tuple[int, ...]
    tokens: tuple[TokenScore, ...]
    window: int
    stride: int
    windows: int

    @property
    def mean_loss(self) -> float:
        return sum(t.loss for t in self.tokens) / len(self.tokens)

    def to_json(self) -> dict[str, Any]:
        return {"ids": list(self.ids), "tokens": [t.to_json() for t in self.tokens], "mean_loss": self.mean_loss,
                "tokens_scored": len(self.tokens), "window": self.window, "stride": self.stride,
                "windows": self.windows}


def windows(count: int, window: int, stride: int) -> list[tuple[int, int, int]]:
    """(start, end, first scored) for each window over ``count`` ids: targets first..end-1."""
    spans, start, scored = [], 0, 1
    while scored < count:
        end = min(start + window, count)
        spans.append((start, end, scored))
        scored = end
        start = min(start + stride, max(count - window, 0)) if end < count else end
    return spans


def score_text(model: Any, tokenizer: Any, text: str, *, stride: int | None = None,
               progress: Callable[[int, int], None] | None = None) -> TextScore:
    """Every id's loss, probability, rank and alternatives, window by window; ``progress``
    is told ``(windows done, windows)`` after each."""
    if not text:
        raise GenerationError("the text is empty: there is nothing to score")
    ids = tokenizer.encode_prompt(text)
    if len(ids) < 2:
        raise GenerationError(f"the text encodes to {len(ids)} id: at least 2 are needed to score one")
    window = model.config.context
    stride = stride or max(window // 2, 1)
    if window < 2 or not 1 <= stride < window:
        raise GenerationError(f"--stride must be between 1 and {window - 1} (windows overlap by at least one id "
                              f"so each scored id has one before it), got {stride}")
    scores: list[TokenScore] = []
    spans = windows(len(ids), window, stride)
    with evaluating(model), torch.no_grad():
        for done, (start, end, first) in enumerate(spans, start=1):
            # Only the rows that predict this window's scored ids (a row-wise softmax:
            # the same numbers as over every row, half the float64 work past the first).
            logits = model(torch.tensor([ids[start:end]])).logits[0, first - start - 1:end - start - 1]
            logits = logits.to(torch.float64)
            log_probs = torch.log_softmax(logits, dim=-1)
            for target in range(first, end):
                row, token = target - first, ids[target]
                probabilities = log_probs[row].exp()
                order = top_ranked(logits[row], TOP)
                values = probabilities[order].tolist()
                scores.append(TokenScore(target, token, tokenizer.piece_text(token), -float(log_probs[row, token]),
                                         float(probabilities[token]), token_rank(logits[row], token),
                                         tuple((i, tokenizer.piece_text(i), v) for i, v in zip(order, values))))
            if progress is not None:
                progress(done, len(spans))
    return TextScore(tuple(ids), tuple(scores), window, stride, len(spans))


@dataclass(frozen=True)
class ComparedToken:
    position: int
    id: int
    piece: str
    loss_a: float
    loss_b: float

    @property
    def change(self) -> float:
        """B's loss minus A's: negative where B predicts the id better."""
        return self.loss_b - self.loss_a

    def to_json(self) -> dict[str, Any]:
        return {"position": self.position, "id": self.id, "piece": self.piece, "loss_a": self.loss_a,
                "loss_b": self.loss_b, "change": self.change}


def compare_scores(a: TextScore, b: TextScore) -> list[ComparedToken]:
    if a.ids != b.ids:
        raise GenerationError("the two models encode the text differently: their scores cannot be compared")
    if [t.position for t in a.tokens] != [t.position for t in b.tokens]:
        raise GenerationError(f"the two models read the text in different windows ({a.window} and {b.window} ids): "
                              "give --stride so both score the same ids")
    return [ComparedToken(x.position, x.id, x.piece, x.loss, y.loss) for x, y in zip(a.tokens, b.tokens)]


def most_changed(compared: Sequence[ComparedToken], count: int = 5) -> tuple[list[ComparedToken], list[ComparedToken]]:
    """The ids B predicts most better, and most worse, than A."""
    ordered = sorted(compared, key=lambda t: (t.change, t.position))
    return ordered[:count], [t for t in reversed(ordered[-count:]) if t.change > 0]
