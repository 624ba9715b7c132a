"""The runs directory as the app and the command line use it: scan the runs and their
checkpoints, resolve ``RUN:latest|best|STEP``, rename and delete a run, and show a path
relative to the runs directory. No torch, no numpy (the app's first frame lists the runs).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from minigpt_tui.engine.core.errors import ConfigError, MiniGPTError
from minigpt_tui.engine.core.files import remove_files_then_folder
from minigpt_tui.engine.formats.checkpoint_folder import STEP_DIR, checkpoint_own_files, list_checkpoints
from minigpt_tui.engine.session.run_control import CONTROL_FILE, LIVE_FILE, LIVE_STATES, LiveState, read_live
from minigpt_tui.engine.session.tensorboard import EVENT_FILE_PREFIX, RUN_SUBFOLDER
from minigpt_tui.engine.session.runs import (
    LOCK_FILE,
    RUN_FILE,
    RunDirectory,
    check_run_name,
    checkpoint_target,
    disk_use,
    lock_run,
    resolve_checkpoint,
    run_folders,
)


class RunStoreError(MiniGPTError):
    """A rename or delete that the file system refused (the message names the run)."""


@dataclass(frozen=True)
class CheckpointListing:
    path: Path
    step: int
    complete: bool
    reason: str | None
    best: bool


@dataclass(frozen=True)
class RunListing:
    name: str
    path: Path
    disk_bytes: int
    checkpoints: tuple[CheckpointListing, ...]
    preset: str | None = None
    live: bool = False  # a trainer is writing it now (it listens to its control file)
    changed_at: float = 0.0  # when its config, metrics or a checkpoint last changed (seconds since the epoch)
    unreadable: str | None = None  # why the run (or its checkpoints) could not be read, if so
    state: str | None = None  # how its trainer left it (live.json): finished, stopped, paused, failed, ended
    step: int = 0  # the updates made and planned when it was last written
    steps: int = 0

    @property
    def status(self) -> str | None:
        """How the run stands, in words (``stopped at 300 of 600``); None when no trainer said."""
        if self.state is None or self.live:
            return None
        return "finished" if self.state == "finished" else f"{self.state} at {self.step} of {self.steps}"

    @property
    def resumable(self) -> bool:
        """Its trainer left it before the end with a checkpoint to continue from."""
        return (not self.live and self.state in ("paused", "stopped", "ended") and self.step < self.steps
                and self.complete_checkpoints > 0)

    @property
    def complete_checkpoints(self) -> int:
        return sum(1 for c in self.checkpoints if c.complete)


@dataclass(frozen=True)
class VanishedCheckpoint:
    """A run's checkpoint folder that was open and is no longer in the run's listing:
    retention (or a hand) deleted it since; ``run`` is the run as listed now."""

    run: RunListing
    step: int


def vanished_checkpoint(opened: Path, listings: tuple[RunListing, ...]) -> VanishedCheckpoint | None:
    """``opened`` (a checkpoint folder of a run, or a file in one) when its run is listed
    but it is not among the run's checkpoints; None for anything else."""
    folder = opened if STEP_DIR.match(opened.name) else opened.parent
    match = STEP_DIR.match(folder.name)
    if match is None or folder.parent.name != "checkpoints":
        return None
    run = next((listing for listing in listings if listing.path == folder.parent.parent), None)
    if run is None or any(checkpoint.path == folder for checkpoint in run.checkpoints):
        return None
    return VanishedCheckpoint(run, int(match.group(1)))


def _run_listing(run: RunDirectory) -> RunListing:
    """One run's listing (OSError when its checkpoints folder cannot be read)."""
    infos = list_checkpoints(run.checkpoints, include_incomplete=True)
    complete = [info for info in infos if info.complete]
    best_step = complete[-1].best_step if complete else None
    checkpoints = tuple(
        CheckpointListing(info.path, info.step, info.complete, info.reason,
                          best_step is not None and info.step == best_step)
        for info in infos
    )
    live = read_live(run.path)
    return RunListing(run.name, run.path, _size_or_zero(run.path), checkpoints, _preset_of(run),
                      live is not None and live.listening, _changed_at(run.path, checkpoints),
                      **_live_fields(live))


