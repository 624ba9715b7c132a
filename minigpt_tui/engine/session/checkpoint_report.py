"""What ``inspect`` reports about a checkpoint, a run, a model file or any safetensors or GGUF
file: the header-only inspection, and on request a full verification (every byte read and
checked), one tensor's statistics, a comparison with another checkpoint, and the probes the
run scored at or before a checkpoint's step. The report is the JSON ``inspect --json``
prints. Torch-free at import: verification opens models inside its function.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.errors import ConfigError
from minigpt_tui.engine.formats.checkpoint_folder import STEP_DIR
from minigpt_tui.engine.formats.compare import compare_checkpoints
from minigpt_tui.engine.formats.gguf_inspect import verify_gguf
from minigpt_tui.engine.formats.inspect import inspect_path, tensor_statistics
from minigpt_tui.engine.formats.inspection import InspectionKind
from minigpt_tui.engine.formats.safetensors_read import load_file
from minigpt_tui.engine.session.history import probe_records
from minigpt_tui.engine.session.runs import checkpoint_target
from minigpt_tui.engine.training.training_state import read_training_state

DEFAULT_BINS = 20  # histogram bins of one tensor's statistics


@dataclass(frozen=True)
class InspectRequest:
    """What to report beyond the header: ``verify`` reads everything, ``tensor`` names one
    tensor for statistics (in ``bins`` bins), ``compare`` another checkpoint spec."""

    verify: bool = False
    tensor: str | None = None
    bins: int = DEFAULT_BINS
    compare: str | None = None


def checkpoint_report(spec: str, runs_dir: Path, request: InspectRequest | None = None) -> dict[str, Any]:
    """The report of what ``spec`` (a path, a run folder, ``RUN:latest|best|STEP``) holds."""
    request = request or InspectRequest()
    target = checkpoint_target(spec, runs_dir)
    inspection = inspect_path(target, verify_hashes=request.verify)
    result = inspection.to_json()
    if request.verify:  # the inspected path: a run folder resolves to its latest checkpoint
        result["verified"] = _verify_fully(inspection.path, inspection.kind)
    if request.tensor:
        result["statistics"] = tensor_statistics(inspection.path, request.tensor, bins=request.bins)
    if request.compare:
        result["comparison"] = compare_checkpoints(inspection.path, checkpoint_target(request.compare, runs_dir))
    if inspection.kind == "checkpoint-dir":
        result["probes"] = _probes_at_checkpoint(inspection.path)
    return result


def _probes_at_checkpoint(folder: Path) -> dict[str, Any] | None:
    """The run's last probes record at or before the checkpoint's step (None outside a run
    folder, or when the run scored none)."""
    match = STEP_DIR.match(folder.name)
    run_dir = folder.parent.parent
    if match is None or folder.parent.name != "checkpoints" or not (run_dir / "metrics.jsonl").is_file():
        return None
    try:
        records = probe_records(run_dir, until_step=int(match.group(1)))
    except ConfigError:
        return None
    return records[-1] if records else None


def _verify_fully(path: Path, kind: str) -> dict[str, Any]:
    """Read everything and check it: manifest hashes, identities, content digests."""
    from minigpt_tui.engine.training.checkpoints import (  # deferred: imports torch
        load_checkpoint,
    )
    from minigpt_tui.engine.models.model_file import (  # deferred: imports torch
        load_portable_model,
    )

    if kind == "checkpoint-dir":
        loaded = load_checkpoint(path, recompute_digests=True)
        return {"ok": True, "model_identity": loaded.model_file.identity, "step": loaded.state.step}
    if kind == "portable-model":
        model = load_portable_model(path)
        return {"ok": True, "model_identity": model.identity, "tied_alias": model.tied_alias}
    if kind == "training-state":
        state = read_training_state(path)
        return {"ok": True, "step": state.step}
    if kind == InspectionKind.GGUF:  # no manifest: its header, readable types and SHA-256
        return verify_gguf(path)
    loaded = load_file(path)
    return {"ok": True, "sha256": loaded.sha256}
