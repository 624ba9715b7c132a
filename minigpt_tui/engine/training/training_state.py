"""The training-state file (``training.safetensors``): with the model file, everything that
decides the next update.

Tensors hold the values (our seeds, counters and cursors as U64, generator states as U8,
settings whose bits matter as F64; torch's AdamW state in its own dtypes). The metadata
holds the resolved config, identities, the environment envelope, layouts that say what
each tensor column means, and a readable copy of the state records for header-only
inspection. The tensors are the truth; the readable copy is checked against them on load.
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy
import safetensors

from minigpt_tui import __version__
from minigpt_tui.engine.core.config import RunConfig, identity_form
from minigpt_tui.engine.core.devices import choose_device
from minigpt_tui.engine.core.errors import CheckpointError, ConfigError, ResumeRefused
from minigpt_tui.engine.core.tensors import DigestScheme, tensor_digest
from minigpt_tui.engine.formats.checkpoint_folder import (
    TRAINING_STATE_FORMAT as FORMAT_NAME,
)
from minigpt_tui.engine.formats.checkpoint_folder import (
    TRAINING_STATE_VERSION as FORMAT_VERSION,
)
from minigpt_tui.engine.formats.portable import file_records, tensor_records
from minigpt_tui.engine.formats.safetensors_read import (
    ExpectedFile,
    LoadedFile,
    load_file,
    parse_record,
)
from minigpt_tui.engine.training.state_parts import (
    STATE_PARTS,
    OptimizerPart,
    SavedTensors,
    layouts,
)

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.core.config import RunConfig, TrainConfig
    from minigpt_tui.engine.training.trainer import Trainer

# Checkpoint and stopping policy: how often and how many to keep, when to call a run
# diverged. It never changes the trajectory, so it is left out of the config identity.
POLICY_SETTINGS = ("save_every", "keep_last", "divergence_patience")
# Where the run executes: recorded in the environment envelope, not in the config identity.
PLACEMENT_SETTINGS = ("device",)
ENVELOPE_KEYS = (
    "python",
    "python_implementation",
    "torch",
    "numpy",
    "safetensors",
    "minigpt_tui",
    "precision",
    "dtype",
    "threads",
    "deterministic",
    "platform",
    "device",
)
# What an envelope saved before a key existed meant by it: every earlier run was on the CPU.
ENVELOPE_DEFAULTS = {"device": "cpu"}

# -- identities and the envelope --------------------------------------------------------------
def config_identity(config: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the resolved config, checkpoint policy left out."""
    data = identity_form(config)
    for name in POLICY_SETTINGS + PLACEMENT_SETTINGS:
        data.get("train", {}).pop(name, None)
    text = json.dumps(data, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def current_envelope(train: "TrainConfig", *, measured: bool = True, device_kind: str | None = None) -> dict[str, Any]:
    """The execution environment. ``measured``: threads and determinism as torch has them
    now; otherwise as :func:`apply_precision` will set them for ``train``. ``device_kind``:
    where the tensors live (default: where ``train.device`` resolves on this machine)."""
    import torch  # deferred: imports torch


    if device_kind is None:
        device_kind = choose_device(train.device).kind

    if measured:
        threads = torch.get_num_threads()
        deterministic = torch.are_deterministic_algorithms_enabled()
    else:
        threads = train.effective_threads.count
        deterministic = train.precision_kind.deterministic
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "safetensors": safetensors.__version__,
        "minigpt_tui": __version__,
        "precision": train.precision,
        "dtype": train.precision_kind.dtype_name,
        "threads": threads,
        "deterministic": deterministic,
        "platform": f"{platform.system()}-{platform.machine()}",
        "device": device_kind,
    }


def envelope_differences(saved: dict[str, Any], now: dict[str, Any],
                         keys: tuple[str, ...] = ENVELOPE_KEYS) -> list[str]:
    return [
        f"{key}: saved {saved.get(key, ENVELOPE_DEFAULTS.get(key))!r}, now {now.get(key)!r}"
        for key in keys
        if saved.get(key, ENVELOPE_DEFAULTS.get(key)) != now.get(key)
    ]


def compared_keys(train: "TrainConfig") -> tuple[str, ...]:
    """The envelope keys a resume compares. An automatic thread count (``threads = 0``
    outside exact precision) is what the user asked for on both sides: the count the saving
    process had tuned to is a record of that machine's load, not a change."""
    if train.effective_threads.auto:
        return tuple(key for key in ENVELOPE_KEYS if key != "threads")
    return ENVELOPE_KEYS


