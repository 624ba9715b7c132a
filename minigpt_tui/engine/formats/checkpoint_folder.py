"""The checkpoint folder on disk: its manifest, verification against it, and listing.

A checkpoint is ``checkpoints/step-NNNNNN/`` holding ``model.safetensors``,
``training.safetensors`` and ``manifest.json`` (per-file size and SHA-256). A folder
without a manifest that parses is never complete; hidden work folders are never listed.
Writing one is :mod:`minigpt_tui.engine.training.checkpoints`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.errors import CheckpointError, InputRefused
from minigpt_tui.engine.core.files import CHECKPOINT_FILES, path_exists, require_regular_file
from minigpt_tui.engine.formats.integrity import (
    FileIntegrity,
    Integrity,
    IntegrityScope,
)
from minigpt_tui.engine.formats.bounded_json import (
    JSONRefused,
    load_json,
)
from minigpt_tui.engine.formats.safetensors_read import (
    ExpectedFile,
    file_sha256,
)

if TYPE_CHECKING:
    pass


MANIFEST = "manifest.json"
TRAINING_FILE = "training.safetensors"  # beside the model file: everything that decides the next update
TRAINING_STATE_FORMAT = "minigpt-tui/training-state"
TRAINING_STATE_VERSION = 1
FORMAT_NAME = "minigpt-tui/checkpoint"
FORMAT_VERSION = 1
STEP_DIR = re.compile(r"^step-(\d{6,})$")
_HIDDEN_WORK = re.compile(r"^\.(step-\d{6,})\.(partial|replaced|trash)-(\d+)-[0-9a-f]+$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_TEMPORARY = re.compile(r"\.(.+)\.partial-\d+-[0-9a-f]+")  # core.files' temporary name of a file being written


def checkpoint_name(step: int) -> str:
    return f"step-{step:06d}"


# -- manifests ----------------------------------------------------------------------------------
def read_manifest(folder: Path) -> dict[str, Any]:
    """The parsed manifest of a checkpoint folder; a folder without one is incomplete."""
    path = _manifest_path(Path(folder))
    data = _manifest_json(path)
    _check_manifest(path, data)
    return data


def _manifest_path(folder: Path) -> Path:
    """Where ``folder``'s manifest is, refusing what is not a finished checkpoint folder."""
    if not folder.is_dir():
        raise CheckpointError(f"not a checkpoint directory: {folder}")
    if _HIDDEN_WORK.match(folder.name) or folder.name.startswith("."):
        raise CheckpointError(
            f"{folder} is a hidden work folder (a save in progress, or one that was interrupted), not a checkpoint"
        )
    path = folder / MANIFEST
    if not path_exists(path):
        raise CheckpointError(f"{folder}: incomplete checkpoint: it has no {MANIFEST} (the save did not finish)")
    require_regular_file(path, "a manifest")
    return path


def _manifest_json(path: Path) -> Any:
    try:
        if path.stat().st_size > _MAX_MANIFEST_BYTES:
            raise CheckpointError(f"{path}: the manifest is larger than {_MAX_MANIFEST_BYTES} bytes: not ours")
        return load_json(path.read_bytes().decode("utf-8"), _MANIFEST_DEPTH)
    except (UnicodeDecodeError, JSONRefused):
        raise CheckpointError(f"{path}: the manifest is damaged (not UTF-8 JSON)") from None
    except OSError as err:
        raise CheckpointError(f"cannot read {path}: {err.strerror or err}") from None


def _check_manifest(path: Path, data: Any) -> None:
    """Format, file records, step and optional fields, in that order; the first fault is named."""
    _check_manifest_format(path, data)
    _check_file_records(path, data.get("files"))
    if not _is_count(data.get("step")):
        raise CheckpointError(f"{path}: the manifest has no valid step")
    for key, valid in _MANIFEST_FIELDS.items():
        if key in data and not valid(data[key]):
            raise CheckpointError(f"{path}: the manifest field '{key}' is malformed ({type(data[key]).__name__})")


def _check_manifest_format(path: Path, data: Any) -> None:
    """The manifest's format record names this format, at the version this build reads."""
    fmt = data.get("format") if isinstance(data, dict) else None
    if not isinstance(fmt, dict) or fmt.get("name") != FORMAT_NAME:
        raise CheckpointError(f"{path}: not a minigpt-tui checkpoint manifest")
    if fmt.get("version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: checkpoint format version {fmt.get('version')!r} is not supported")


def _check_file_records(path: Path, files: Any) -> None:
    """At least one file record, each well formed."""
    if not isinstance(files, dict) or not files:
        raise CheckpointError(f"{path}: the manifest lists no files")
    for name, record in files.items():
        if not _is_file_record(name, record):
            raise CheckpointError(f"{path}: the manifest record for '{name}' is malformed")


def _is_file_record(name: str, record: Any) -> bool:
    """A file the manifest lists: a plain name in the folder, its size and SHA-256."""
    return (
        isinstance(record, dict)
        and _is_count(record.get("size"))
        and isinstance(record.get("sha256"), str)
        and _SHA256.match(record["sha256"]) is not None
        and "/" not in name
        and not name.startswith(".")
    )


