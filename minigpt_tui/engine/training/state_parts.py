"""What a trainer's state is made of, part by part: each part declares its tensors once
(name, dtype, column layout), captures them with the readable record shown by inspection,
and checks saved tensors before anything changes, handing back the change to make.

:func:`~minigpt_tui.engine.training.training_state.capture_state` and the restore in the
same module are loops over :data:`STATE_PARTS`. A new kind of state (another batch policy,
per-process state) is one more part in that table; the file format is the union of the
parts' tensors and records.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from minigpt_tui.engine.core.errors import CheckpointError, ResumeRefused
from minigpt_tui.engine.core.tensors import bytes_digest, u64, u64_values
from minigpt_tui.engine.formats.safetensors_format import dtype_name
from minigpt_tui.engine.formats.state_groups import StateGroup

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.training.trainer import Trainer

HYPERPARAMETERS = ["lr", "beta1", "beta2", "eps", "weight_decay"]
SCALER_VALUES = ["scale", "minimum", "maximum", "growth_factor", "backoff_factor"]
SCALER_COUNTERS = ["enabled", "growth_interval", "finite_updates"]

Apply = Callable[[], None]


@dataclass(frozen=True)
class TensorSpec:
    """One saved tensor: its name, file dtype and, where it has one, what each column means."""

    name: str
    dtype: str  # "U64", "F64" or "U8"; None-like "any" for tensors kept in torch's own dtype
    columns: tuple[str, ...] | None = None

    def make(self, values: Any) -> torch.Tensor:
        """The tensor for ``values`` (a list, or a tensor kept as it is)."""
        import torch  # deferred: imports torch

        if isinstance(values, torch.Tensor):
            return values
        if self.dtype == "U64":
            return u64(values)
        if self.dtype == "F64":
            return torch.tensor(values, dtype=torch.float64)
        return torch.tensor(values, dtype=torch.uint8)


@dataclass(frozen=True)
class SavedTensors:
    """A training-state file's tensors, read with their declared dtype and shape checked."""

    path: Path
    tensors: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def step(self) -> int:
        return self.u64(SchedulePart.STEP, (1,))[0]

    def read(self, spec: TensorSpec, shape: tuple[int, ...] | None = None) -> Any:
        """The tensor; its shape is ``shape``, else one value per column, else any."""
        expected = shape if shape is not None else ((len(spec.columns),) if spec.columns else None)
        if spec.name not in self.tensors:
            raise CheckpointError(f"{self.path}: training state lacks '{spec.name}'")
        tensor = self.tensors[spec.name]
        if dtype_name(tensor.dtype) != spec.dtype or (expected is not None and tuple(tensor.shape) != expected):
            raise CheckpointError(
                f"{self.path}: '{spec.name}' is {dtype_name(tensor.dtype)} {list(tensor.shape)}, "
                f"expected {spec.dtype} {list(expected or ())}"
            )
        return tensor

    def u64(self, spec: TensorSpec, shape: tuple[int, ...] | None = None) -> list[int]:
        return u64_values(self.read(spec, shape).reshape(-1))


@dataclass
class PartCapture:
    tensors: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    record: dict[str, Any] | None = None  # the readable copy under the part's group


class StatePart(Protocol):
    group: StateGroup
    specs: tuple[TensorSpec, ...]

    def applies(self, trainer: Trainer) -> bool: ...

    def capture(self, trainer: Trainer) -> PartCapture: ...

    def check(self, trainer: Trainer, saved: SavedTensors) -> Apply:
        """Validate the saved tensors against ``trainer`` without changing it; return the change."""
        ...


class _Always:
    def applies(self, trainer: Trainer) -> bool:
        return True


# -- optimizer ------------------------------------------------------------------------------------
OPTIMIZER_STATE_PREFIX = "optimizer.state."


