"""What each attention head does, scored on repeated random sequences.

``SEQUENCES`` sequences are drawn from a fixed seed over the model's own vocabulary (ids
the tokenizer marks special left out): each is R followed by R again, R being ``length``
random ids, with the tokenizer's BOS first when it has one. With p the attention weights of
a head, query x key, and the first copy of R at positions s .. s+k-1 (the second at s+k ..
s+2k-1), each score is a mean attention weight:

- **induction**: from position s+k+j of the second copy to s+j+1, the id after the first
  copy of the current id (where an induction head looks to predict what comes next);
- **previous_token**: from every position after the first to the one before it;
- **duplicate_token**: from s+k+j to s+j, the earlier copy of the current id;
- **first_token**: from every position to position 0 (an attention sink).

A score near 1 means the head does that at nearly every position; chance is about 1 over
the number of positions a query sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from minigpt_tui.engine.analysis.roles import HEAD_ROLES as ROLES
from minigpt_tui.engine.analysis.site_names import head_name
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.models.model import evaluating
from minigpt_tui.engine.models.sites import Sites

SEQUENCES = 4
SEED = 20240521


@dataclass(frozen=True)
class HeadRole:
    layer: int
    head: int
    induction: float
    previous_token: float
    duplicate_token: float
    first_token: float

    @property
    def name(self) -> str:
        return head_name(self.layer, self.head)

    def to_json(self) -> dict[str, Any]:
        return {"layer": self.layer, "head": self.head, "induction": self.induction,
                "previous_token": self.previous_token, "duplicate_token": self.duplicate_token,
                "first_token": self.first_token}


def repeated_sequences(vocab_size: int, length: int, bos: int | None, excluded: set[int]) -> torch.Tensor:
    """[SEQUENCES, (1 +) 2 * length] ids: R then R, BOS first when there is one."""
    allowed = torch.tensor([i for i in range(vocab_size) if i not in excluded and i != bos])
    if len(allowed) < 2:
        raise GenerationError("the vocabulary has too few ordinary ids to draw sequences from")
    generator = torch.Generator().manual_seed(SEED)
    picks = allowed[torch.randint(len(allowed), (SEQUENCES, length), generator=generator)]
    rows = torch.cat([picks, picks], dim=1)
    if bos is not None:
        rows = torch.cat([torch.full((SEQUENCES, 1), bos), rows], dim=1)
    return rows


@dataclass(frozen=True)
class RoleSequences:
    """The repeated sequences a model's heads are scored on: ``ids`` [SEQUENCES, T], the
    first copy of R at ``start`` .. ``start + k - 1``."""

    ids: torch.Tensor
    start: int
    k: int


def role_sequences(model: Any, tokenizer: Any, length: int | None = None) -> RoleSequences:
    """The sequences for ``model`` and its ``tokenizer`` (see the module doc)."""
    config = model.config
    bos = getattr(tokenizer, "bos_id", None)
    start = 1 if bos is not None else 0
    k = length or min(48, (config.context - start) // 2)
    if k < 2:
        raise GenerationError(f"the context of {config.context} is too short for repeated sequences")
    excluded = set(getattr(tokenizer, "eos_ids", ())) | set(getattr(tokenizer, "specials", ()))
    return RoleSequences(repeated_sequences(model.vocab_size, k, bos, excluded), start, k)


def score_heads(model: Any, tokenizer: Any, length: int | None = None,
                sequences: RoleSequences | None = None) -> tuple[HeadRole, ...]:
    """Every head's role scores, on ``sequences`` (made for the model when not given)."""
    config = model.config
    sequences = sequences or role_sequences(model, tokenizer, length)
    sites = Sites(config).read("blocks.*.attn.hook_pattern")  # the patterns are all it reads
    with evaluating(model), torch.no_grad():
        model(sequences.ids, sites=sites, skip_head=True)
    roles = []
    for layer in range(config.layers):
        scores = role_scores(sites[f"blocks.{layer}.attn.hook_pattern"], sequences.start, sequences.k)
        for head in range(config.heads):
            roles.append(HeadRole(layer, head, *(float(scores[role][head]) for role in ROLES)))
    return tuple(roles)


def role_scores(pattern: torch.Tensor, start: int, k: int) -> dict[str, torch.Tensor]:
    """Each role's score per head [H] from attention weights [B, H, T, T] over sequences
    whose first copy of R starts at ``start`` and is ``k`` ids long (see the module doc)."""
    pattern = pattern.to(torch.float64)
    second = torch.arange(start + k, start + 2 * k)
    earlier = torch.arange(start, start + k)
    positions = torch.arange(1, pattern.shape[-1])
    # Two index tensors side by side pick (query, key) pairs: [B, H, pairs].
    return {"induction": pattern[:, :, second[:-1], earlier[1:]].mean(dim=(0, 2)),
            "previous_token": pattern[:, :, positions, positions - 1].mean(dim=(0, 2)),
            "duplicate_token": pattern[:, :, second, earlier].mean(dim=(0, 2)),
            "first_token": pattern[:, :, :, 0].mean(dim=(0, 2))}
