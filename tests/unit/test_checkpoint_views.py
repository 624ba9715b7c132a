"""The Checkpoints screen's use cases (``engine.session.checkpoint_views``): each returns its
record, or the one line a panel shows and whether the failure was one we refuse by name; a
stop asked between pieces is nothing to show; an interpreter exit passes on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

from minigpt_tui.engine.formats import streamed_statistics
from minigpt_tui.engine.session import checkpoint_views
from minigpt_tui.engine.session.checkpoint_views import (
    IntegrityScope,
    compare_for_view,
    inspect_for_view,
    statistics_for_view,
    verify_for_view,
)
from minigpt_tui.engine.session.worker_failures import WorkFailed


class FakePanic(BaseException):
    """Like pyo3_runtime.PanicException: not an Exception, and a message of many lines."""


def write(path: Path, **tensors: np.ndarray) -> Path:
    safetensors.numpy.save_file(tensors, str(path))
    return path


def raising(failure: BaseException):
    def call(*args, **kwargs):
        raise failure
    return call


def test_an_inspection_is_the_record_and_a_missing_path_an_expected_line(tmp_path):
    path = write(tmp_path / "w.safetensors", w=np.arange(6, dtype=np.float32))
    inspection = inspect_for_view(path)
    assert not isinstance(inspection, WorkFailed)
    assert [entry.name for entry in inspection.entries] == ["w"]
    missing = inspect_for_view(tmp_path / "nothing.safetensors")
    assert isinstance(missing, WorkFailed) and missing.expected
    assert "nothing.safetensors" in missing.line and "\n" not in missing.line


def test_an_inspection_that_fails_unexpectedly_names_the_file_and_the_type(tmp_path, monkeypatch):
    path = tmp_path / "bad.gguf"
    monkeypatch.setattr(checkpoint_views, "inspect_path", raising(FakePanic("a panic\nwith a backtrace")))
    failed = inspect_for_view(path)
    assert failed == WorkFailed(f"could not open {path}: FakePanic: a panic", expected=False)
    monkeypatch.setattr(checkpoint_views, "inspect_path", raising(PermissionError(13, "Permission denied")))
    assert inspect_for_view(path) == WorkFailed(f"cannot read {path}: Permission denied", expected=True)
    monkeypatch.setattr(checkpoint_views, "inspect_path", raising(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        inspect_for_view(path)


def test_a_verification_that_cannot_read_is_an_incomplete_record_with_one_problem(tmp_path, monkeypatch):
    no_manifest = verify_for_view(tmp_path)
    assert not no_manifest.ok and not no_manifest.complete and no_manifest.problems
    monkeypatch.setattr(checkpoint_views, "verify_checkpoint", raising(PermissionError(13, "Permission denied")))
    unreadable = verify_for_view(tmp_path)
    assert unreadable.scope is IntegrityScope.MANIFEST and not unreadable.complete and not unreadable.ok
    assert unreadable.problems == (f"cannot read {tmp_path}: Permission denied",)
    monkeypatch.setattr(checkpoint_views, "verify_checkpoint", raising(ZeroDivisionError("division by zero")))
    assert verify_for_view(tmp_path).problems == (f"could not open {tmp_path}: ZeroDivisionError: division by zero",)


def test_a_comparison_is_the_record_or_the_engines_line(tmp_path):
    a = write(tmp_path / "a.safetensors", w=np.zeros(3), same=np.ones(2))
    b = write(tmp_path / "b.safetensors", w=np.array([0.0, 2.0, 0.0]), same=np.ones(2))
    result = compare_for_view(a, b)
    assert not isinstance(result, WorkFailed)
    assert result["changed"] == ["a.safetensors:w"] and result["unchanged"] == 1
    failed = compare_for_view(a, tmp_path / "gone.safetensors")
    assert isinstance(failed, WorkFailed) and failed.expected and "gone.safetensors" in failed.line


def test_statistics_are_the_engines_figures_and_a_stop_is_nothing_to_show(tmp_path, monkeypatch):
    values = np.linspace(-2.0, 3.0, 5_000)
    path = write(tmp_path / "t.safetensors", t=values)
    entry = inspect_for_view(path).entry("t")
    stats = statistics_for_view(path, entry, 5, lambda fraction: True)
    assert not isinstance(stats, WorkFailed) and stats is not None
    assert (stats["min"], stats["max"]) == (-2.0, 3.0) and sum(stats["histogram"]["counts"]) == 5_000
    monkeypatch.setattr(streamed_statistics, "PIECE_ELEMENTS", 1_000)
    assert statistics_for_view(path, entry, 5, lambda fraction: fraction < 0.3) is None
    path.write_bytes(path.read_bytes()[:-100])  # cut short: one line, the engine's own
    failed = statistics_for_view(path, entry, 5, lambda fraction: True)
    assert isinstance(failed, WorkFailed) and failed.expected and "\n" not in failed.line