class OptimizerPart(_Always):
    """AdamW: per named parameter moments and step (torch's own dtypes), and per group the
    hyperparameters (one F64 row each)."""

    group = StateGroup.OPTIMIZER
    HYPER = TensorSpec("optimizer.groups.hyperparameters", "F64")
    specs = (HYPER,)

    def capture(self, trainer: Trainer) -> PartCapture:
        import torch  # deferred: imports torch

        optimizer = trainer.optimizer
        out = PartCapture()
        rows, keys = [], set()
        for group in optimizer.param_groups:
            beta1, beta2 = group["betas"]
            rows.append([group["lr"], beta1, beta2, group["eps"], group["weight_decay"]])
            for p in group["params"]:
                for key, value in sorted(optimizer.state.get(p, {}).items()):
                    if not isinstance(value, torch.Tensor):
                        raise CheckpointError(f"optimizer state {key!r} is not a tensor and cannot be saved")
                    # Written straight from the live tensors: capture happens between updates.
                    out.tensors.append((f"{OPTIMIZER_STATE_PREFIX}{trainer.param_names[p]}.{key}", value.detach().cpu()))
                    keys.add(key)
        out.tensors.append((self.HYPER.name, self.HYPER.make(rows)))
        out.record = {
            "class": type(optimizer).__name__,
            "groups": len(optimizer.param_groups),
            "parameters_with_state": sum(1 for g in optimizer.param_groups for p in g["params"] if optimizer.state.get(p)),
            "state_keys": sorted(keys),
        }
        return out

    @staticmethod
    def layout(trainer: Trainer) -> dict[str, Any]:
        """The file's top-level ``optimizer`` record: each group's parameters and flags."""
        groups = []
        for group in trainer.optimizer.param_groups:
            flags = {k: v for k, v in group.items() if k not in ("params", "lr", "betas", "eps", "weight_decay")}
            groups.append({"params": [trainer.param_names[p] for p in group["params"]], "flags": flags})
        return {"class": type(trainer.optimizer).__name__, "groups": groups, "hyperparameter_layout": HYPERPARAMETERS}

    def check(self, trainer: Trainer, saved: SavedTensors) -> Apply:
        path, step = saved.path, saved.step
        hyper = self._checked_hyperparameters(trainer, saved)
        entries = _saved_moments(trainer, saved)
        steps = {float(v["step"]) for v in entries.values() if "step" in v}
        if entries and steps != {float(step)}:
            raise CheckpointError(f"{path}: AdamW step {sorted(steps)} disagrees with the committed step {step}")

        def apply() -> None:
            _load_optimizer_state(trainer, entries, hyper)

        return apply

    def _checked_hyperparameters(self, trainer: Trainer, saved: SavedTensors) -> list[list[float]]:
        """The saved groups' hyperparameter rows, refused unless the groups hold this model's
        parameters and the betas, eps and weight decay are the config's."""
        path = saved.path
        layout = saved.metadata["optimizer"].get("groups")
        current = [[trainer.param_names[p] for p in g["params"]] for g in trainer.optimizer.param_groups]
        if not isinstance(layout, list) or [g.get("params") for g in layout] != current:
            raise ResumeRefused(f"{path}: the optimizer's parameter groups differ from this model's")
        hyper = saved.read(self.HYPER, (len(current), len(HYPERPARAMETERS))).tolist()
        for row, group in zip(hyper, trainer.optimizer.param_groups):
            if (row[1], row[2], row[3], row[4]) != (*group["betas"], group["eps"], group["weight_decay"]):
                raise ResumeRefused(f"{path}: saved AdamW hyperparameters {row[1:]} differ from the config's")
        return hyper


def _saved_moments(trainer: Trainer, saved: SavedTensors) -> dict[str, dict[str, Any]]:
    """The saved optimizer state by parameter name and key, each for a parameter of this
    model with its shape (``step`` excepted)."""
    path = saved.path
    params = dict(trainer.model.named_parameters())
    entries: dict[str, dict[str, Any]] = {}
    for name, tensor in saved.tensors.items():
        if not name.startswith(OPTIMIZER_STATE_PREFIX):
            continue
        pname, _, key = name.removeprefix(OPTIMIZER_STATE_PREFIX).rpartition(".")
        if pname not in params:
            raise ResumeRefused(f"{path}: optimizer state for unknown parameter '{pname}'")
        if key != "step" and tuple(tensor.shape) != tuple(params[pname].shape):
            raise ResumeRefused(f"{path}: optimizer state '{name}' has shape {list(tensor.shape)}")
        entries.setdefault(pname, {})[key] = tensor
    return entries


def _load_optimizer_state(trainer: Trainer, entries: dict[str, dict[str, Any]], hyper: list[list[float]]) -> None:
    """Load the checked state into the trainer's optimizer: the moments and steps by
    parameter position, each group's saved learning rate."""
    import torch  # deferred: imports torch

    optimizer = trainer.optimizer
    with torch.no_grad():
        fresh = optimizer.state_dict()
        index, state = 0, {}
        for group in optimizer.param_groups:
            for p in group["params"]:
                saved_entries = entries.get(trainer.param_names[p])
                if saved_entries:
                    # Tensors over the file's own buffer (read once, owned by them): no copy.
                    state[index] = dict(saved_entries)
                index += 1
        fresh["state"] = state
        for group, row in zip(fresh["param_groups"], hyper):
            group["lr"] = row[0]
        optimizer.load_state_dict(fresh)


