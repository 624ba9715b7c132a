"""A model spec, parsed once where it is typed.

What a user names as the model to open or the checkpoint to read is one string: a model
file, a checkpoint or run folder, a run (``RUN``, ``RUN:latest|best|STEP``), a transformers
model folder, a GGUF file or a nanoGPT checkpoint (``.pt``, ``.pth``, ``.ckpt``). ``parse``
reads it once: the length guard, ``~`` expansion and the kind are decided here, and the
later steps (:mod:`.opening`, :mod:`.runs`) read the fields instead of the string.

An existing path wins over a run of the same name, and a folder that is a transformers
folder opens as one even when it is also a checkpoint folder (a checkpoint is still
resolved from it as a folder of ours).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from pathlib import Path

from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.core.files import path_exists

MAX_SPEC_CHARS = 4096  # longer is no path and no RUN:WHICH; refused before any file is looked at
TORCH_SUFFIXES = (".pt", ".pth", ".ckpt")
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_STEP = re.compile(r"[0-9]{1,18}")


class SpecKind(enum.StrEnum):
    MODEL_FILE = "model file"  # an existing file that is none of the others: ours, or a file in a checkpoint
    FOLDER = "folder"  # an existing folder: a checkpoint, a run folder or a folder holding checkpoints
    RUN = "run"  # RUN or RUN:latest|best|STEP in the runs directory
    TRANSFORMERS = "transformers folder"
    GGUF = "GGUF file"
    NANOGPT = "nanoGPT checkpoint"


FOREIGN_KINDS = frozenset({SpecKind.TRANSFORMERS, SpecKind.GGUF, SpecKind.NANOGPT})


@dataclass(frozen=True)
class ModelSpec:
    """A parsed spec. ``path`` is the expanded path, or the run's folder for ``RUN``;
    ``which`` is ``latest``, ``best`` or ``step`` for a run (``step`` then holds the
    number). ``str(spec)`` is the text as typed, for messages."""

    text: str
    kind: SpecKind
    path: Path
    run: str | None = None
    which: str | None = None
    step: int | None = None

    def __str__(self) -> str:
        return self.text

    @property
    def is_foreign(self) -> bool:
        """A model from elsewhere (a transformers folder, a GGUF file, a nanoGPT checkpoint)."""
        return self.kind in FOREIGN_KINDS


def parse(text: str, runs_dir: Path) -> ModelSpec:
    """The spec ``text`` names, ``RUN`` looked up in ``runs_dir``. Refused in one line
    (CheckpointError): a text too long to be a path, a name that is neither an existing
    path nor a run, and a run's checkpoint that is not ``latest``, ``best`` or a step."""
    if len(text) > MAX_SPEC_CHARS:
        raise CheckpointError(f"the checkpoint '{text[:40]}…' is {len(text)} characters long: not a path or RUN:WHICH")
    path = _expanded(text)
    if path_exists(path):
        return ModelSpec(text, path_kind(path), path)
    return _run_spec(text, Path(runs_dir))


def as_spec(spec: ModelSpec | str, runs_dir: Path | None) -> ModelSpec:
    """``spec`` as a ModelSpec: one already parsed as it is, a string parsed against
    ``runs_dir`` (callers that still hold the string keep working)."""
    if isinstance(spec, ModelSpec):
        return spec
    if runs_dir is None:
        raise TypeError("a spec given as text needs the runs directory to be parsed against")
    return parse(spec, runs_dir)


def path_kind(path: Path) -> SpecKind:
    """The kind of model an existing path holds."""
    from minigpt_tui.engine.formats.hf_import import (  # deferred: off the first frame
        is_hf_folder,
    )

    if is_hf_folder(path):
        return SpecKind.TRANSFORMERS
    if path.name.lower().endswith(".gguf") and path.is_file():
        return SpecKind.GGUF
    if path.suffix in TORCH_SUFFIXES and path.is_file():
        return SpecKind.NANOGPT
    return SpecKind.FOLDER if path.is_dir() else SpecKind.MODEL_FILE


def foreign_spec(text: str) -> ModelSpec | None:
    """The spec of a model from elsewhere ``text`` names, refusing nothing: None for ours,
    for a missing path and for a text too long to be a path."""
    if len(text) > MAX_SPEC_CHARS:
        return None
    path = _expanded(text)
    if not path_exists(path):
        return None
    spec = ModelSpec(text, path_kind(path), path)
    return spec if spec.is_foreign else None


def _expanded(text: str) -> Path:
    """``text`` as a path, ``~`` expanded (left as it is for an unknown user: it is then no
    existing path, and the refusal names the text as typed)."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        return Path(text)


def _run_spec(text: str, runs_dir: Path) -> ModelSpec:
    """``RUN[:latest|best|STEP]``: the run must exist before its checkpoint is read."""
    run, _, which = text.partition(":")
    which = which or "latest"
    run_path = runs_dir / run
    if not RUN_NAME.match(run) or not run_path.is_dir():
        raise CheckpointError(f"no checkpoint '{text}': no such path, and no run named '{run}' in {runs_dir}")
    if which in ("latest", "best"):
        return ModelSpec(text, SpecKind.RUN, run_path, run, which)
    step_text = which.removeprefix("step-")
    if not _STEP.fullmatch(step_text):
        raise CheckpointError(f"'{which}' is not latest, best or a step number (in '{text}')")
    return ModelSpec(text, SpecKind.RUN, run_path, run, "step", int(step_text))
