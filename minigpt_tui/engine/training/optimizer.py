"""torch's AdamW, bit for bit, without loading torch's compiler on first use.

torch marks a few :class:`torch.optim.Optimizer` methods (adding a parameter group, zeroing
gradients, the state dict in and out, and ``step``) so that ``torch.compile`` leaves them
alone. The marks import ``torch._dynamo`` (and sympy with it) the first time such a method
runs: about a second of every process that trains, longer than the rest of a restart on a
large cached text. This project never compiles its optimizer, so :class:`AdamW` calls the
marked methods' own bodies; the arithmetic, the state and the state dict are torch's.
Where a torch version does not wrap a method this way, the method itself runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch


# inspect.unwrap: the function inside torch's wrappers (the method itself where none).
_STEP = inspect.unwrap(torch.optim.Adam.step)


class AdamW(torch.optim.AdamW):
    """:class:`torch.optim.AdamW` with the same constructor, update, state and class name."""

    add_param_group = inspect.unwrap(torch.optim.Optimizer.add_param_group)
    zero_grad = inspect.unwrap(torch.optim.Optimizer.zero_grad)
    state_dict = inspect.unwrap(torch.optim.Optimizer.state_dict)
    load_state_dict = inspect.unwrap(torch.optim.Optimizer.load_state_dict)

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        # What torch's wrapper does around the body, less the compiler's graph breaks.
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return _STEP(self, closure)
