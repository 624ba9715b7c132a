"""The one vocabulary of state groups: what a saved tensor or record is for.

The training-state file, inspection, the state view and the resume preview all name a
group by these values. An inspection holds its state records as typed groups
(:class:`InspectionState`); a group a file names outside the vocabulary keeps the name the
file gives it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any


class StateGroup(enum.StrEnum):
    # What decides the next update: the training-state file's tensors and records.
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
    # What our model file records.
    IDENTITIES = "identities"
    COMPOSITION = "composition"
    MODEL_CONFIG = "model_config"
    CONSTANTS = "constants"
    TOKENIZER = "tokenizer"
    SPECIAL_IDS = "special_ids"
    PARAMETERS = "parameters"
    PROVENANCE = "provenance"
    # Under what the training state was saved, and what it still promises.
    ENVELOPE = "envelope"
    CONTINUATION = "continuation"
    # Files made by other programs: transformers folders, nanoGPT and plain PyTorch pickles.
    MODEL = "model"
    CONFIG = "config"
    GENERATION_CONFIG = "generation_config"
    INDEX = "index"
    TRAINING = "training"
    MODEL_ARGS = "model_args"
    RECORDS = "records"
    SCALAR_TENSORS = "scalar_tensors"


GroupName = StateGroup | str  # a name outside the vocabulary stays as the file spells it

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


def group_named(name: str) -> GroupName:
    """The vocabulary's member for ``name``, or ``name`` itself when the vocabulary lacks it."""
    try:
        return StateGroup(name)
    except ValueError:
        return name


@dataclass(frozen=True)
class StateRecords:
    """One group of state records: readable values (JSON) saved for one purpose."""

    group: GroupName
    records: Mapping[str, Any]

    def __post_init__(self) -> None:
        object.__setattr__(self, "group", group_named(str(self.group)))
        object.__setattr__(self, "records", MappingProxyType(dict(self.records)))


@dataclass(frozen=True)
class InspectionState:
    """The state records of an inspected file or folder, group by group in the file's order."""

    groups: tuple[StateRecords, ...] = ()

    @staticmethod
    def of(groups: Mapping[str, Mapping[str, Any]]) -> InspectionState:
        return InspectionState(tuple(StateRecords(name, records) for name, records in groups.items()))

    def __contains__(self, group: object) -> bool:
        return any(g.group == group for g in self.groups)

    def __iter__(self) -> Iterator[StateRecords]:
        return iter(self.groups)

    def __len__(self) -> int:
        return len(self.groups)

    def get(self, group: GroupName) -> Mapping[str, Any]:
        """The records of ``group``; empty when this state has no such group."""
        for g in self.groups:
            if g.group == group:
                return g.records
        return MappingProxyType({})

    def integer(self, group: GroupName, key: str) -> int | None:
        value = self.get(group).get(key)
        return value if isinstance(value, int) else None

    def merged(self, other: InspectionState) -> InspectionState:
        """This state with ``other``'s groups after it; a group both hold gets both records
        (``other``'s win on the same key), in this state's place."""
        merged: dict[str, dict[str, Any]] = {}
        for g in (*self.groups, *other.groups):
            merged.setdefault(g.group, {}).update(g.records)
        return InspectionState.of(merged)

    def with_group(self, group: GroupName, records: Mapping[str, Any]) -> InspectionState:
        """This state with ``group``'s records replaced (or added at the end)."""
        if group not in self:
            return InspectionState((*self.groups, StateRecords(group, records)))
        return InspectionState(tuple(StateRecords(group, records) if g.group == group else g for g in self.groups))

    def to_json(self) -> dict[str, dict[str, Any]]:
        return {str(g.group): dict(g.records) for g in self.groups}