# -- schedule and update policy ---------------------------------------------------------------
class SchedulePart(_Always):
    group = StateGroup.SCHEDULE
    STEP = TensorSpec("progress.step", "U64")
    RATES = TensorSpec("schedule.rates", "F64", ("lr", "final_lr"))
    COUNTS = TensorSpec("schedule.counts", "U64", ("steps", "warmup"))
    specs = (STEP, RATES, COUNTS)

    def capture(self, trainer: Trainer) -> PartCapture:
        from minigpt_tui.engine.training.trainer import (  # deferred: imports torch
            scheduled_lr,
        )

        train = trainer.config.train
        tensors = [(self.STEP.name, self.STEP.make([trainer.step])),
                   (self.RATES.name, self.RATES.make([train.lr, train.final_lr])),
                   (self.COUNTS.name, self.COUNTS.make([train.steps, train.warmup]))]
        next_lr = scheduled_lr(train, trainer.step + 1) if trainer.step < train.steps else None
        record = {"step": trainer.step, "steps": train.steps, "kind": train.schedule, "warmup": train.warmup,
                  "lr": train.lr, "final_lr": train.final_lr, "next_lr": next_lr}
        return PartCapture(tensors, record)

    def check(self, trainer: Trainer, saved: SavedTensors) -> Apply:
        train = trainer.config.train
        (step,) = saved.u64(self.STEP, (1,))
        if step > train.steps:
            raise CheckpointError(f"{saved.path}: step {step} is beyond the schedule of {train.steps} updates")
        if saved.read(self.RATES).tolist() != [train.lr, train.final_lr] \
                or saved.u64(self.COUNTS) != [train.steps, train.warmup]:
            raise ResumeRefused(f"{saved.path}: the saved schedule differs from the saved config")

        def apply() -> None:
            trainer.step = step

        return apply


class UpdatePolicyPart(_Always):
    group = StateGroup.UPDATE_POLICY
    CLIP = TensorSpec("clipping.max_norm", "F64")
    RECOMPUTE = TensorSpec("recompute.enabled", "U8")
    specs = (CLIP, RECOMPUTE)

    def capture(self, trainer: Trainer) -> PartCapture:
        train = trainer.config.train
        return PartCapture([(self.CLIP.name, self.CLIP.make([train.clip])),
                            (self.RECOMPUTE.name, self.RECOMPUTE.make([int(train.recompute)]))],
                           {"clip": train.clip, "recompute": train.recompute})

    def check(self, trainer: Trainer, saved: SavedTensors) -> Apply:
        train = trainer.config.train
        clip = saved.read(self.CLIP, (1,)).tolist()
        recompute = int(saved.read(self.RECOMPUTE, (1,))[0])
        if clip != [train.clip] or bool(recompute) != train.recompute:
            raise ResumeRefused(f"{saved.path}: the saved clipping or recomputation policy differs from the saved config")
        return lambda: None


class AccumulationPart(_Always):
    group = StateGroup.ACCUMULATION
    COUNTS = TensorSpec("accumulation.counts", "U64", ("microbatches", "pending_microbatches", "batch_size"))
    specs = (COUNTS,)

    def capture(self, trainer: Trainer) -> PartCapture:
        train = trainer.config.train
        values = [train.microbatches, trainer.pending_microbatches, train.batch_size]
        return PartCapture([(self.COUNTS.name, self.COUNTS.make(values))], dict(zip(self.COUNTS.columns or (), values)))

    def check(self, trainer: Trainer, saved: SavedTensors) -> Apply:
        microbatches, pending, batch_size = saved.u64(self.COUNTS)
        if pending:
            raise CheckpointError(f"{saved.path}: {pending} microbatches were pending: not a complete-update boundary")
        train = trainer.config.train
        if (microbatches, batch_size) != (train.microbatches, train.batch_size):
            raise ResumeRefused(f"{saved.path}: the saved accumulation settings differ from the saved config")

        def apply() -> None:
            trainer.pending_microbatches = 0

        return apply


