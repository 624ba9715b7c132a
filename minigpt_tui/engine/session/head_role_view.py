"""Every head's role scores for the loaded model, for the Generation screen's head view.

The scores are :func:`minigpt_tui.engine.analysis.head_roles.score_heads`' own records (the
numbers ``minigpt-tui heads`` prints), computed on the screen's worker. The view carries the
key of the model it scored, (file, identity), so the screen asks once per model and keeps
the grid until another model is loaded. Torch-free at import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.errors import GenerationError

if TYPE_CHECKING:
    from minigpt_tui.engine.analysis.head_roles import HeadRole
    from minigpt_tui.engine.session.generation import GenerationSession, StepperView

ModelKey = tuple[str, str | None]  # (model file or spec, model identity)


@dataclass(frozen=True)
class HeadRolesView:
    """One model's head roles: ``roles`` in layer-major order, one record per head, or the
    reason there are none (``problem``)."""

    model_key: ModelKey
    layers: int
    heads: int
    roles: tuple[HeadRole, ...] = ()
    problem: str | None = None

    def score(self, role: str, layer: int, head: int) -> float:
        return float(getattr(self.roles[layer * self.heads + head], role))

    def top(self, role: str, count: int = 3) -> tuple[HeadRole, ...]:
        """The ``count`` heads with the highest score for ``role`` (ties: the earlier head first)."""
        return tuple(sorted(self.roles, key=lambda r: -getattr(r, role))[:count])


def stepper_key(view: StepperView) -> ModelKey:
    """The key of the model a stepper view shows."""
    return view.model_label, view.model_identity


def session_key(session: GenerationSession) -> ModelKey:
    """The key of the session's loaded model (the same as :func:`stepper_key` of its view)."""
    label = str(session.model_path) if session.model_path else (session.spec or "")
    return label, getattr(session.portable, "identity", None)


def score_model_heads(portable: Any) -> tuple[HeadRole, ...]:
    """Every head of an opened model scored for each role on repeated random sequences, in
    layer-major order (``heads``, and the Generation screen's head view)."""
    from minigpt_tui.engine.analysis.head_roles import (  # deferred: imports torch
        score_heads,
    )

    return score_heads(portable.model, portable.tokenizer)


def head_roles_view(session: GenerationSession) -> HeadRolesView:
    """Score every head of the session's model (one forward pass over repeated sequences)."""
    portable: Any = session.portable
    if portable is None:
        raise GenerationError("no model loaded: load one before scoring its heads")
    config = portable.model.config
    key = session_key(session)
    try:
        roles = score_model_heads(portable)
    except GenerationError as err:  # e.g. a context too short for repeated sequences
        return HeadRolesView(key, config.layers, config.heads, problem=str(err))
    return HeadRolesView(key, config.layers, config.heads, roles)