def _live_fields(live: LiveState | None) -> dict[str, object]:
    """A listing's state, step and steps from the run's live record (when it names a state)."""
    if live is None or live.state not in LIVE_STATES:
        return {"state": None, "step": 0, "steps": 0}
    return {"state": live.state, "step": live.step, "steps": live.steps}


def _preset_of(run: RunDirectory) -> str | None:
    """The preset a run's config names (None when the config cannot be read)."""
    try:
        return str(run.read_json("config.json").get("preset"))
    except (OSError, ValueError, AttributeError):
        return None


def _size_or_zero(path: Path) -> int:
    try:
        return disk_use(path)
    except OSError:
        return 0


def _unreadable_listing(path: Path, err: OSError) -> RunListing:
    reason = (err.strerror or type(err).__name__).lower()
    return RunListing(path.name, path, 0, (), unreadable=f"unreadable: {reason}")


@dataclass(frozen=True)
class RunStore:
    root: Path

    def display(self, path: Path | str) -> str:
        """``path`` relative to the runs directory when it lies inside it."""
        try:
            return str(Path(path).relative_to(self.root))
        except ValueError:
            return str(path)

    def scan(self) -> tuple[RunListing, ...]:
        """Every run with its checkpoints and disk use, a run that cannot be read as a listing
        that says why (OSError only when the runs folder itself is unreadable)."""
        runs, unreadable = run_folders(self.root)
        listings = [_unreadable_listing(path, err) for path, err in unreadable]
        for run in runs:
            try:
                listings.append(_run_listing(run))
            except OSError as err:
                listings.append(_unreadable_listing(run.path, err))
        return tuple(sorted(listings, key=lambda listing: listing.name))

    def resolve(self, spec: str) -> Path:
        """A checkpoint folder from a path or ``RUN``, ``RUN:latest``, ``RUN:best``, ``RUN:STEP``."""
        return resolve_checkpoint(spec, self.root)

    def target(self, spec: str) -> Path:
        """A typed path as it is when it exists, else ``RUN``, ``RUN:latest|best|STEP``."""
        return checkpoint_target(spec, self.root)

    def is_run_folder(self, path: Path) -> bool:
        """A folder directly inside the runs directory holding a run's config."""
        return path.parent.resolve() == self.root.resolve() and (path / "config.json").is_file()

    def rename(self, run_path: Path, new_name: str) -> Path:
        check_run_name(new_name)
        with lock_run(run_path):  # refused, naming the holder, while another process trains it
            pass
        target = run_path.parent / new_name
        if target.exists():
            raise ConfigError(f"a run named '{new_name}' already exists")
        try:
            run_path.rename(target)
        except OSError as err:
            raise RunStoreError(f"cannot rename {run_path.name}: {err.strerror or err}") from None
        return target

    def delete(self, run_path: Path) -> None:
        """Delete a run folder; anything but a run folder of this directory is refused."""
        if not self.is_run_folder(run_path) or run_path.is_symlink():
            raise ConfigError(f"{run_path} is not a run folder of {self.root}")
        foreign = foreign_run_files(run_path)
        if foreign:
            raise RunStoreError(f"{run_path.name} holds files minigpt-tui did not write ({_listed(foreign)}): "
                                "move them out of the run folder first; nothing was deleted")
        with lock_run(run_path):  # refused, naming the holder, while another process trains it
            try:
                left = remove_run_files(run_path)
            except OSError as err:
                raise RunStoreError(f"cannot delete {run_path.name}: {err.strerror or err}") from None
        if left:  # a user's file arrived after the check above: it stays, with the folders around it
            raise RunStoreError(f"{run_path.name}: minigpt-tui's files were deleted, but the folder stays: it holds "
                                f"files minigpt-tui did not write ({_listed(left)})")


# Files of a run folder named where no module owns the name (the others come from their owners).
OTHER_RUN_FILES = frozenset({"config.json", "identities.json", "warm_start.json", "metrics.jsonl", "metrics.csv",
                             "checkpoints", "tensorboard"})


def run_files() -> frozenset[str]:
    """What a run folder holds at its top level when minigpt-tui alone wrote it."""
    return OTHER_RUN_FILES | {RUN_FILE, LOCK_FILE, CONTROL_FILE, LIVE_FILE}