# -- data progress --------------------------------------------------------------------------------
class DataSizesPart(_Always):
    """How many examples the splits had: a changed corpus tokenization is refused."""

    group = StateGroup.DATA_PROGRESS
    EXAMPLES = TensorSpec("data.examples", "U64", ("train_examples", "validation_examples"))
    specs = (EXAMPLES,)

    def capture(self, trainer: Trainer) -> PartCapture:
        sizes = [len(trainer.train_examples), len(trainer.validation_examples)]
        return PartCapture([(self.EXAMPLES.name, self.EXAMPLES.make(sizes))])

    def check(self, trainer: Trainer, saved: SavedTensors) -> Apply:
        examples = saved.u64(self.EXAMPLES)
        if examples != [len(trainer.train_examples), len(trainer.validation_examples)]:
            raise ResumeRefused(
                f"{saved.path}: the data has {len(trainer.train_examples)} training examples now, "
                f"{examples[0]} at saving"
            )
        return lambda: None


class DocumentOrderPart:
    group = StateGroup.DATA_PROGRESS
    ORDER = TensorSpec("data.order", "U64")
    CURSOR = TensorSpec("data.cursor", "U64")
    EPOCH = TensorSpec("data.epoch", "U64")
    specs = (ORDER, CURSOR, EPOCH)

    def applies(self, trainer: Trainer) -> bool:
        from minigpt_tui.engine.training.batches import (  # deferred: imports torch
            DocumentOrder,
        )

        return isinstance(trainer.batches, DocumentOrder)

    def capture(self, trainer: Trainer) -> PartCapture:
        batches = trainer.batches
        state = batches.state()
        order = list(batches.order)
        record = {"policy": trainer.config.train.batch_policy, "cursor": batches.cursor, "epoch": batches.epoch,
                  "order": order if len(order) <= 64 else order[:64], "order_length": len(order),
                  "next_batch": trainer.next_batch()}
        return PartCapture([(spec.name, state[spec.name.removeprefix("data.")]) for spec in self.specs], record)

    def check(self, trainer: Trainer, saved: SavedTensors) -> Apply:
        count = len(trainer.train_examples)
        order = saved.read(self.ORDER, (count,))
        (cursor,) = saved.u64(self.CURSOR, (1,))
        saved.u64(self.EPOCH, (1,))
        if sorted(saved.u64(self.ORDER, (count,))) != list(range(count)) or cursor >= count:
            raise CheckpointError(f"{saved.path}: the saved document order or cursor is invalid")
        state = {"order": order, "cursor": saved.tensors[self.CURSOR.name], "epoch": saved.tensors[self.EPOCH.name]}
        return lambda: trainer.batches.load_state(state)


class ReplacementPart:
    group = StateGroup.DATA_PROGRESS
    GENERATOR = TensorSpec("data.generator_state", "U8")
    DRAWS = TensorSpec("data.draws", "U64")
    specs = (GENERATOR, DRAWS)

    def applies(self, trainer: Trainer) -> bool:
        from minigpt_tui.engine.training.batches import (  # deferred: imports torch
            ReplacementSampler,
        )

        return isinstance(trainer.batches, ReplacementSampler)

    def capture(self, trainer: Trainer) -> PartCapture:
        import torch  # deferred: imports torch

        batches = trainer.batches
        draws = int(getattr(batches, "draws", 0))
        tensors = [(self.GENERATOR.name, batches.state()["generator_state"].to(torch.uint8)),
                   (self.DRAWS.name, self.DRAWS.make([draws]))]
        record = {"policy": trainer.config.train.batch_policy, "draws": draws,
                  "generator_sha256": bytes_digest(batches.generator.get_state()), "next_batch": trainer.next_batch(),
                  # Stream mode: the drawn indices are window start offsets into the token array.
                  **(trainer.data_summary() if trainer.stream_mode else {})}
        return PartCapture(tensors, record)

    def check(self, trainer: Trainer, saved: SavedTensors) -> Apply:
        generator_state = saved.read(self.GENERATOR)
        (draws,) = saved.u64(self.DRAWS, (1,))

        def apply() -> None:
            batches = trainer.batches
            batches.load_state({"generator_state": generator_state})
            batches.draws = draws

        return apply


