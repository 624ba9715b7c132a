"""Helpers shared by the checkpoint tests: small trainers, file surgery, disk snapshots."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from minigpt_tui.engine.formats.checkpoint_folder import MANIFEST
from minigpt_tui.engine.formats.safetensors_read import load_file
from minigpt_tui.engine.formats.safetensors_write import json_metadata, write_safetensors
from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.training.trainer import Trainer, TrainingSetup, apply_precision


def make_trainer(preset: str = "tiny", updates: int = 0, **overrides: dict[str, Any]) -> Trainer:
    config = load_config(preset, overrides=overrides or None)
    apply_precision(config.train)
    trainer = Trainer(TrainingSetup.build(config, load_corpus(config.corpus)))
    for _ in range(updates):
        trainer.update()
    return trainer


def rewrite_metadata(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite a safetensors file with its JSON metadata records edited, tensors kept."""
    loaded = load_file(path)
    records = {key: json.loads(text) for key, text in loaded.metadata.items()}
    edit(records)
    tensors = [(e.name, loaded.tensor(e.name).clone()) for e in loaded.header.entries]
    write_safetensors(path, tensors, json_metadata(records))


def refresh_manifest(folder: Path) -> None:
    """Make the manifest agree with the files again (so only deeper checks can object)."""
    manifest = json.loads((folder / MANIFEST).read_text())
    for name in manifest["files"]:
        data = (folder / name).read_bytes()
        manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def snapshot(root: Path) -> dict[str, Any]:
    """Every file and folder under ``root`` with its bytes' digest and mtime."""
    out: dict[str, Any] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_dir():
            out[key] = "dir"
        else:
            out[key] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return out


def flip_bit(path: Path, offset: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))


def data_offset(path: Path) -> int:
    """Where the data section of a safetensors file starts."""
    with path.open("rb") as fh:
        return 8 + int.from_bytes(fh.read(8), "little")
