"""What the inspections of other tools' files share: an entry's group by the layer its name
holds, parameter totals per dtype, and the names one tensor may be asked for by."""

from __future__ import annotations

import re
from typing import Any

from minigpt_tui.engine.families.transformers_config import shown

__all__ = ["candidate_names", "dtype_totals", "layer_group", "shown"]

LAYER_NAME = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")


def layer_group(name: str) -> str:
    """``layer N`` for a tensor of layer N (``model.layers.3.…``, ``h.3.…``,
    ``blocks.3.…``); ``model`` for any other."""
    match = LAYER_NAME.search(name)
    return f"layer {int(match.group(1))}" if match else "model"


def dtype_totals(rows: list[tuple[str, int, int]]) -> dict[str, Any]:
    """{dtype: {tensors, scalars, bytes}} and a total, from (dtype, elements, bytes) rows."""
    totals: dict[str, Any] = {}
    for dtype, elements, nbytes in rows:
        slot = totals.setdefault(dtype, {"tensors": 0, "scalars": 0, "bytes": 0})
        slot["tensors"] += 1
        slot["scalars"] += elements
        slot["bytes"] += nbytes
    totals["total"] = {
        "tensors": len(rows),
        "scalars": sum(r[1] for r in rows),
        "bytes": sum(r[2] for r in rows),
    }
    return totals


def candidate_names(name: str) -> list[str]:
    """``name`` itself, then without a leading ``FILE:`` (the checkpoint browser adds the
    file of a folder's entry)."""
    _, separator, bare = name.partition(":")
    return [name, bare] if separator and bare else [name]