# The tensors' content digest: the scheme's name first, then the tensors in name order.
CONTENT_DIGEST = DigestScheme(b"minigpt-tui/training-state-content/v1\0")


# -- capture ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Continuation:
    """Whether a later resume may promise bitwise continuation, and why not."""

    bitwise_promised: bool = True
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"bitwise_promised": self.bitwise_promised, "notes": list(self.notes)}


def continuation_of(trainer: "Trainer") -> Continuation:
    saved = getattr(trainer, "checkpoint_continuation", None)
    if isinstance(saved, Continuation):
        base = saved
    else:
        base = Continuation()
    if not trainer.config.train.precision_kind.bitwise and base.bitwise_promised:
        return Continuation(False, base.notes + ("fast precision makes no bitwise promise",))
    return base


@dataclass(frozen=True)
class CapturedState:
    """A trainer's state as tensors and records, before the digests that seal it."""

    tensors: list[tuple[str, "torch.Tensor"]]
    records: dict[str, Any]  # every metadata record except the model identity and content digest

    def content_digest(self) -> str:
        return tensor_digest(CONTENT_DIGEST, tensor_records(self.tensors))

    def metadata(self, model_identity: str, content_sha256: str) -> dict[str, Any]:
        identities = {**self.records["identities"], "model": model_identity}
        return {**self.records, "identities": identities, "content_sha256": content_sha256}


def capture_training_state(
    trainer: "Trainer", model_identity: str
) -> tuple[list[tuple[str, "torch.Tensor"]], dict[str, Any]]:
    """Tensors and metadata records of the trainer's state (see :func:`capture_state`)."""
    captured = capture_state(trainer)
    return captured.tensors, captured.metadata(model_identity, captured.content_digest())


def capture_state(trainer: "Trainer") -> CapturedState:
    """The trainer's state: each part of :data:`STATE_PARTS` in turn. Refuses
    (CaptureRefused) unless the trainer is between complete updates; it never clears or
    changes anything. The tensors are the live ones (no copy): write them before the next
    update."""
    trainer.require_update_boundary()
    config = trainer.config
    tensors: list[tuple[str, torch.Tensor]] = []
    records: dict[str, Any] = {}
    for part in STATE_PARTS:
        if not part.applies(trainer):
            continue
        captured = part.capture(trainer)
        tensors += captured.tensors
        if captured.record is not None:
            records.setdefault(str(part.group), {}).update(captured.record)
    config_record = config.to_dict()
    identities = {
        "config": config_identity(config_record),
        "corpus": trainer.setup.corpus.identity,
        "tokenizer": trainer.tokenizer.identity,
    }
    metadata = {
        "format": {"name": FORMAT_NAME, "version": FORMAT_VERSION},
        "config": config_record,
        "identities": identities,
        "envelope": current_envelope(config.train, measured=True, device_kind=trainer.placement.kind),
        "continuation": continuation_of(trainer).to_json(),
        "optimizer": OptimizerPart.layout(trainer),
        "layouts": layouts(),
        "records": records,
        "producer": {"package": "minigpt-tui", "version": __version__},
    }
    return CapturedState(tensors, metadata)


# -- reading -----------------------------------------------------------------------------------
_REQUIRED_RECORDS = ("format", "config", "identities", "envelope", "continuation", "optimizer", "layouts", "records", "content_sha256")


@dataclass(frozen=True)
class TrainingState:
    """A parsed, verified training-state file (read-only until applied to a trainer)."""

    path: Path
    metadata: dict[str, Any]
    tensors: dict[str, Any]
    sha256: str
    size: int

    @property
    def config_dict(self) -> dict[str, Any]:
        return self.metadata["config"]

    @property
    def identities(self) -> dict[str, str]:
        return self.metadata["identities"]

    @property
    def envelope(self) -> dict[str, Any]:
        return self.metadata["envelope"]

    @property
    def step(self) -> int:
        return SavedTensors(self.path, self.tensors).step

    @property
    def continuation(self) -> Continuation:
        c = self.metadata["continuation"]
        return Continuation(bool(c.get("bitwise_promised")), tuple(c.get("notes", ())))


_MALFORMED = (KeyError, TypeError, AttributeError, ValueError, IndexError)


def read_training_state(
    path: Path | str, expect: ExpectedFile | None = None, *, verify_content: bool | None = None
) -> TrainingState:
    """Read and check a training-state file. Its content digest is recomputed unless
    ``verify_content`` is False: a manifest re-signed after an edit vouches for nothing."""
    path = Path(path)
    loaded = load_file(path, expect)
    if verify_content is None:
        verify_content = True
    try:
        return parse_training_state(path, loaded, verify_content=verify_content)
    except _MALFORMED as err:
        raise CheckpointError(f"{path}: malformed training-state file ({type(err).__name__}: {err})") from None