# -- randomness, loss scaling, evaluation ------------------------------------------------------
class RandomnessPart(_Always):
    group = StateGroup.RANDOMNESS
    DROPOUT = TensorSpec("randomness.dropout", "U64", ("seed", "next_counter"))
    SAMPLING = TensorSpec("randomness.sampling_generator_state", "U8")
    SEEDS = TensorSpec("randomness.seeds", "U64", ("init", "data", "dropout", "sampling"))
    specs = (DROPOUT, SAMPLING, SEEDS)

    def capture(self, trainer: Trainer) -> PartCapture:
        seeds = trainer.config.seeds
        tensors = [(self.DROPOUT.name, self.DROPOUT.make([trainer.dropout_seed, trainer.dropout_counter])),
                   (self.SAMPLING.name, trainer.sampling.get_state().clone()),
                   (self.SEEDS.name, self.SEEDS.make([seeds.init, seeds.data, seeds.dropout, seeds.sampling]))]
        record = {"dropout_seed": trainer.dropout_seed, "dropout_counter": trainer.dropout_counter,
                  "sampling_generator_sha256": bytes_digest(trainer.sampling.get_state())}
        return PartCapture(tensors, record)

    def check(self, trainer: Trainer, saved: SavedTensors) -> Apply:
        dropout_seed, dropout_counter = saved.u64(self.DROPOUT)  # rank 0's stream (the config's seed)
        if dropout_seed != trainer.config.seeds.dropout:
            raise ResumeRefused(f"{saved.path}: the saved dropout seed differs from the saved config's")
        sampling_state = saved.read(self.SAMPLING)

        def apply() -> None:
            trainer.dropout_counter = dropout_counter
            trainer.sampling.set_state(sampling_state.clone())

        return apply


class LossScalerPart(_Always):
    group = StateGroup.LOSS_SCALING
    VALUES = TensorSpec("loss_scaler.values", "F64", tuple(SCALER_VALUES))
    COUNTERS = TensorSpec("loss_scaler.counters", "U64", tuple(SCALER_COUNTERS))
    specs = (VALUES, COUNTERS)

    def capture(self, trainer: Trainer) -> PartCapture:
        s = trainer.scaler
        tensors = [(self.VALUES.name, self.VALUES.make([s.scale, s.minimum, s.maximum, s.growth_factor, s.backoff_factor])),
                   (self.COUNTERS.name, self.COUNTERS.make([int(s.enabled), s.growth_interval, s.finite_updates]))]
        record = {"enabled": s.enabled, "scale": s.scale, "minimum": s.minimum, "maximum": s.maximum,
                  "growth_interval": s.growth_interval, "finite_updates": s.finite_updates}
        return PartCapture(tensors, record)

    def check(self, trainer: Trainer, saved: SavedTensors) -> Apply:
        scale, *bounds = saved.read(self.VALUES).tolist()
        enabled, growth_interval, finite_updates = saved.u64(self.COUNTERS)
        s = trainer.scaler
        if (bool(enabled), growth_interval) != (s.enabled, s.growth_interval) \
                or bounds != [s.minimum, s.maximum, s.growth_factor, s.backoff_factor]:
            raise ResumeRefused(f"{saved.path}: the saved loss-scaler bounds differ from the saved config's")
        if s.enabled and not bounds[0] <= scale <= bounds[1]:
            raise CheckpointError(f"{saved.path}: the saved loss scale {scale} lies outside its bounds")

        def apply() -> None:
            s.scale = scale
            s.finite_updates = finite_updates

        return apply


