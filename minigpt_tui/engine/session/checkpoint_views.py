"""What the app's Checkpoints screen reads, one call per worker: a header-only inspection, a
verification against the manifest, a comparison of two checkpoints and one tensor's
statistics. Each returns its record or, as :class:`WorkFailed`, the one line that says why
not; only an interpreter exit passes on. The panels name the records they show (integrity,
state groups) from here, so the app reaches them through the session layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.errors import MiniGPTError
from minigpt_tui.engine.formats.checkpoint_folder import verify_checkpoint
from minigpt_tui.engine.formats.compare import compare_checkpoints
from minigpt_tui.engine.formats.inspect import inspect_path, tensor_statistics
from minigpt_tui.engine.formats.inspection import EntryRecord, Inspection
from minigpt_tui.engine.formats.integrity import FileIntegrity, Integrity, IntegrityScope
from minigpt_tui.engine.formats.state_groups import InspectionState, StateGroup, StateRecords
from minigpt_tui.engine.formats.streamed_statistics import Going, StatisticsStopped
from minigpt_tui.engine.session.worker_failures import WorkFailed, failure_line, is_expected, passes_on

__all__ = [
    "EntryRecord", "FileIntegrity", "Inspection", "InspectionState", "Integrity", "IntegrityScope",
    "StateGroup", "StateRecords", "compare_for_view", "inspect_for_view", "statistics_for_view",
    "verify_for_view",
]

VERIFIED = "manifest sizes and SHA-256"  # what a verification checks, named in its failure too


def inspect_for_view(path: Path) -> Inspection | WorkFailed:
    """``path`` (a file, a checkpoint folder, a run folder, another tool's model) inspected
    from its headers. A refusal or an unreadable file is an expected failure; anything else
    is not, and the screen says it even when the user only moved the cursor."""
    try:
        return inspect_path(path)
    except MiniGPTError as err:
        return WorkFailed(str(err), expected=True)
    except OSError as err:
        return WorkFailed(f"cannot read {path}: {err.strerror or err}", expected=True)
    except BaseException as err:  # noqa: BLE001 - an unexpected failure is still one line
        if passes_on(err):
            raise
        return WorkFailed(failure_line(err, str(path)), expected=False)


def verify_for_view(folder: Path) -> Integrity:
    """Every file of the checkpoint ``folder`` hashed against its manifest; a failure to read
    it is the verification's one problem (the record is then incomplete)."""
    try:
        return verify_checkpoint(folder, hashes=True)
    except OSError as err:
        problem = f"cannot read {folder}: {err.strerror or err}"
    except BaseException as err:  # noqa: BLE001 - any failure is shown as the check's one problem
        if passes_on(err):
            raise
        problem = failure_line(err, str(folder))
    return Integrity(IntegrityScope.MANIFEST, VERIFIED, (problem,), complete=False)


def compare_for_view(first: Path, other: Path) -> dict[str, Any] | WorkFailed:
    """The tensors and state records that differ between ``first`` and ``other`` (reads both)."""
    try:
        return compare_checkpoints(first, other)
    except (MiniGPTError, OSError) as err:
        return WorkFailed(str(err), expected=True)
    except BaseException as err:  # noqa: BLE001 - any failure is one line, and the panel says so
        if passes_on(err):
            raise
        return WorkFailed(failure_line(err), expected=False)


def statistics_for_view(source: Path, entry: EntryRecord, bins: int, going: Going) -> dict[str, Any] | WorkFailed | None:
    """The statistics and histogram of ``entry`` of the file or folder ``source``; None when
    ``going`` said stop (another tensor was chosen, or escape: nothing to show)."""
    try:
        # In a folder (checkpoint, transformers model) the entry's file says which one holds it.
        name = f"{entry.file}:{entry.name}" if source.is_dir() else entry.name
        return tensor_statistics(source, name, bins, going)
    except StatisticsStopped:
        return None
    except BaseException as err:  # noqa: BLE001 - any failure is one line in the panel
        if passes_on(err):
            raise
        return WorkFailed(failure_line(err, str(source)), expected=is_expected(err))
