"""The runs directory as the app and the command line use it: scan the runs and their
checkpoints, resolve ``RUN:latest|best|STEP``, rename and delete a run, and show a path
relative to the runs directory. No torch, no numpy (the app's first frame lists the runs).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from minigpt_tui.engine.core.errors import ConfigError, MiniGPTError
from minigpt_tui.engine.formats.checkpoint_folder import STEP_DIR, list_checkpoints
from minigpt_tui.engine.session.run_control import CONTROL_FILE, LIVE_FILE, read_live
from minigpt_tui.engine.session.runs import (
    LOCK_FILE,
    RUN_FILE,
    check_run_name,
    checkpoint_target,
    disk_use,
    list_runs,
    lock_run,
    resolve_checkpoint,
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
        """Every run with its checkpoints and disk use (OSError when the folder is unreadable)."""
        listings = []
        for run in list_runs(self.root):
            infos = list_checkpoints(run.checkpoints, include_incomplete=True)
            complete = [info for info in infos if info.complete]
            best_step = complete[-1].best_step if complete else None
            checkpoints = tuple(
                CheckpointListing(info.path, info.step, info.complete, info.reason,
                                  best_step is not None and info.step == best_step)
                for info in infos
            )
            try:
                preset = str(run.read_json("config.json").get("preset"))
            except (OSError, ValueError, AttributeError):
                preset = None
            try:
                size = disk_use(run.path)
            except OSError:
                size = 0
            live = read_live(run.path)
            listings.append(RunListing(run.name, run.path, size, checkpoints, preset,
                                       live is not None and live.listening, _changed_at(run.path, checkpoints)))
        return tuple(listings)

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
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise RunStoreError(f"{run_path.name} holds files minigpt-tui did not write ({shown}): "
                                "move them out of the run folder first; nothing was deleted")
        with lock_run(run_path):  # refused, naming the holder, while another process trains it
            pass
        try:
            shutil.rmtree(run_path)
        except OSError as err:
            raise RunStoreError(f"cannot delete {run_path.name}: {err.strerror or err}") from None


# Files of a run folder named where no module owns the name (the others come from their owners).
OTHER_RUN_FILES = frozenset({"config.json", "identities.json", "warm_start.json", "metrics.jsonl", "metrics.csv",
                             "checkpoints", "tensorboard"})


def run_files() -> frozenset[str]:
    """What a run folder holds at its top level when minigpt-tui alone wrote it."""
    return OTHER_RUN_FILES | {RUN_FILE, LOCK_FILE, CONTROL_FILE, LIVE_FILE}


def foreign_run_files(run_path: Path) -> list[str]:
    """Names in a run folder (and its ``checkpoints/``) that minigpt-tui does not write."""
    try:
        return _foreign_top_names(run_path) + _foreign_checkpoint_names(run_path / "checkpoints")
    except OSError:
        return []


def _foreign_top_names(run_path: Path) -> list[str]:
    """Top-level names of a run folder that minigpt-tui does not write."""
    ours = run_files()
    return [p.name for p in sorted(run_path.iterdir())
            if p.name not in ours and not any(p.name.startswith(f".{name}.") for name in ours)
            and not re.fullmatch(r"\.lock-rank-\d+", p.name)]


def _foreign_checkpoint_names(checkpoints: Path) -> list[str]:
    """What a run's ``checkpoints/`` holds besides step folders (``checkpoints`` itself when
    it is there but not a real folder)."""
    step = re.compile(r"step-\d+|\.step-\d+\..*")
    if checkpoints.is_dir() and not checkpoints.is_symlink():
        return [f"checkpoints/{p.name}" for p in sorted(checkpoints.iterdir())
                if not (step.fullmatch(p.name) and p.is_dir() and not p.is_symlink())]
    if checkpoints.exists():
        return ["checkpoints"]
    return []


def _changed_at(run_path: Path, checkpoints: tuple[CheckpointListing, ...]) -> float:
    """The latest modification time among a run's config, metrics and checkpoint folders."""
    times = []
    for path in (run_path / "config.json", run_path / "metrics.jsonl", *(c.path for c in checkpoints)):
        try:
            times.append(path.stat().st_mtime)
        except OSError:
            continue
    return max(times, default=0.0)
