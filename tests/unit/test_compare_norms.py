"""A comparison says how much each tensor changed relative to its size: the norms ‖a‖ and
‖b‖ and the relative change ‖a−b‖/‖a‖ beside the largest absolute difference, in the
engine's records and in ``inspect --compare --json``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

from minigpt_tui.cli import main
from minigpt_tui.engine.formats.compare import compare_checkpoints


def write(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    safetensors.numpy.save_file(tensors, str(path))
    return path


@pytest.fixture
def pair(tmp_path):
    rng = np.random.default_rng(7)
    weight = rng.standard_normal((4, 5))
    changed = weight + rng.standard_normal((4, 5)) * 0.01
    a = write(tmp_path / "a.safetensors", {
        "w": weight, "same": np.arange(6, dtype=np.float32), "zero": np.zeros(3), "only_here": np.full(2, 3.0),
        "shape": np.ones((2, 2), dtype=np.float32), "counts": np.array([3, 4], dtype=np.int64)})
    b = write(tmp_path / "b.safetensors", {
        "w": changed, "same": np.arange(6, dtype=np.float32), "zero": np.array([0.0, 1.0, 0.0]),
        "there_only": np.full(4, 0.5), "shape": np.ones(4, dtype=np.float32), "counts": np.array([0, 4], dtype=np.int64)})
    return a, b, weight, changed


def rows(result):
    return {row["name"]: row for row in result["tensors"]}


def test_each_tensor_row_has_both_norms_and_the_relative_change(pair):
    a, b, weight, changed = pair
    by_name = rows(compare_checkpoints(a, b))
    w = by_name["w"]
    assert w["status"] == "changed"
    assert w["max_abs_diff"] == pytest.approx(np.abs(weight - changed).max(), rel=1e-12)
    assert w["norm_a"] == pytest.approx(np.linalg.norm(weight), rel=1e-12)
    assert w["norm_b"] == pytest.approx(np.linalg.norm(changed), rel=1e-12)
    assert w["relative_change"] == pytest.approx(np.linalg.norm(weight - changed) / np.linalg.norm(weight), rel=1e-12)
    assert 0 < w["relative_change"] < 0.05  # a small nudge reads small, whatever the scale of the weights
    # Integers are measured as numbers: |3 - 0| at most, norms 5 and 4.
    counts = by_name["counts"]
    assert (counts["max_abs_diff"], counts["norm_a"], counts["norm_b"]) == (3.0, 5.0, 4.0)
    assert counts["relative_change"] == pytest.approx(3 / 5)
    same = by_name["same"]
    assert same["status"] == "same" and same["relative_change"] == 0.0
    assert same["norm_a"] == same["norm_b"] == pytest.approx(np.linalg.norm(np.arange(6)))


def test_rows_without_a_scale_or_a_counterpart_leave_those_figures_empty(pair):
    a, b, _weight, _changed = pair
    by_name = rows(compare_checkpoints(a, b))
    zero = by_name["zero"]  # all zeros in a: a change has nothing to be relative to
    assert zero["status"] == "changed" and zero["norm_a"] == 0.0 and zero["norm_b"] == 1.0
    assert zero["relative_change"] is None
    assert by_name["only_here"]["status"] == "only_a"
    assert (by_name["only_here"]["norm_a"], by_name["only_here"]["norm_b"]) == (pytest.approx(np.sqrt(18)), None)
    assert (by_name["there_only"]["norm_a"], by_name["there_only"]["norm_b"]) == (None, 1.0)
    reshaped = by_name["shape"]
    assert reshaped["status"] == "reshaped" and reshaped["relative_change"] is None
    assert reshaped["norm_a"] == reshaped["norm_b"] == 2.0


def test_inspect_compare_json_keeps_its_keys_and_adds_the_norms(pair, capsys):
    a, b, weight, changed = pair
    assert main(["inspect", str(a), "--compare", str(b), "--json"]) == 0
    comparison = json.loads(capsys.readouterr().out)["comparison"]
    w = rows(comparison)["w"]
    assert list(w) == ["file", "name", "file_b", "status", "max_abs_diff", "norm_a", "norm_b", "relative_change"]
    assert w["relative_change"] == pytest.approx(np.linalg.norm(weight - changed) / np.linalg.norm(weight), rel=1e-12)
    assert {"a", "b", "kinds", "tensors", "changed", "unchanged", "state_differences"} <= set(comparison)
    # The table printed without --json has the same figures.
    assert main(["inspect", str(a), "--compare", str(b)]) == 0
    printed = capsys.readouterr().out
    assert "||a-b||/||a||" in printed and f"{w['relative_change']:.6g}" in printed