def parse_training_state(path: Path, loaded: LoadedFile, *, verify_content: bool = True) -> TrainingState:
    raw = loaded.metadata
    if "format" not in raw:
        raise CheckpointError(f"{path}: not a minigpt-tui training-state file (no format record)")
    metadata: dict[str, Any] = {key: parse_record(path, key, text) for key, text in raw.items()}
    _check_format_records(path, metadata)
    _check_content_digest(path, loaded, metadata, verify_content)
    tensors = loaded.tensors()
    SavedTensors(path, tensors).step  # a U64 [1] or a named refusal
    state = TrainingState(path, metadata, tensors, loaded.sha256, loaded.header.file_size)
    records_step = metadata["records"].get("schedule", {}).get("step") if isinstance(metadata["records"], dict) else None
    if records_step != state.step:
        raise CheckpointError(f"{path}: the readable records say step {records_step!r} but the tensors say {state.step}")
    return state


def _check_format_records(path: Path, metadata: dict[str, Any]) -> None:
    """The format record names this format and version, and every required record is there."""
    fmt = metadata["format"]
    if not isinstance(fmt, dict) or fmt.get("name") != FORMAT_NAME:
        raise CheckpointError(f"{path}: not a minigpt-tui training-state file (its format record)")
    if fmt.get("version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: training-state format version {fmt.get('version')!r} is not supported")
    missing = [k for k in _REQUIRED_RECORDS if k not in metadata]
    if missing:
        raise CheckpointError(f"{path}: training-state file lacks the metadata record '{missing[0]}'")


def _check_content_digest(path: Path, loaded: LoadedFile, metadata: dict[str, Any], verify_content: bool) -> None:
    """The tensors' digest, recomputed from their bytes unless ``verify_content`` is False,
    equals the one recorded at saving."""
    computed = (
        tensor_digest(CONTENT_DIGEST, file_records(loaded))
        if verify_content
        else metadata["content_sha256"]
    )
    if computed != metadata["content_sha256"]:
        raise CheckpointError(
            f"{path}: training-state content digest mismatch (stored {str(metadata['content_sha256'])[:12]}…, "
            f"computed {computed[:12]}…): the tensors changed after saving"
        )


# -- compatibility and restore ------------------------------------------------------------------
def saved_config(state: TrainingState) -> "RunConfig":
    try:
        config = RunConfig.from_dict(state.config_dict)
    except (ConfigError, TypeError, AttributeError) as err:
        raise CheckpointError(f"{state.path}: the saved config is invalid: {err}") from None
    if config_identity(config.to_dict()) != state.identities.get("config"):
        raise ResumeRefused(
            f"{state.path}: the config changed: its identity no longer matches the one recorded at saving"
        )
    return config


def check_environment(state: TrainingState, config: "RunConfig", *, allow_change: bool) -> Continuation:
    """Refuse a changed envelope in exact precision unless allowed; say what that costs."""
    now = current_envelope(config.train, measured=False)
    differences = envelope_differences(state.envelope, now, compared_keys(config.train))
    continuation = state.continuation
    if not differences:
        return continuation
    if config.train.precision_kind.bitwise and not allow_change:
        raise ResumeRefused(
            f"the environment changed since saving ({differences[0]}"
            + (f", and {len(differences) - 1} more" if len(differences) > 1 else "")
            + "): bitwise continuation cannot be promised; pass --allow-environment-change to continue anyway"
        )
    note = "environment changed at step {}: {}".format(state.step, "; ".join(differences))
    return Continuation(False, continuation.notes + (note,))


def apply_training_state(trainer: "Trainer", state: TrainingState) -> None:
    """Put the saved state into a freshly built trainer. Every check runs before the first
    change, so a refusal leaves the trainer as it was built."""
    try:
        _apply_training_state(trainer, state)
    except _MALFORMED as err:
        raise CheckpointError(f"{state.path}: malformed training state ({type(err).__name__}: {err})") from None


def _apply_training_state(trainer: "Trainer", state: TrainingState) -> None:
    saved = SavedTensors(state.path, state.tensors, state.metadata)
    changes = [part.check(trainer, saved) for part in STATE_PARTS if part.applies(trainer)]
    # Nothing above has touched the trainer.
    for change in changes:
        change()
