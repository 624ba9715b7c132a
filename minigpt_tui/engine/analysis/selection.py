"""The rule's selection distribution on one logit vector, kept as what the rule retains.

``selection_distribution`` in ``generation`` is the reference: a vector over the whole
vocabulary. :func:`select` gives the same numbers from the same torch operations on the
retained prefix of the selection order only. Every figure is bitwise the reference's: each
softmax runs over the same values in the same order, as a vector of the same length (an
elementwise ``exp`` gives different last bits in a vector's body and in its tail, so a value
recomputed alone could differ), and the draw walks the same cumulative sums. Nothing of the
vocabulary's size is sorted or turned into a Python list:

- greedy sorts nothing (its distribution is the eligible softmax in id order);
- top-k takes the top k scaled values;
- sampling without top-k sorts the eligible scaled values, values only (their descending
  sequence is the same whatever order ties take; numpy's sort, several times faster here than
  torch's): the top-p cut and the renormalization sum over all of them in that order.

Positions in the order are found from values: an id's position is the number of eligible ids
with a larger scaled value plus those with the same value and a smaller id.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from minigpt_tui.engine.analysis.generation_rule import GenerationRule
from minigpt_tui.engine.core.errors import GenerationError


@dataclass(frozen=True)
class Selection:
    """The selection distribution as its retained prefix.

    Greedy: ``values`` are the eligible ids' logits in ascending id order. Sampling: ``values``
    are the first scaled logits of the selection order (descending, ties by ascending id), cut
    by top-k and top-p; ``keys`` holds every id's scaled logit, minus infinity where ineligible.
    ``probabilities[i]`` is the selection probability at position i (zero where the exponential
    underflows: such an id is not retained)."""

    greedy: bool
    eligible_ids: Tensor  # int64, ascending
    keys: Tensor  # float64 over the vocabulary; greedy: the logits
    values: Tensor
    probabilities: Tensor

    @property
    def retained_count(self) -> int:
        return int((self.probabilities > 0).sum())

    def positions(self, ids: Tensor) -> Tensor:
        """Each id's position in ``values``; ``len(values)`` for an id the rule cut or excludes."""
        if self.greedy:
            return self._id_order_positions(ids)
        length = len(self.values)
        keys = self.keys[ids]
        greater = torch.searchsorted(-self.values, -keys, side="left")
        positions = greater + _ties_before(self.keys, ids)
        outside = torch.isinf(keys) | (positions >= length)
        return positions.masked_fill(outside, length)

    def _id_order_positions(self, ids: Tensor) -> Tensor:
        count = len(self.eligible_ids)
        positions = torch.searchsorted(self.eligible_ids, ids)
        found = self.eligible_ids[positions.clamp(max=max(count - 1, 0))] == ids
        return positions.masked_fill(~found, count)

    def probabilities_of(self, ids: Tensor) -> Tensor:
        """The selection probability of each id (zero outside the retained set)."""
        padded = torch.cat([self.probabilities, self.probabilities.new_zeros(1)])
        return padded[self.positions(ids)]

    def id_at(self, position: int) -> int:
        """The id at ``position`` of the order."""
        if self.greedy:
            return int(self.eligible_ids[position])
        value = self.values[position]
        greater = int(torch.searchsorted(-self.values, -value.reshape(1), side="left"))
        tied = torch.nonzero(self.keys == value, as_tuple=False).flatten()  # ascending ids
        return int(tied[position - greater])

    def choose(self, draw: float) -> int:
        """The first id in the order whose cumulative selection mass exceeds ``draw`` (as
        ``sample_choice`` walks the reference)."""
        kept = torch.nonzero(self.probabilities > 0, as_tuple=False).flatten()
        cumulative = torch.cumsum(self.probabilities[kept], dim=0)
        above = torch.nonzero(cumulative > draw, as_tuple=False)
        # A total a hair under 1 and a draw above it: the last retained id.
        position = int(kept[int(above[0, 0])]) if len(above) else int(kept[-1])
        return self.id_at(position)

    def retained_mask(self) -> Tensor:
        """True at every id with a non-zero selection probability, over the whole vocabulary."""
        size = self.keys.shape[-1]
        if self.greedy:
            mask = torch.zeros(size, dtype=torch.bool)
            mask[self.eligible_ids[self.probabilities > 0]] = True
            return mask
        kept = torch.nonzero(self.probabilities > 0, as_tuple=False).flatten()
        last = int(kept[-1])
        value = self.values[last]
        greater = int(torch.searchsorted(-self.values, -value.reshape(1), side="left"))
        tied = self.keys == value
        mask = (self.keys > value) | (tied & (torch.cumsum(tied, dim=0) <= last - greater + 1))
        # Weights fall along the order, so an underflowed zero can only be past the last kept
        # id; clear any other one all the same.
        for position in torch.nonzero(self.probabilities[:last] == 0, as_tuple=False).flatten().tolist():
            mask[self.id_at(position)] = False
        return mask


