"""The one vocabulary of training-state groups: what a saved tensor or record is for.

The training-state file, inspection, the state view and the resume preview all name a
group by these values.
"""

from __future__ import annotations

import enum


class StateGroup(enum.StrEnum):
    OPTIMIZER = "optimizer"
    SCHEDULE = "schedule"
    UPDATE_POLICY = "update_policy"
    ACCUMULATION = "accumulation"
    DATA_PROGRESS = "data_progress"
    RANDOMNESS = "randomness"
    LOSS_SCALING = "loss_scaling"
    EVALUATION = "evaluation"
    DISTRIBUTED = "distributed"
    OTHER = "other"


# Tensor name prefix -> its group (the first matching prefix wins).
TENSOR_PREFIXES: tuple[tuple[str, StateGroup], ...] = (
    ("optimizer.", StateGroup.OPTIMIZER),
    ("schedule.", StateGroup.SCHEDULE),
    ("progress.", StateGroup.SCHEDULE),
    ("clipping.", StateGroup.UPDATE_POLICY),
    ("recompute.", StateGroup.UPDATE_POLICY),
    ("accumulation.", StateGroup.ACCUMULATION),
    ("data.", StateGroup.DATA_PROGRESS),
    ("randomness.", StateGroup.RANDOMNESS),
    ("loss_scaler.", StateGroup.LOSS_SCALING),
    ("curve.", StateGroup.EVALUATION),
    ("ranks.", StateGroup.DISTRIBUTED),
)


def group_of(name: str) -> StateGroup:
    for prefix, group in TENSOR_PREFIXES:
        if name.startswith(prefix):
            return group
    return StateGroup.OTHER
