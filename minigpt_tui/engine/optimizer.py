"""torch's AdamW, bit for bit, without loading torch's compiler on first use.

torch marks a few :class:`torch.optim.Optimizer` methods (adding a parameter group, zeroing
gradients, the state dict in and out, and ``step``) so that ``torch.compile`` leaves them
alone. The marks import ``torch._dynamo`` (and sympy with it) the first time such a method
runs: about a second of every process that trains, longer than the rest of a restart on a
large cached text. This project never compiles its optimizer, so :class:`AdamW` calls the
marked methods' own bodies; the arithmetic, the state and the state dict are torch's.
Where a torch version does not wrap a method this way, the inherited method runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch


def _body(method: Callable[..., Any]) -> Callable[..., Any] | None:
    """The function inside torch's compile-exclusion wrappers, or None when ``method`` is
    not wrapped (then the caller uses the method itself)."""
    inner = inspect.unwrap(method)
    return None if inner is method else inner


_ADD_PARAM_GROUP = _body(torch.optim.Optimizer.add_param_group)
_ZERO_GRAD = _body(torch.optim.Optimizer.zero_grad)
_STATE_DICT = _body(torch.optim.Optimizer.state_dict)
_LOAD_STATE_DICT = _body(torch.optim.Optimizer.load_state_dict)
_STEP = _body(torch.optim.Adam.step)


class AdamW(torch.optim.AdamW):
    """:class:`torch.optim.AdamW` with the same constructor, update, state and class name."""

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if _ADD_PARAM_GROUP is None:
            return super().add_param_group(param_group)
        return _ADD_PARAM_GROUP(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        if _ZERO_GRAD is None:
            return super().zero_grad(set_to_none)
        return _ZERO_GRAD(self, set_to_none)

    def state_dict(self) -> dict[str, Any]:
        if _STATE_DICT is None:
            return super().state_dict()
        return _STATE_DICT(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if _LOAD_STATE_DICT is None:
            return super().load_state_dict(state_dict)
        return _LOAD_STATE_DICT(self, state_dict)

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        if _STEP is None:
            return super().step(closure)
        # What torch's wrapper does around the body, less the compiler's graph breaks.
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return _STEP(self, closure)
