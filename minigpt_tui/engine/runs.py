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
