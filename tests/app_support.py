"""Shared by the Checkpoints and Generation screen tests: a runs directory made through the
engine (the tiny preset, 4 updates, checkpoints after updates 2 and 4), foreign and
malformed files, the app at a fixed size, and a way to wait until its workers are done."""

from __future__ import annotations

import asyncio
import functools
import json
import shutil
import struct
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import safetensors.numpy
from textual.widgets import Input

from minigpt_tui.app import LaunchSettings, MiniGPTApp
from minigpt_tui.screens.generation import GenerationScreen
from minigpt_tui.engine.training.checkpoints import Checkpointer
from minigpt_tui.engine.formats.checkpoint_folder import MANIFEST
from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.session.runs import RunDirectory
from minigpt_tui.engine.training.trainer import Trainer, TrainingSetup, apply_precision

FROZEN_SAVED_AT = 1767225600.0  # manifests' save time, fixed so that sizes never change by a digit


@dataclass(frozen=True)
class SavedRuns:
    """A pristine runs directory; each test works on its own copy (:meth:`copy_to`)."""

    root: Path
    run: str = "tiny-a"

    def copy_to(self, target: Path) -> Path:
        runs = target / "runs"
        shutil.copytree(self.root / "runs", runs)
        shutil.copytree(self.root / "files", target / "files")
        return runs


def build_saved_runs(root: Path) -> SavedRuns:
    """Train the tiny preset 4 updates in this process and save after updates 2 and 4."""
    runs = root / "runs"
    config = load_config("tiny")
    apply_precision(config.train)
    trainer = Trainer(TrainingSetup.build(config, load_corpus(config.corpus)))
    run = RunDirectory.create(runs, "tiny-a", config.preset)
    run.write_json("config.json", config.to_dict())
    checkpointer = Checkpointer(run, keep_last=10)
    for _ in range(4):
        trainer.update()
        if trainer.step in (2, 4):
            checkpointer.save(trainer, "interval")
    for manifest in run.checkpoints.glob(f"step-*/{MANIFEST}"):
        data = json.loads(manifest.read_text())
        data["saved_at"] = FROZEN_SAVED_AT
        manifest.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    # A second run with no checkpoint yet (a run that has only started).
    empty = RunDirectory.create(runs, "tiny-empty", config.preset)
    empty.write_json("config.json", config.to_dict())
    files = root / "files"
    files.mkdir()
    write_foreign_files(files)
    return SavedRuns(root)


def write_foreign_files(folder: Path) -> None:
    """A safetensors file made by the safetensors library (not by minigpt-tui) and malformed ones."""
    safetensors.numpy.save_file(
        {"encoder.weight": np.arange(12, dtype=np.float32).reshape(3, 4), "encoder.bias": np.zeros(4, np.float16)},
        str(folder / "foreign.safetensors"),
        metadata={"producer": "another tool"},
    )
    (folder / "garbage.safetensors").write_bytes(b"\xff" * 64)
    truncated = folder / "truncated.safetensors"
    truncated.write_bytes((folder / "foreign.safetensors").read_bytes()[:-10])


def write_sparse_large_file(path: Path, side: int = 16384) -> int:
    """A valid safetensors file declaring one F32 [side, side] tensor whose data is a hole
    in a sparse file: opening it must read the header alone. Returns the declared bytes."""
    nbytes = side * side * 4
    header = json.dumps({"big": {"dtype": "F32", "shape": [side, side], "data_offsets": [0, nbytes]}})
    header_bytes = header.encode() + b" " * (-len(header) % 8)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(header_bytes)) + header_bytes)
        fh.truncate(8 + len(header_bytes) + nbytes)
    return nbytes


def run_async(test: Callable[..., Coroutine]) -> Callable[..., None]:
    """Run an ``async def`` test (a Pilot session) in its own event loop, so the tests need
    no async plugin; pytest still sees the test's own fixtures through ``__wrapped__``."""

    @functools.wraps(test)
    def run(*args, **kwargs) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def make_app(runs_dir: Path) -> MiniGPTApp:
    return MiniGPTApp(LaunchSettings(runs_dir=runs_dir, preset="tiny"), preload_engine=False,
                      clock=lambda: 1000.0, wall_clock=lambda: FROZEN_SAVED_AT)


async def settle(pilot, rounds: int = 6) -> None:
    """Let every worker finish and every message it posted be handled (a handled message may
    start another worker, hence the rounds)."""
    for _ in range(rounds):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        if not any(worker.is_running for worker in pilot.app.workers):
            await pilot.pause()
            if not any(worker.is_running for worker in pilot.app.workers):
                return


def record_notifications(app) -> list[tuple[str, str]]:
    """Wrap ``app.notify`` so a test can read every (message, severity) it was given."""
    seen: list[tuple[str, str]] = []
    original = app.notify

    def notify(message, **options):
        seen.append((str(message), str(options.get("severity", "information"))))
        return original(message, **options)

    app.notify = notify
    return seen


def chosen_ids(screen: GenerationScreen) -> list[int]:
    """The ids the Generation screen has chosen so far, in order."""
    return [d.chosen.id for d in screen.view.decisions]


def tree_snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and mtime (what a failed action must not change)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def plain(renderable) -> str:
    """What a rich renderable reads as, without styles (wide enough not to wrap)."""
    import io

    from rich.console import Console

    console = Console(width=400, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def static_text(parent, selector: str) -> str:
    """The plain text of the Static at ``selector`` under ``parent``."""
    from textual.widgets import Static

    return plain(parent.query_one(selector, Static).content)


# -- the Generation screen ---------------------------------------------------------------------
def saved_model_file(runs: Path, step: int = 4) -> Path:
    """The model file of ``tiny-a``'s checkpoint at ``step`` in runs made by build_saved_runs."""
    return runs / "tiny-a" / "checkpoints" / f"step-{step:06d}" / "model.safetensors"


async def press_settled(pilot, *pressed: str) -> None:
    """Press each key and let the screen settle after it."""
    for key in pressed:
        await pilot.press(key)
        await settle(pilot, rounds=2)


async def open_generation(pilot, *, model: str | None = "tiny-a:latest", prompt: str = "ab") -> GenerationScreen:
    """Switch to the Generation screen, set the prompt and load ``model`` (None: leave it)."""
    await pilot.press("g")
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, GenerationScreen)
    screen.query_one("#prompt", Input).value = prompt
    if model is not None:
        field = screen.query_one("#model", Input)
        field.value = model
        field.focus()
        await pilot.press("enter")
        await settle(pilot)
    return screen