def _listed(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def foreign_run_files(run_path: Path) -> list[str]:
    """Names in a run folder (its ``checkpoints/``, each checkpoint folder and its
    ``tensorboard/``) that minigpt-tui does not write."""
    try:
        return (_foreign_top_names(run_path) + _foreign_checkpoint_names(run_path / "checkpoints")
                + _foreign_event_names(run_path / RUN_SUBFOLDER))
    except OSError:
        return []


def _is_run_file(name: str) -> bool:
    """A top-level name of a run folder that minigpt-tui writes (or its temporary)."""
    ours = run_files()
    return (name in ours or any(name.startswith(f".{own}.") for own in ours)
            or re.fullmatch(r"\.lock-rank-\d+", name) is not None)


def _foreign_top_names(run_path: Path) -> list[str]:
    """Top-level names of a run folder that minigpt-tui does not write."""
    return [p.name for p in sorted(run_path.iterdir()) if not _is_run_file(p.name)]


_CHECKPOINT_FOLDER = re.compile(r"step-\d+|\.step-\d+\..*")


def _real_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _foreign_checkpoint_names(checkpoints: Path) -> list[str]:
    """What a run's ``checkpoints/`` holds besides checkpoint folders and their own files
    (``checkpoints`` itself when it is there but not a real folder)."""
    if _real_folder(checkpoints):
        names = []
        for p in sorted(checkpoints.iterdir()):
            if not (_CHECKPOINT_FOLDER.fullmatch(p.name) and _real_folder(p)):
                names.append(f"checkpoints/{p.name}")
                continue
            own = checkpoint_own_files(p)
            names += [f"checkpoints/{p.name}/{q.name}" for q in sorted(p.iterdir()) if not own(q.name) or _real_folder(q)]
        return names
    if checkpoints.exists():
        return ["checkpoints"]
    return []


def _foreign_event_names(events: Path) -> list[str]:
    """What a run's own ``tensorboard/`` holds besides event files."""
    if not _real_folder(events):
        return []
    return [f"{RUN_SUBFOLDER}/{p.name}" for p in sorted(events.iterdir())
            if not p.name.startswith(EVENT_FILE_PREFIX) or _real_folder(p)]


def remove_run_files(run_path: Path) -> list[str]:
    """Remove what minigpt-tui wrote in a run folder, file by file (its own files, each
    checkpoint's own files, its event files), then each folder that leaves empty and the
    run folder last. Never recursive beyond that layout: returns what stays (relative
    names: a user's files, and the folders that hold them). OS errors are raised."""
    left: list[str] = []
    for name in sorted(os.listdir(run_path)):
        left += _remove_run_entry(run_path / name)
    if not left:
        remove_files_then_folder(run_path, lambda _name: False)
    return left


def _remove_run_entry(path: Path) -> list[str]:
    """One entry of a run folder removed when it is ours: what stays of it."""
    name = path.name
    if name == "checkpoints" and _real_folder(path):
        return _remove_checkpoint_folders(path)
    if name == RUN_SUBFOLDER and _real_folder(path):
        return [f"{name}/{n}" for n in remove_files_then_folder(path, lambda n: n.startswith(EVENT_FILE_PREFIX))]
    if not _is_run_file(name):
        return [name]
    if _real_folder(path):  # a hidden work folder of ours (an export being written, say)
        return [f"{name}/{n}" for n in remove_files_then_folder(path)]
    path.unlink(missing_ok=True)
    return []


def _remove_checkpoint_folders(checkpoints: Path) -> list[str]:
    left: list[str] = []
    for name in sorted(os.listdir(checkpoints)):
        path = checkpoints / name
        if _CHECKPOINT_FOLDER.fullmatch(name) and _real_folder(path):
            left += [f"checkpoints/{name}/{n}" for n in remove_files_then_folder(path, checkpoint_own_files(path))]
        else:
            left.append(f"checkpoints/{name}")
    if not left:
        remove_files_then_folder(checkpoints, lambda _name: False)
    return left


def _changed_at(run_path: Path, checkpoints: tuple[CheckpointListing, ...]) -> float:
    """The latest modification time among a run's config, metrics and checkpoint folders."""
    times = []
    for path in (run_path / "config.json", run_path / "metrics.jsonl", *(c.path for c in checkpoints)):
        try:
            times.append(path.stat().st_mtime)
        except OSError:
            continue
    return max(times, default=0.0)
