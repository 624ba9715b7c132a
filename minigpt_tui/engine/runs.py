"""The runs directory: one folder per run with its resolved config, identities, metrics
and checkpoints. The default location is platformdirs' user data dir; ``--runs-dir`` or
the ``MINIGPT_TUI_RUNS_DIR`` environment variable override it."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minigpt_tui.engine.errors import ConfigError

ENV_RUNS_DIR = "MINIGPT_TUI_RUNS_DIR"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def default_runs_dir() -> Path:
    env = os.environ.get(ENV_RUNS_DIR)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return platformdirs.user_data_path("minigpt-tui", appauthor=False) / "runs"


def resolve_runs_dir(runs_dir: str | Path | None) -> Path:
    return Path(runs_dir).expanduser() if runs_dir else default_runs_dir()


def check_run_name(name: str) -> str:
    if not _NAME.match(name):
        raise ConfigError(
            f"invalid run name '{name}': use letters, digits, '.', '_' or '-' (at most 100)"
        )
    return name


@dataclass(frozen=True)
class RunDirectory:
    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @staticmethod
    def create(runs_dir: Path, name: str | None, preset: str) -> "RunDirectory":
        runs_dir.mkdir(parents=True, exist_ok=True)
        if name is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            base = f"{preset}-{stamp}"
            name, n = base, 1
            while (runs_dir / name).exists():
                n += 1
                name = f"{base}-{n}"
        check_run_name(name)
        path = runs_dir / name
        if path.exists():
            raise ConfigError(f"run '{name}' already exists in {runs_dir}")
        path.mkdir()
        return RunDirectory(path)

    def write_json(self, filename: str, data: Any) -> None:
        target = self.path / filename
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", "utf-8")
        os.replace(tmp, target)

    def read_json(self, filename: str) -> Any:
        return json.loads((self.path / filename).read_text("utf-8"))

    def append_metric(self, record: dict[str, Any]) -> None:
        with self.metrics_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")

    def metrics(self) -> list[dict[str, Any]]:
        if not self.metrics_path.exists():
            return []
        out = []
        for line in self.metrics_path.read_text("utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a torn last line after a crash: keep what precedes it
        return out


def list_runs(runs_dir: Path) -> list[RunDirectory]:
    if not runs_dir.is_dir():
        return []
    return sorted(
        (RunDirectory(p) for p in runs_dir.iterdir() if p.is_dir() and (p / "config.json").exists()),
        key=lambda r: r.name,
    )


def disk_use(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def resolve_checkpoint(spec: str, runs_dir: Path) -> Path:
    """A checkpoint folder from ``RUN:latest``, ``RUN:best``, ``RUN:STEP``, a run name (its
    latest), a run folder, a checkpoint folder, or a file inside one."""
    from minigpt_tui.engine.checkpoint.directory import (
        MANIFEST,
        STEP_DIR,
        best_checkpoint,
        checkpoint_name,
        latest_checkpoint,
        latest_in_folder,
        list_checkpoints,
    )
    from minigpt_tui.engine.errors import CheckpointError

    path = Path(spec).expanduser()
    if path.exists():
        if path.is_file():
            if (path.parent / MANIFEST).exists() or STEP_DIR.match(path.parent.name):
                return path.parent
            raise CheckpointError(f"{path} is a file; a checkpoint is a folder with {MANIFEST}")
        if (path / MANIFEST).exists() or STEP_DIR.match(path.name):
            return path
        latest = latest_in_folder(path)
        if latest is not None:
            return latest
        raise CheckpointError(f"{path} holds no complete checkpoint")
    run, _, which = spec.partition(":")
    which = which or "latest"
    run_path = Path(runs_dir) / run
    if not _NAME.match(run) or not run_path.is_dir():
        raise CheckpointError(f"no checkpoint '{spec}': no such path, and no run named '{run}' in {runs_dir}")
    checkpoints = RunDirectory(run_path).checkpoints
    if which == "latest":
        latest = latest_checkpoint(checkpoints)
        if latest is None:
            raise CheckpointError(f"run '{run}' has no complete checkpoint")
        return latest
    if which == "best":
        return best_checkpoint(checkpoints)
    step_text = which.removeprefix("step-")
    if step_text.isdigit():
        wanted = checkpoints / checkpoint_name(int(step_text))
        if any(info.path == wanted for info in list_checkpoints(checkpoints)):
            return wanted
        raise CheckpointError(f"run '{run}' has no complete checkpoint at step {int(step_text)}")
    raise CheckpointError(f"'{which}' is not latest, best or a step number (in '{spec}')")


def resolve_model_file(spec: str, runs_dir: Path) -> Path:
    """A ``model.safetensors`` path from a model file, a checkpoint folder or a run spec."""
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    return resolve_checkpoint(spec, runs_dir) / "model.safetensors"