class EvaluationCurvePart(_Always):
    """Every evaluation so far (scheduled and extra) and the best step they decided."""

    group = StateGroup.EVALUATION
    STEPS = TensorSpec("curve.steps", "U64")
    LOSSES = TensorSpec("curve.losses", "F64", ("train_loss", "validation_loss (NaN: none)"))
    TARGETS = TensorSpec("curve.targets", "U64", ("train_targets", "validation_targets"))
    EXTRA = TensorSpec("curve.extra", "U8")
    BEST_STEP = TensorSpec("curve.best_step", "U64", ("present", "step"))
    BEST_VALIDATION = TensorSpec("curve.best_validation", "F64")
    specs = (STEPS, LOSSES, TARGETS, EXTRA, BEST_STEP, BEST_VALIDATION)

    def capture(self, trainer: Trainer) -> PartCapture:
        curve = trainer.curve
        tensors = self._tensors(trainer)
        last = curve[-1] if curve else None
        record = {
            "points": len(curve),
            "last": None if last is None else {"step": last.step, "train_loss": last.train_loss,
                                                "validation_loss": last.validation_loss, "extra": last.extra},
            "best_step": trainer.best_step,
            "best_validation": trainer.best_validation,
        }
        return PartCapture(tensors, record)

    def _tensors(self, trainer: Trainer) -> list[tuple[str, torch.Tensor]]:
        """The curve's columns and the best step and validation loss, as tensors."""
        curve = trainer.curve
        n = len(curve)
        losses = [[r.train_loss, math.nan if r.validation_loss is None else r.validation_loss] for r in curve]
        best = trainer.best_validation
        return [
            (self.STEPS.name, self.STEPS.make([r.step for r in curve])),
            (self.LOSSES.name, self.LOSSES.make(losses).reshape(n, 2)),
            (self.TARGETS.name, self.TARGETS.make([v for r in curve for v in (r.train_targets, r.validation_targets)])
             .reshape(n, 2)),
            (self.EXTRA.name, self.EXTRA.make([int(r.extra) for r in curve])),
            (self.BEST_STEP.name, self.BEST_STEP.make([int(trainer.best_step is not None), trainer.best_step or 0])),
            (self.BEST_VALIDATION.name, self.BEST_VALIDATION.make([best if best is not None else math.nan])),
        ]

    def check(self, trainer: Trainer, saved: SavedTensors) -> Apply:
        from minigpt_tui.engine.training.trainer import (  # deferred: imports torch
            EvaluationRecord,
        )

        steps = saved.u64(self.STEPS)
        n = len(steps)
        losses = saved.read(self.LOSSES, (n, 2)).tolist()
        targets = saved.u64(self.TARGETS, (n, 2))
        extra = saved.read(self.EXTRA, (n,)).tolist()
        best_present, best_step = saved.u64(self.BEST_STEP)
        best_validation = saved.read(self.BEST_VALIDATION, (1,)).tolist()[0]
        curve = [
            EvaluationRecord(step=steps[i], train_loss=losses[i][0],
                             validation_loss=None if targets[2 * i + 1] == 0 else losses[i][1],
                             train_targets=targets[2 * i], validation_targets=targets[2 * i + 1], extra=bool(extra[i]))
            for i in range(n)
        ]

        def apply() -> None:
            trainer.curve = curve
            trainer.best_step = best_step if best_present else None
            trainer.best_validation = best_validation if best_present else None

        return apply


# -- several processes ----------------------------------------------------------------------------
class RanksPart:
    """With several processes: the world size and every other rank's own data and
    random-stream state (``ranks.R.*``; rank 0's are the ordinary data and randomness
    entries). Captured from the states gathered at the save boundary; on restore each rank
    takes its own, after the parts above put rank 0's in place."""

    group = StateGroup.DISTRIBUTED
    specs: tuple[TensorSpec, ...] = ()

    def applies(self, trainer: Trainer) -> bool:
        return trainer.parallel.distributed

    def capture(self, trainer: Trainer) -> PartCapture:
        from minigpt_tui.engine.training.distributed import (  # deferred: imports torch
            captured_rank_tensors,
        )

        peers = trainer.peer_states
        if peers is None or len(peers) != trainer.parallel.world_size:
            raise CheckpointError("the state of a several-process run is captured by its rank-0 checkpointer only")
        train = trainer.config.train
        record = {"world_size": len(peers), "global_batch": train.batch_size * train.microbatches * len(peers)}
        return PartCapture(captured_rank_tensors(peers), record)

    def check(self, trainer: Trainer, saved: SavedTensors) -> Apply:
        from minigpt_tui.engine.training.distributed import (  # deferred: imports torch
            apply_rank_entries,
            saved_world_size,
        )

        world = saved_world_size(saved.tensors)
        return lambda: apply_rank_entries(trainer, saved.tensors, world)


# In file order: the order of the tensors and of the readable records.
STATE_PARTS: tuple[StatePart, ...] = (
    OptimizerPart(),
    SchedulePart(),
    UpdatePolicyPart(),
    AccumulationPart(),
    DataSizesPart(),
    DocumentOrderPart(),
    ReplacementPart(),
    RandomnessPart(),
    LossScalerPart(),
    EvaluationCurvePart(),
    RanksPart(),
)


def layouts() -> dict[str, list[str]]:
    """What each column of the tensors that have columns means (the file's ``layouts`` record)."""
    return {spec.name: list(spec.columns) for part in STATE_PARTS for spec in part.specs if spec.columns}
