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
import math
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.checkpoint.safetensors_io import (
    ExpectedFile,
    LoadedFile,
    ProgressHook,
    WrittenFile,
    dtype_name,
    json_metadata,
    load_file,
    tensor_memory,
    write_safetensors,
)
from minigpt_tui.engine.errors import CheckpointError, ConfigError, ResumeRefused

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.config import RunConfig, TrainConfig
    from minigpt_tui.engine.trainer import Trainer

FORMAT_NAME = "minigpt-tui/training-state"
FORMAT_VERSION = 1
TRAINING_FILE = "training.safetensors"
# Checkpoint policy: how often and how many to keep. It never changes the trajectory,
# so it is left out of the config identity and may differ on resume.
POLICY_SETTINGS = ("save_every", "keep_last")
HYPERPARAMETERS = ["lr", "beta1", "beta2", "eps", "weight_decay"]
SCALER_VALUES = ["scale", "minimum", "maximum", "growth_factor", "backoff_factor"]
SCALER_COUNTERS = ["enabled", "growth_interval", "finite_updates"]
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
)

# Tensor name prefix -> the meaning it is grouped under when inspected.
GROUPS = {
    "optimizer.": "optimizer",
    "schedule.": "schedule",
    "progress.": "schedule",
    "clipping.": "update_policy",
    "recompute.": "update_policy",
    "accumulation.": "accumulation",
    "data.": "data_progress",
    "randomness.": "randomness",
    "loss_scaler.": "loss_scaling",
    "curve.": "evaluation",
}


def group_of(name: str) -> str:
    for prefix, group in GROUPS.items():
        if name.startswith(prefix):
            return group
    return "other"