# A manifest is a few hundred bytes; the bound keeps a hostile one from costing memory.
_MAX_MANIFEST_BYTES = 1 << 20
_MANIFEST_DEPTH = 8


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _is_time(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_MANIFEST_FIELDS: dict[str, Any] = {
    "reason": lambda v: isinstance(v, str) and len(v) <= 200,
    "best_step": lambda v: v is None or _is_count(v),
    "saved_at": _is_time,
    "model_identity": lambda v: isinstance(v, str) and _SHA256.match(v) is not None,
    "provenance": lambda v: isinstance(v, dict) and all(isinstance(x, (str, int)) for x in v.values()),
}


def checkpoint_own_files(folder: Path) -> Callable[[str], bool]:
    """Which names in a checkpoint folder (under its own name or a hidden work name)
    minigpt-tui wrote: the manifest, the files every checkpoint holds, any other file the
    manifest lists, and the temporary name of any of these. Everything else is a user's:
    retention and clean-up leave it where it is."""
    ours = set(CHECKPOINT_FILES) | _listed_files(Path(folder) / MANIFEST)

    def own(name: str) -> bool:
        temporary = _TEMPORARY.fullmatch(name)
        return name in ours or (temporary is not None and temporary.group(1) in ours)

    return own


def _listed_files(manifest: Path) -> set[str]:
    """The file names a manifest lists (none when it is missing or not ours)."""
    try:
        require_regular_file(manifest, "a manifest")
        data = _manifest_json(manifest)
        _check_manifest(manifest, data)
    except (CheckpointError, InputRefused):
        return set()
    return set(data["files"])


def expected_from_manifest(file_path: Path) -> ExpectedFile | None:
    """What the manifest beside ``file_path`` records for it (None: no manifest there)."""
    folder = file_path.parent
    if not (folder / MANIFEST).exists():
        return None
    record = read_manifest(folder)["files"].get(file_path.name)
    if record is None:
        raise CheckpointError(f"{file_path}: not listed in {folder / MANIFEST}")
    return ExpectedFile(record["size"], record["sha256"], str(folder / MANIFEST))


def verify_checkpoint(folder: Path, *, hashes: bool = True) -> Integrity:
    """Integrity of a checkpoint folder: manifest present, sizes and (optionally) hashes."""
    folder = Path(folder)
    checked = "manifest sizes and SHA-256" if hashes else "manifest sizes"
    try:
        manifest = read_manifest(folder)
    except CheckpointError as err:
        return Integrity(IntegrityScope.MANIFEST, checked, (str(err),), complete=False)
    files = []
    problems = []
    for name, record in manifest["files"].items():
        path = folder / name
        if not path.is_file():
            files.append(FileIntegrity(name, record["size"], record["sha256"], present=False))
            problems.append(f"{path} is missing")
            continue
        actual = path.stat().st_size
        if actual != record["size"]:
            problems.append(f"{path}: {actual} bytes, the manifest records {record['size']}")
        sha_ok = file_sha256(path) == record["sha256"] if hashes else None
        if sha_ok is False:
            problems.append(f"{path}: SHA-256 does not match the manifest")
        files.append(FileIntegrity(name, record["size"], record["sha256"], True, actual, sha_ok))
    return Integrity(IntegrityScope.MANIFEST, checked, tuple(problems), hashes_checked=hashes,
                     step=manifest["step"], reason=manifest.get("reason"), files=tuple(files))


# -- listing and retention ----------------------------------------------------------------------
@dataclass(frozen=True)
class CheckpointInfo:
    path: Path
    step: int
    complete: bool  # a manifest that parses (hashes are checked when it is loaded)
    reason: str | None = None
    best_step: int | None = None
    saved_at: float | None = None
    model_identity: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "step": self.step,
            "complete": self.complete,
            "reason": self.reason,
            "best_step": self.best_step,
            "saved_at": self.saved_at,
            "model_identity": self.model_identity,
        }


def list_checkpoints(checkpoints_dir: Path, *, include_incomplete: bool = False) -> list[CheckpointInfo]:
    """Checkpoints of a run in step order; hidden work folders are never listed."""
    checkpoints_dir = Path(checkpoints_dir)
    if not checkpoints_dir.is_dir():
        return []
    out = []
    for child in checkpoints_dir.iterdir():
        match = STEP_DIR.match(child.name)
        if not match or not child.is_dir():
            continue
        try:
            manifest = read_manifest(child)
        except CheckpointError:
            if include_incomplete:
                out.append(CheckpointInfo(child, int(match.group(1)), False))
            continue
        out.append(
            CheckpointInfo(
                child,
                int(match.group(1)),
                True,
                manifest.get("reason"),
                manifest.get("best_step"),
                manifest.get("saved_at"),
                manifest.get("model_identity"),
            )
        )
    return sorted(out, key=lambda info: info.step)


def latest_checkpoint(checkpoints_dir: Path) -> Path | None:
    complete = list_checkpoints(checkpoints_dir)
    return complete[-1].path if complete else None


def latest_in_folder(folder: Path) -> Path | None:
    """The latest complete checkpoint of a run folder (its ``checkpoints/``) or of a
    folder of checkpoints; None when there is none."""
    for candidate in (folder / "checkpoints", folder):
        latest = latest_checkpoint(candidate)
        if latest is not None:
            return latest
    return None


def best_checkpoint(checkpoints_dir: Path) -> Path:
    """The checkpoint at the best validation step recorded by the latest checkpoint."""
    complete = list_checkpoints(checkpoints_dir)
    if not complete:
        raise CheckpointError(f"{checkpoints_dir} holds no complete checkpoint")
    best = complete[-1].best_step
    if best is None:
        raise CheckpointError(
            f"{checkpoints_dir.parent.name} has no best checkpoint (no validation evaluation chose one); use :latest"
        )
    for info in complete:
        if info.step == best:
            return info.path
    raise CheckpointError(f"the best checkpoint (step {best}) of {checkpoints_dir.parent.name} is not on disk")
