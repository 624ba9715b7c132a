"""The attack list's cases and the helpers that build them. Each ``round*_*.py`` module here
holds one topic's cases as a ``cases()`` function; ``ROUNDS`` lists them for
``tools/attack_inputs.py``."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[Path], list[str]]  # builds what the case needs, returns the arguments
    may_change: tuple[str, ...] = ()  # folders (relative) the command is allowed to change


def precious(root: Path) -> None:
    (root / "home" / "projects").mkdir(parents=True)
    (root / "home" / "projects" / "thesis.tex").write_text("chapter one")
    (root / "home" / "photos").mkdir()
    (root / "home" / "photos" / "cat.jpg").write_bytes(b"\xff\xd8 not really")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def link(path: Path, target: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def hf(root: Path, config: Callable[[Path], object]) -> Path:
    folder = root / "hf"
    folder.mkdir()
    from safetensors.numpy import save_file
    import numpy as np

    save_file({"transformer.wte.weight": np.zeros((4, 2), dtype=np.float32)}, str(folder / "model.safetensors"))
    config(folder / "config.json")
    return folder


def _rounds() -> list[Callable[[], list[Case]]]:
    here = Path(__file__).resolve().parent
    return [importlib.import_module(f"attack_cases.{path.stem}").cases
            for path in sorted(here.glob("round*.py"))]


ROUNDS = _rounds()
