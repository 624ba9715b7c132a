"""The differences between two checkpoints: settings, records and tensors, aliases resolved."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from minigpt_tui.engine.formats.checkpoint_folder import TRAINING_FILE
from minigpt_tui.engine.formats.foreign_pickle import PICKLE_KINDS, pickle_tensors
from minigpt_tui.engine.formats.gguf_inspect import gguf_tensor_values
from minigpt_tui.engine.formats.inspect import inspect_path
from minigpt_tui.engine.formats.inspection import (
    TRAINING_STATE,
    FileSummary,
    Inspection,
    InspectionKind,
)
from minigpt_tui.engine.formats.safetensors_read import load_file


# -- comparison ----------------------------------------------------------------------------------
def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), inner, out)
    else:
        out[prefix] = value


def _file_tensors(summary: FileSummary) -> dict[str, Any]:
    """Every tensor of one file an inspection lists, read by that file's format."""
    if summary.kind in PICKLE_KINDS:
        return pickle_tensors(summary.path)
    if summary.kind == InspectionKind.GGUF:
        return gguf_tensor_values(summary.path)

    return load_file(summary.path).tensors()


def _tensors_of(inspection: Inspection) -> dict[tuple[str, str], tuple[str, Any]]:
    """(role, name) -> (file, tensor). A tensor matches its namesake in the other checkpoint
    whichever file or shard holds it; only a training-state file's tensors keep their own
    role, so they never meet a model's."""
    out: dict[tuple[str, str], tuple[str, Any]] = {}
    for summary in inspection.files:
        role = TRAINING_FILE if summary.kind == TRAINING_STATE else ""
        for name, tensor in _file_tensors(summary).items():
            out[(role, name)] = (summary.name, tensor)
    return out


def _resolve_aliases(tensors: dict[tuple[str, str], tuple[str, Any]], inspection: Inspection,
                     other: dict[tuple[str, str], tuple[str, Any]]) -> None:
    """An alias record names a tensor stored once under another name: the same thing as a
    shared tensor that the other side (a pickle) lists under both names, so where the other
    side holds that name it compares as the aliased tensor."""
    for alias in inspection.aliases:
        key, target = ("", alias.get("name")), ("", alias.get("target"))
        if alias.get("transform") == "none" and key not in tensors and key in other and target in tensors:
            tensors[key] = tensors[target]


def _float64(a: Any) -> Any:
    """``a`` as float64 (complex128 when complex), for differences and norms."""
    import torch  # deferred: imports torch

    if a.dtype == torch.uint64:
        return torch.from_numpy(a.numpy().astype("float64"))
    return a.to(torch.complex128 if a.is_complex() else torch.float64)


def _norm(a: Any) -> float:
    """The Euclidean norm of every element of ``a`` (0 for no elements)."""
    import torch  # deferred: imports torch

    return float(torch.linalg.vector_norm(_float64(a))) if a.numel() else 0.0


def _max_abs_difference(a: Any, b: Any) -> float:
    import torch  # deferred: imports torch

    if a.numel() == 0:
        return 0.0
    diff = (_float64(a) - _float64(b)).abs()
    return float(diff.max()) if not torch.isnan(diff).all() else math.nan


def _relative_change(a: Any, b: Any, norm_a: float) -> float | None:
    """‖a−b‖/‖a‖; None when a is all zeros and b is not (no scale to measure against)."""
    distance = _norm(_float64(a) - _float64(b))
    if norm_a == 0.0:
        return 0.0 if distance == 0.0 else None
    return distance / norm_a


def compare_checkpoints(a: Path | str, b: Path | str) -> dict[str, Any]:
    """Which tensors changed (by how much at most, their norms and the relative change
    ‖a−b‖/‖a‖) and which state records differ, between any two things ``inspect_path``
    opens (tensors are matched by name)."""
    first, second = inspect_path(a), inspect_path(b)
    ta, tb = _tensors_of(first), _tensors_of(second)
    _resolve_aliases(ta, first, tb)
    _resolve_aliases(tb, second, ta)
    tensors = [_tensor_row(key, ta, tb) for key in sorted(set(ta) | set(tb))]
    differences = _state_differences(first, second)
    return {
        "a": str(first.path),
        "b": str(second.path),
        "kinds": [first.kind, second.kind],
        "tensors": tensors,
        "changed": [f"{t['file']}:{t['name']}" for t in tensors if t["status"] != "same"],
        "unchanged": sum(1 for t in tensors if t["status"] == "same"),
        "state_differences": differences,
    }


def _tensor_row(key: Any, ta: dict[Any, Any], tb: dict[Any, Any]) -> dict[str, Any]:
    """One tensor's comparison row: where it is, and whether it is in one side only, reshaped,
    the same bytes, or changed (and by how much at most)."""
    row: dict[str, Any] = {"file": (ta.get(key) or tb[key])[0], "name": key[1]}
    if key in ta and key in tb and tb[key][0] != ta[key][0]:
        row["file_b"] = tb[key][0]  # another file or shard holds it in b
    if key not in tb:
        row.update(status="only_a", max_abs_diff=None, norm_a=_norm(ta[key][1]), norm_b=None, relative_change=None)
    elif key not in ta:
        row.update(status="only_b", max_abs_diff=None, norm_a=None, norm_b=_norm(tb[key][1]), relative_change=None)
    else:
        row.update(_tensor_status(ta[key][1], tb[key][1]))
    return row


def _tensor_status(x: Any, y: Any) -> dict[str, Any]:
    """status, max_abs_diff, the norms ‖a‖ and ‖b‖ and relative_change ‖a−b‖/‖a‖ of one
    tensor held by both sides."""
    import torch  # deferred: imports torch

    norm_a = _norm(x)
    if x.dtype != y.dtype or tuple(x.shape) != tuple(y.shape):
        return {"status": "reshaped", "max_abs_diff": None, "norm_a": norm_a, "norm_b": _norm(y),
                "relative_change": None}
    same = bool(torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8))) if x.numel() else True
    if same:
        return {"status": "same", "max_abs_diff": 0.0, "norm_a": norm_a, "norm_b": norm_a, "relative_change": 0.0}
    return {"status": "changed", "max_abs_diff": _max_abs_difference(x, y), "norm_a": norm_a, "norm_b": _norm(y),
            "relative_change": _relative_change(x, y, norm_a)}


def _state_differences(first: Any, second: Any) -> list[dict[str, Any]]:
    """The state records (flattened to dotted keys) whose values differ between the two."""
    fa: dict[str, Any] = {}
    fb: dict[str, Any] = {}
    _flatten("", first.state.to_json(), fa)
    _flatten("", second.state.to_json(), fb)
    differences = []
    for key in sorted(set(fa) | set(fb)):
        if fa.get(key) != fb.get(key):
            group, _, record = key.partition(".")
            differences.append({"group": group, "record": record, "a": fa.get(key), "b": fb.get(key)})
    return differences