def _ties_before(keys: Tensor, ids: Tensor) -> Tensor:
    """For each id, how many ids before it have the same key: found among the ids whose key
    equals one of the asked keys (usually the asked ids alone), never over the vocabulary."""
    asked = keys[ids]
    sharing = torch.nonzero(torch.isin(keys, asked), as_tuple=False).flatten()  # ascending ids
    shared = keys[sharing]
    order = torch.sort(shared, stable=True).indices  # by key, then by id
    in_key_order = shared[order]
    first_of_key = torch.searchsorted(in_key_order, in_key_order, side="left")
    before = torch.empty_like(order)
    before[order] = torch.arange(len(order)) - first_of_key
    return before[torch.searchsorted(sharing, ids)]


def _softmax(values: Tensor) -> Tensor:
    """As the reference renormalizes: subtract the largest value, exponentiate, divide."""
    weights = torch.exp(values - values.max())
    return weights / weights.sum()


def _descending(values: Tensor) -> Tensor:
    """The values sorted descending (values only)."""
    return torch.from_numpy(np.ascontiguousarray(np.sort(values.numpy())[::-1]))


def select(logits: Tensor, eligible: Tensor, rule: GenerationRule, eligible_ids: Tensor | None = None) -> Selection:
    """The rule's distribution on ``logits`` as a :class:`Selection`; refuses what
    ``selection_distribution`` refuses, with the same lines."""
    if eligible_ids is None:
        eligible_ids = torch.nonzero(eligible, as_tuple=False).flatten()
    if len(eligible_ids) == 0:
        raise GenerationError("no token id is eligible")
    logits64 = logits.to(torch.float64)
    if not bool(torch.isfinite(logits64).all()):
        raise GenerationError("the model produced non-finite logits (NaN or infinity)")
    if rule.kind == "greedy":
        values = logits64[eligible_ids]
        return Selection(True, eligible_ids, logits64, values, _softmax(values))
    scaled = logits64 / rule.temperature
    if not bool(torch.isfinite(scaled).all()):
        raise GenerationError(f"temperature {rule.temperature:g} is too small for these logits: "
                              "the scaled logits overflow")
    eligible_scaled = scaled[eligible_ids]
    if rule.top_k is not None and rule.top_k < len(eligible_ids):
        ordered = torch.topk(eligible_scaled, rule.top_k).values  # sorted, descending
    else:
        ordered = _descending(eligible_scaled)
    if rule.top_p is not None:
        cumulative = torch.cumsum(_softmax(ordered), dim=0)
        reaching = torch.nonzero(cumulative >= rule.top_p, as_tuple=False)
        # Rounding can leave the total a hair under p = 1: then every kept id stays.
        if len(reaching):
            ordered = ordered[: int(reaching[0, 0]) + 1].clone()
    keys = scaled.masked_fill(~eligible, -math.inf)
    return Selection(False, eligible_ids, keys, ordered, _softmax(ordered))
