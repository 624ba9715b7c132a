"""The bounded walk that turns an arbitrary loaded object (a pickle's records, a config)
into JSON-able records: plain values as they are, containers item by item, anything else
as its cut ``repr``. A small pickle can describe a structure nested 100,000 deep, or 2**40
paths through shared references, so the walk is bounded in depth and in nodes, and says
what it left out.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

RECORD_TEXT_LIMIT = 200
WALK_DEPTH = 48
WALK_NODES = 50_000


@dataclass
class WalkBudget:
    """What a walk over a loaded object may still visit, and what it had to leave out."""

    nodes: int = WALK_NODES
    cut: list[str] = field(default_factory=list)

    def spend(self, where: str) -> bool:
        """False (and the place noted once) when the node budget is spent."""
        if self.nodes <= 0:
            if not any(note.startswith("node budget") for note in self.cut):
                self.cut.append(f"node budget of {WALK_NODES} spent at '{where}': the rest is not shown")
            return False
        self.nodes -= 1
        return True

    def too_deep(self, depth: int, where: str) -> bool:
        if depth < WALK_DEPTH:
            return False
        if len(self.cut) < 20:
            self.cut.append(f"'{where}' nests deeper than {WALK_DEPTH} levels: not shown")
        return True


def _text(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= RECORD_TEXT_LIMIT else text[: RECORD_TEXT_LIMIT - 1] + "…"


def jsonable(value: Any, budget: WalkBudget | None = None, depth: int = 0, where: str = "") -> Any:
    """A JSON form of a record value (non-finite floats and unknown objects as text),
    bounded in depth and nodes."""
    budget = budget if budget is not None else WalkBudget()
    # Plain values first: numpy.float64 is a float and must read as one, not as numpy.
    if value is None or isinstance(value, _PLAIN_TYPES):
        return _jsonable_plain(value)
    if isinstance(value, (dict, list, tuple)):
        return _jsonable_container(value, budget, depth, where)
    if isinstance(value, argparse.Namespace):
        return jsonable(vars(value), budget, depth, where)
    if type(value).__module__ == "numpy" and hasattr(value, "item"):  # a numpy scalar
        return jsonable(value.item(), budget, depth + 1, where)
    return _text(value)


_PLAIN_TYPES = (bool, str, int, float, PurePath)


def _jsonable_plain(value: None | bool | str | int | float | PurePath) -> Any:
    """None, a bool, string, number or path as JSON: long strings cut, huge integers and
    non-finite floats as text."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value if len(value) <= 10 * RECORD_TEXT_LIMIT else _text(value)
    if isinstance(value, int):
        return value if value.bit_length() <= 64 else f"(an integer of {value.bit_length()} bits)"
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    return str(value)  # a path


def _jsonable_container(value: dict[Any, Any] | list[Any] | tuple[Any, ...], budget: WalkBudget, depth: int,
                        where: str) -> Any:
    if budget.too_deep(depth, where) or not budget.spend(where):
        return "(not shown)"
    if isinstance(value, dict):
        return {str(k)[:RECORD_TEXT_LIMIT]: jsonable(v, budget, depth + 1, f"{where}.{k}") for k, v in value.items()}
    return [jsonable(v, budget, depth + 1, f"{where}.{i}") for i, v in enumerate(value)]