# -- identities and the envelope --------------------------------------------------------------
def config_identity(config: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the resolved config, checkpoint policy left out."""
    from minigpt_tui.engine.config import identity_form

    data = identity_form(config)
    for name in POLICY_SETTINGS:
        data.get("train", {}).pop(name, None)
    text = json.dumps(data, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def current_envelope(train: "TrainConfig", *, measured: bool = True) -> dict[str, Any]:
    """The execution environment. ``measured``: threads and determinism as torch has them
    now; otherwise as :func:`apply_precision` will set them for ``train``."""
    import numpy
    import safetensors
    import torch

    from minigpt_tui import __version__

    if measured:
        threads = torch.get_num_threads()
        deterministic = torch.are_deterministic_algorithms_enabled()
    else:
        threads = 1 if train.precision == "exact" else train.threads
        deterministic = train.precision == "exact"
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "safetensors": safetensors.__version__,
        "minigpt_tui": __version__,
        "precision": train.precision,
        "dtype": "float64" if train.precision == "exact" else "float32",
        "threads": threads,
        "deterministic": deterministic,
        "platform": f"{platform.system()}-{platform.machine()}",
    }


def envelope_differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    return [
        f"{key}: saved {saved.get(key)!r}, now {now.get(key)!r}"
        for key in ENVELOPE_KEYS
        if saved.get(key) != now.get(key)
    ]


def content_digest(records: list[tuple[str, str, tuple[int, ...], Any]]) -> str:
    digest = hashlib.sha256(b"minigpt-tui/training-state-content/v1\0")
    for name, dtype, shape, data in sorted(records, key=lambda r: r[0]):
        head = f"{name}|{dtype}|{list(shape)}".encode()
        digest.update(len(head).to_bytes(8, "little") + head)
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def _raw(tensor: "torch.Tensor") -> memoryview:
    return tensor_memory(tensor)


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
    if trainer.config.train.precision != "exact" and base.bitwise_promised:
        return Continuation(False, base.notes + ("fast precision makes no bitwise promise",))
    return base


@dataclass(frozen=True)
class CapturedState:
    """A trainer's state as tensors and records, before the digests that seal it."""

    tensors: list[tuple[str, "torch.Tensor"]]
    records: dict[str, Any]  # every metadata record except the model identity and content digest

    def content_digest(self) -> str:
        return content_digest([(n, dtype_name(t.dtype), tuple(t.shape), _raw(t)) for n, t in self.tensors])

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
    """The trainer's state. Refuses (CaptureRefused) unless the trainer is between complete
    updates; it never clears or changes anything. The tensors are the live ones (no copy):
    write them before the next update."""
    import torch

    from minigpt_tui.engine.batches import DocumentOrder
    from minigpt_tui.engine.tensors import u64
    from minigpt_tui.engine.trainer import scheduled_lr

    trainer.require_update_boundary()
    config = trainer.config
    train = config.train
    tensors: list[tuple[str, torch.Tensor]] = []

    # Optimizer: per named parameter moments and step, groups and their hyperparameters.
    groups_meta = []
    hyper_rows = []
    state_keys: set[str] = set()
    for group in trainer.optimizer.param_groups:
        names = [trainer.param_names[p] for p in group["params"]]
        flags = {k: v for k, v in group.items() if k not in ("params", "lr", "betas", "eps", "weight_decay")}
        groups_meta.append({"params": names, "flags": flags})
        beta1, beta2 = group["betas"]
        hyper_rows.append([group["lr"], beta1, beta2, group["eps"], group["weight_decay"]])
        for p in group["params"]:
            for key, value in sorted(trainer.optimizer.state.get(p, {}).items()):
                if not isinstance(value, torch.Tensor):
                    raise CheckpointError(f"optimizer state {key!r} is not a tensor and cannot be saved")
                # Written straight from the live tensors: capture happens between updates.
                tensors.append((f"optimizer.state.{trainer.param_names[p]}.{key}", value.detach()))
                state_keys.add(key)
    tensors.append(("optimizer.groups.hyperparameters", torch.tensor(hyper_rows, dtype=torch.float64)))

    # Schedule and update policy.
    tensors.append(("progress.step", u64([trainer.step])))
    tensors.append(("schedule.rates", torch.tensor([train.lr, train.final_lr], dtype=torch.float64)))
    tensors.append(("schedule.counts", u64([train.steps, train.warmup])))
    tensors.append(("clipping.max_norm", torch.tensor([train.clip], dtype=torch.float64)))
    tensors.append(("recompute.enabled", torch.tensor([int(train.recompute)], dtype=torch.uint8)))
    tensors.append(("accumulation.counts", u64([train.microbatches, trainer.pending_microbatches, train.batch_size])))

    # Data progress.
    batches = trainer.batches
    tensors.append(("data.examples", u64([len(trainer.train_examples), len(trainer.validation_examples)])))
    if isinstance(batches, DocumentOrder):
        state = batches.state()
        tensors += [("data.order", state["order"]), ("data.cursor", state["cursor"]), ("data.epoch", state["epoch"])]
    else:
        tensors.append(("data.generator_state", batches.state()["generator_state"].to(torch.uint8)))
        tensors.append(("data.draws", u64([int(getattr(batches, "draws", 0))])))

    # Randomness: dropout seed and counter, monitoring-sampling generator, all seeds.
    seeds = config.seeds
    tensors.append(("randomness.dropout", u64([trainer.dropout_seed, trainer.dropout_counter])))
    tensors.append(("randomness.sampling_generator_state", trainer.sampling.get_state().clone()))
    tensors.append(("randomness.seeds", u64([seeds.init, seeds.data, seeds.dropout, seeds.sampling])))

    # Loss scaling.
    s = trainer.scaler
    tensors.append(
        ("loss_scaler.values", torch.tensor([s.scale, s.minimum, s.maximum, s.growth_factor, s.backoff_factor], dtype=torch.float64))
    )
    tensors.append(("loss_scaler.counters", u64([int(s.enabled), s.growth_interval, s.finite_updates])))

    # Evaluation curve so far and the best step.
    curve = trainer.curve
    tensors.append(("curve.steps", u64([r.step for r in curve])))
    losses = [
        [r.train_loss, math.nan if r.validation_loss is None else r.validation_loss] for r in curve
    ]
    tensors.append(("curve.losses", torch.tensor(losses, dtype=torch.float64).reshape(len(curve), 2)))
    tensors.append(("curve.targets", u64([v for r in curve for v in (r.train_targets, r.validation_targets)]).reshape(len(curve), 2)))
    tensors.append(("curve.extra", torch.tensor([int(r.extra) for r in curve], dtype=torch.uint8)))
    best_present = trainer.best_step is not None
    tensors.append(("curve.best_step", u64([int(best_present), trainer.best_step or 0])))
    tensors.append(
        ("curve.best_validation", torch.tensor([trainer.best_validation if trainer.best_validation is not None else math.nan], dtype=torch.float64))
    )

    config_record = config.to_dict()
    identities = {
        "config": config_identity(config_record),
        "corpus": trainer.setup.corpus.identity,
        "tokenizer": trainer.tokenizer.identity,
    }
    next_lr = scheduled_lr(train, trainer.step + 1) if trainer.step < train.steps else None
    records = {
        "optimizer": {
            "class": type(trainer.optimizer).__name__,
            "groups": len(groups_meta),
            "parameters_with_state": sum(1 for g in trainer.optimizer.param_groups for p in g["params"] if trainer.optimizer.state.get(p)),
            "state_keys": sorted(state_keys),
        },
        "schedule": {
            "step": trainer.step,
            "steps": train.steps,
            "kind": train.schedule,
            "warmup": train.warmup,
            "lr": train.lr,
            "final_lr": train.final_lr,
            "next_lr": next_lr,
        },
        "update_policy": {"clip": train.clip, "recompute": train.recompute},
        "accumulation": {
            "microbatches": train.microbatches,
            "pending_microbatches": trainer.pending_microbatches,
            "batch_size": train.batch_size,
        },
        "data_progress": {"policy": train.batch_policy, **_data_summary(trainer), "next_batch": trainer.next_batch(),
                          **(trainer.data_summary() if trainer.stream_mode else {})},
        "randomness": {
            "dropout_seed": trainer.dropout_seed,
            "dropout_counter": trainer.dropout_counter,
            "sampling_generator_sha256": hashlib.sha256(_raw(trainer.sampling.get_state())).hexdigest(),
        },
        "loss_scaling": {
            "enabled": s.enabled,
            "scale": s.scale,
            "minimum": s.minimum,
            "maximum": s.maximum,
            "growth_interval": s.growth_interval,
            "finite_updates": s.finite_updates,
        },
        "evaluation": {
            "points": len(curve),
            "last": _curve_point(curve[-1]) if curve else None,
            "best_step": trainer.best_step,
            "best_validation": trainer.best_validation,
        },
    }
    from minigpt_tui import __version__

    metadata = {
        "format": {"name": FORMAT_NAME, "version": FORMAT_VERSION},
        "config": config_record,
        "identities": identities,
        "envelope": current_envelope(train, measured=True),
        "continuation": continuation_of(trainer).to_json(),
        "optimizer": {"class": type(trainer.optimizer).__name__, "groups": groups_meta, "hyperparameter_layout": HYPERPARAMETERS},
        "layouts": {
            "schedule.rates": ["lr", "final_lr"],
            "schedule.counts": ["steps", "warmup"],
            "accumulation.counts": ["microbatches", "pending_microbatches", "batch_size"],
            "data.examples": ["train_examples", "validation_examples"],
            "randomness.dropout": ["seed", "next_counter"],
            "randomness.seeds": ["init", "data", "dropout", "sampling"],
            "loss_scaler.values": SCALER_VALUES,
            "loss_scaler.counters": SCALER_COUNTERS,
            "curve.losses": ["train_loss", "validation_loss (NaN: none)"],
            "curve.targets": ["train_targets", "validation_targets"],
            "curve.best_step": ["present", "step"],
        },
        "records": records,
        "producer": {"package": "minigpt-tui", "version": __version__},
    }
    return CapturedState(tensors, metadata)


def _data_summary(trainer: "Trainer") -> dict[str, Any]:
    from minigpt_tui.engine.batches import DocumentOrder

    batches = trainer.batches
    if isinstance(batches, DocumentOrder):
        order = list(batches.order)
        return {
            "cursor": batches.cursor,
            "epoch": batches.epoch,
            "order": order if len(order) <= 64 else order[:64],
            "order_length": len(order),
        }
    state = batches.generator.get_state()
    return {"draws": int(getattr(batches, "draws", 0)), "generator_sha256": hashlib.sha256(_raw(state)).hexdigest()}


def _curve_point(record: Any) -> dict[str, Any]:
    return {
        "step": record.step,
        "train_loss": record.train_loss,
        "validation_loss": record.validation_loss,
        "extra": record.extra,
    }


def write_training_state(
    trainer: "Trainer",
    path: Path,
    model_identity: str,
    *,
    progress: ProgressHook | None = None,
    atomic: bool = True,
) -> WrittenFile:
    captured = capture_state(trainer)
    metadata = captured.metadata(model_identity, captured.content_digest())
    return write_safetensors(path, captured.tensors, json_metadata(metadata), progress=progress, atomic=atomic)


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
        return _u64(self.tensors["progress.step"])[0]

    @property
    def continuation(self) -> Continuation:
        c = self.metadata["continuation"]
        return Continuation(bool(c.get("bitwise_promised")), tuple(c.get("notes", ())))


_MALFORMED = (KeyError, TypeError, AttributeError, ValueError, IndexError)


def read_training_state(
    path: Path | str, expect: ExpectedFile | None = None, *, verify_content: bool | None = None
) -> TrainingState:
    """Read and check a training-state file. Its content digest is recomputed when no
    manifest record (``expect``) vouches for the bytes, or when ``verify_content`` asks."""
    path = Path(path)
    loaded = load_file(path, expect)
    if verify_content is None:
        verify_content = expect is None
    try:
        return parse_training_state(path, loaded, verify_content=verify_content)
    except _MALFORMED as err:
        raise CheckpointError(f"{path}: malformed training-state file ({type(err).__name__}: {err})") from None


def parse_training_state(path: Path, loaded: LoadedFile, *, verify_content: bool = True) -> TrainingState:
    raw = loaded.metadata
    if "format" not in raw:
        raise CheckpointError(f"{path}: not a minigpt-tui training-state file (no format record)")
    try:
        fmt = json.loads(raw["format"])
    except json.JSONDecodeError:
        fmt = raw["format"]
    if not isinstance(fmt, dict) or fmt.get("name") != FORMAT_NAME:
        raise CheckpointError(f"{path}: not a minigpt-tui training-state file (format {fmt!r})")
    metadata: dict[str, Any] = {}
    for key, text in raw.items():
        try:
            metadata[key] = json.loads(text)
        except json.JSONDecodeError:
            raise CheckpointError(f"{path}: metadata record '{key}' is not JSON") from None
    if fmt.get("version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: training-state format version {fmt.get('version')!r} is not supported")
    missing = [k for k in _REQUIRED_RECORDS if k not in metadata]
    if missing:
        raise CheckpointError(f"{path}: training-state file lacks the metadata record '{missing[0]}'")
    view = memoryview(loaded.buffer)
    start = loaded.header.data_start
    computed = (
        content_digest([(e.name, e.dtype, e.shape, view[start + e.begin : start + e.end]) for e in loaded.header.entries])
        if verify_content
        else metadata["content_sha256"]
    )
    if computed != metadata["content_sha256"]:
        raise CheckpointError(
            f"{path}: training-state content digest mismatch (stored {str(metadata['content_sha256'])[:12]}…, "
            f"computed {computed[:12]}…): the tensors changed after saving"
        )
    tensors = loaded.tensors()
    _check_tensor(path, tensors, "progress.step", "U64", (1,))
    state = TrainingState(path, metadata, tensors, loaded.sha256, loaded.header.file_size)
    records_step = metadata["records"].get("schedule", {}).get("step") if isinstance(metadata["records"], dict) else None
    if records_step != state.step:
        raise CheckpointError(f"{path}: the readable records say step {records_step!r} but the tensors say {state.step}")
    return state


def _check_tensor(path: Path, tensors: dict[str, Any], name: str, dtype: str, shape: tuple[int, ...] | None) -> Any:
    if name not in tensors:
        raise CheckpointError(f"{path}: training state lacks '{name}'")
    tensor = tensors[name]
    if dtype_name(tensor.dtype) != dtype or (shape is not None and tuple(tensor.shape) != shape):
        raise CheckpointError(
            f"{path}: '{name}' is {dtype_name(tensor.dtype)} {list(tensor.shape)}, expected {dtype} {list(shape or ())}"
        )
    return tensor


def _u64(tensor: Any) -> list[int]:
    from minigpt_tui.engine.tensors import u64_values

    return u64_values(tensor.reshape(-1))


# -- compatibility and restore ------------------------------------------------------------------
def saved_config(state: TrainingState) -> "RunConfig":
    from minigpt_tui.engine.config import RunConfig

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
    differences = envelope_differences(state.envelope, now)
    continuation = state.continuation
    if not differences:
        return continuation
    if config.train.precision == "exact" and not allow_change:
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
    import torch

    from minigpt_tui.engine.batches import DocumentOrder
    from minigpt_tui.engine.trainer import EvaluationRecord

    path = state.path
    t = state.tensors
    config = trainer.config
    train = config.train

    # -- checks -------------------------------------------------------------------------------
    saved_groups = state.metadata["optimizer"].get("groups")
    current_groups = [[trainer.param_names[p] for p in g["params"]] for g in trainer.optimizer.param_groups]
    if not isinstance(saved_groups, list) or [g.get("params") for g in saved_groups] != current_groups:
        raise ResumeRefused(f"{path}: the optimizer's parameter groups differ from this model's")
    hyper = _check_tensor(path, t, "optimizer.groups.hyperparameters", "F64", (len(current_groups), len(HYPERPARAMETERS)))
    for row, group in zip(hyper.tolist(), trainer.optimizer.param_groups):
        if (row[1], row[2], row[3], row[4]) != (*group["betas"], group["eps"], group["weight_decay"]):
            raise ResumeRefused(f"{path}: saved AdamW hyperparameters {row[1:]} differ from the config's")
    params = {n: p for n, p in trainer.model.named_parameters()}
    optimizer_entries: dict[str, dict[str, Any]] = {}
    for name, tensor in t.items():
        if name.startswith("optimizer.state."):
            rest = name.removeprefix("optimizer.state.")
            pname, _, key = rest.rpartition(".")
            if pname not in params:
                raise ResumeRefused(f"{path}: optimizer state for unknown parameter '{pname}'")
            if key != "step" and tuple(tensor.shape) != tuple(params[pname].shape):
                raise ResumeRefused(f"{path}: optimizer state '{name}' has shape {list(tensor.shape)}")
            optimizer_entries.setdefault(pname, {})[key] = tensor
    step_values = {float(v["step"]) for v in optimizer_entries.values() if "step" in v}
    step = state.step
    if optimizer_entries and step_values != {float(step)}:
        raise CheckpointError(f"{path}: AdamW step {sorted(step_values)} disagrees with the committed step {step}")
    if step > train.steps:
        raise CheckpointError(f"{path}: step {step} is beyond the schedule of {train.steps} updates")
    rates = _check_tensor(path, t, "schedule.rates", "F64", (2,)).tolist()
    counts = _u64(_check_tensor(path, t, "schedule.counts", "U64", (2,)))
    if rates != [train.lr, train.final_lr] or counts != [train.steps, train.warmup]:
        raise ResumeRefused(f"{path}: the saved schedule differs from the saved config")
    clip = _check_tensor(path, t, "clipping.max_norm", "F64", (1,)).tolist()
    recompute = int(_check_tensor(path, t, "recompute.enabled", "U8", (1,))[0])
    if clip != [train.clip] or bool(recompute) != train.recompute:
        raise ResumeRefused(f"{path}: the saved clipping or recomputation policy differs from the saved config")
    microbatches, pending, batch_size = _u64(_check_tensor(path, t, "accumulation.counts", "U64", (3,)))
    if pending:
        raise CheckpointError(f"{path}: {pending} microbatches were pending: not a complete-update boundary")
    if (microbatches, batch_size) != (train.microbatches, train.batch_size):
        raise ResumeRefused(f"{path}: the saved accumulation settings differ from the saved config")
    examples = _u64(_check_tensor(path, t, "data.examples", "U64", (2,)))
    if examples != [len(trainer.train_examples), len(trainer.validation_examples)]:
        raise ResumeRefused(
            f"{path}: the data has {len(trainer.train_examples)} training examples now, {examples[0]} at saving"
        )
    batches = trainer.batches
    if isinstance(batches, DocumentOrder):
        order = _check_tensor(path, t, "data.order", "U64", (examples[0],))
        cursor = _u64(_check_tensor(path, t, "data.cursor", "U64", (1,)))[0]
        epoch = _u64(_check_tensor(path, t, "data.epoch", "U64", (1,)))[0]
        if sorted(_u64(order)) != list(range(examples[0])) or cursor >= examples[0]:
            raise CheckpointError(f"{path}: the saved document order or cursor is invalid")
        data_state: dict[str, Any] = {"order": order, "cursor": t["data.cursor"], "epoch": t["data.epoch"]}
    else:
        generator_state = _check_tensor(path, t, "data.generator_state", "U8", None)
        draws = _u64(_check_tensor(path, t, "data.draws", "U64", (1,)))[0]
        data_state = {"generator_state": generator_state}
    dropout_seed, dropout_counter = _u64(_check_tensor(path, t, "randomness.dropout", "U64", (2,)))
    if dropout_seed != trainer.dropout_seed:
        raise ResumeRefused(f"{path}: the saved dropout seed differs from the saved config's")
    sampling_state = _check_tensor(path, t, "randomness.sampling_generator_state", "U8", None)
    scaler_values = _check_tensor(path, t, "loss_scaler.values", "F64", (len(SCALER_VALUES),)).tolist()
    enabled, growth_interval, finite_updates = _u64(_check_tensor(path, t, "loss_scaler.counters", "U64", (3,)))
    s = trainer.scaler
    if (bool(enabled), growth_interval) != (s.enabled, s.growth_interval) or scaler_values[1:] != [
        s.minimum,
        s.maximum,
        s.growth_factor,
        s.backoff_factor,
    ]:
        raise ResumeRefused(f"{path}: the saved loss-scaler bounds differ from the saved config's")
    if s.enabled and not scaler_values[1] <= scaler_values[0] <= scaler_values[2]:
        raise CheckpointError(f"{path}: the saved loss scale {scaler_values[0]} lies outside its bounds")
    curve_steps = _u64(_check_tensor(path, t, "curve.steps", "U64", None))
    n = len(curve_steps)
    losses = _check_tensor(path, t, "curve.losses", "F64", (n, 2)).tolist()
    targets = _u64(_check_tensor(path, t, "curve.targets", "U64", (n, 2)))
    extra = _check_tensor(path, t, "curve.extra", "U8", (n,)).tolist()
    best_present, best_step = _u64(_check_tensor(path, t, "curve.best_step", "U64", (2,)))
    best_validation = _check_tensor(path, t, "curve.best_validation", "F64", (1,)).tolist()[0]

    # -- changes (nothing above has touched the trainer) --------------------------------------
    with torch.no_grad():
        fresh = trainer.optimizer.state_dict()
        index = 0
        new_state: dict[int, dict[str, Any]] = {}
        for group in trainer.optimizer.param_groups:
            for p in group["params"]:
                entries = optimizer_entries.get(trainer.param_names[p])
                if entries:
                    # Tensors over the file's own buffer (read once, owned by them): no copy.
                    new_state[index] = dict(entries)
                index += 1
        fresh["state"] = new_state
        for group, row in zip(fresh["param_groups"], hyper.tolist()):
            group["lr"] = row[0]
        trainer.optimizer.load_state_dict(fresh)
    batches.load_state(data_state)
    if not isinstance(batches, DocumentOrder) and hasattr(batches, "draws"):
        batches.draws = draws
    trainer.dropout_counter = dropout_counter
    trainer.sampling.set_state(sampling_state.clone())
    s.scale = scaler_values[0]
    s.finite_updates = finite_updates
    trainer.pending_microbatches = 0
    trainer.step = step
    trainer.curve = [
        EvaluationRecord(
            step=curve_steps[i],
            train_loss=losses[i][0],
            validation_loss=None if targets[2 * i + 1] == 0 else losses[i][1],
            train_targets=targets[2 * i],
            validation_targets=targets[2 * i + 1],
            extra=bool(extra[i]),
        )
        for i in range(n)
    ]
    trainer.best_step = best_step if best_present else None
    trainer.best_validation = None if not best_present else best_validation
