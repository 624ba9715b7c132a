"""Data parallel training with ``torch.distributed``: one process per rank, gloo on the CPU,
nccl on CUDA, launched by ``torchrun`` (or ``minigpt-tui train --nproc N``, which runs
torch's own launcher).

- Each rank draws its own examples: replacement sampling from a generator seeded from
  (data seed, rank); a document order shared by all ranks, of which each rank takes its own
  consecutive share of every global batch. Rank 0's stream is the single-process stream, so
  a one-process run is today's run.
- The global batch is batch size x ranks x microbatches. Losses are weighted per valid
  target of the whole global batch, so the averaged gradient is the one-process gradient of
  the same examples up to the order of the sums.
- Every rank runs the same schedule (evaluations included), so all agree on when to save;
  rank 0 alone writes checkpoints, metrics and manifests. A checkpoint holds every rank's
  data and random-stream state and the world size.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from minigpt_tui.engine.core.errors import (
    CheckpointError,
    ConfigError,
    MiniGPTError,
    ResumeRefused,
)
from minigpt_tui.engine.core.tensors import u64, u64_values
from minigpt_tui.engine.training.batches import DocumentOrder

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from minigpt_tui.engine.training.trainer import Trainer

RANK_PREFIX = "ranks."
WORLD_SIZE_ENTRY = "ranks.world_size"
# Long enough for a paused run: every rank waits in the command agreement while paused.
COLLECTIVE_TIMEOUT = timedelta(hours=24)


@dataclass(frozen=True)
class ProcessWorld:
    """This process's place among the run's processes (one process: rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def world_from_environment(environ: Mapping[str, str] | None = None) -> ProcessWorld:
    """The world ``torchrun`` describes in the environment (RANK, WORLD_SIZE, LOCAL_RANK)."""
    env = os.environ if environ is None else environ
    if "WORLD_SIZE" not in env:
        return ProcessWorld()
    values = {}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        text = env.get(name, "0")
        try:
            values[name] = int(text)
        except ValueError:
            raise ConfigError(f"environment variable {name} must be a whole number, got '{text}'") from None
    world = ProcessWorld(values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"])
    if world.world_size < 1 or not 0 <= world.rank < world.world_size:
        raise ConfigError(f"rank {world.rank} does not fit a world of {world.world_size} processes")
    return world


def backend_for(device_kind: str) -> str:
    """gloo on the CPU, nccl on CUDA; refused in one line when this torch lacks it."""
    if not dist.is_available():
        raise ConfigError("this torch build has no torch.distributed: several processes cannot train together")
    if device_kind == "cuda":
        if not dist.is_nccl_available():
            raise ConfigError("the nccl backend is missing from this torch build: CUDA ranks cannot communicate")
        return "nccl"
    if device_kind == "mps":
        raise ConfigError("several processes on mps are not supported: use one process, or the CPU with gloo")
    if not dist.is_gloo_available():
        raise ConfigError("the gloo backend is missing from this torch build: CPU ranks cannot communicate")
    return "gloo"


def rank_seed(seed: int, rank: int) -> int:
    """The seed of ``rank``'s stream: the seed itself for rank 0 (so one process is today's
    run), else the first 8 bytes of SHA-256 over the seed and the rank."""
    if rank == 0:
        return seed
    digest = hashlib.sha256(f"minigpt-tui/rank/{seed}/{rank}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


class DataParallel:
    """The collectives a trainer and its session need. With one process every operation is
    the identity and nothing of ``torch.distributed`` is touched."""

    def __init__(self, world: ProcessWorld | None = None) -> None:
        self.world = world or ProcessWorld()

    @property
    def rank(self) -> int:
        return self.world.rank

    @property
    def world_size(self) -> int:
        return self.world.world_size

    @property
    def distributed(self) -> bool:
        return self.world.distributed

    def join(self, device_kind: str) -> None:
        """Join the process group (env:// rendezvous, as ``torchrun`` sets it up)."""
        if not self.distributed:
            return

        backend = backend_for(device_kind)
        if not dist.is_initialized():
            dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT)

    def leave(self, *, together: bool = True) -> None:
        """Leave the process group. ``together`` (a normal end): every rank waits at a barrier
        first, so no rank tears gloo down while another still uses it (seen: the rank that
        finished first aborted with "terminate called without an active exception" about one
        run in five). After a failure the barrier is skipped: the other ranks may be gone."""
        if not self.distributed:
            return

        if dist.is_initialized():
            if together:
                dist.barrier()
            dist.destroy_process_group()

    # -- collectives (identity for one process) -------------------------------------------
    def sum_int(self, value: int, device: torch.device | None = None) -> int:
        if not self.distributed:
            return value

        tensor = torch.tensor([value], dtype=torch.int64, device=device)
        dist.all_reduce(tensor)
        return int(tensor.item())

    def sum_float(self, value: float, device: torch.device | None = None) -> float:
        if not self.distributed:
            return value

        tensor = torch.tensor([value], dtype=torch.float64, device=device)
        dist.all_reduce(tensor)
        return float(tensor.item())

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order, on every rank."""
        if not self.distributed:
            return [value]

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, value)
        return out

    def from_writer(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank."""
        if not self.distributed:
            return value

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    # -- the model --------------------------------------------------------------------------
    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """The module the training forward runs through: DistributedDataParallel with
        several processes (it averages the gradients across ranks), else the model."""
        if not self.distributed:
            return model

        device_ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids)

    @contextlib.contextmanager
    def accumulating(self, module: torch.nn.Module, last: bool) -> Iterator[None]:
        """Within an update, gradients are averaged across ranks only on the last microbatch."""
        if self.distributed and not last:
            with module.no_sync():  # type: ignore[operator]
                yield
        else:
            yield


class ShardedDocumentOrder(DocumentOrder):
    """A document order shared by every rank; each global batch's consecutive positions are
    split by rank, and this rank's cursor points at its own share of the next batch."""

    def __init__(self, size: int, order: tuple[int, ...] | None, seed: int, *, rank: int, world_size: int,
                 per_rank: int) -> None:
        super().__init__(size, order, seed)
        self.per_rank = per_rank
        self.skip = (world_size - 1) * per_rank
        self.advance(rank * per_rank)

    def advance(self, count: int) -> None:
        moved = self.cursor + count
        self.epoch += moved // self.size
        self.cursor = moved % self.size

    def position(self) -> int:
        return self.epoch * self.size + self.cursor

    def draw(self, microbatches: int, batch_size: int) -> list[list[int]]:
        taken = super().draw(microbatches, batch_size)
        self.advance(self.skip)
        return taken


# -- per-rank state in the training-state file ---------------------------------------------------
def rank_entries(trainer: Trainer) -> dict[str, Tensor]:
    """This rank's data and random-stream state, as the tensors a checkpoint stores for it."""
    batches = trainer.batches
    entries: dict[str, Tensor] = {"randomness.dropout": u64([trainer.dropout_seed, trainer.dropout_counter])}
    if isinstance(batches, DocumentOrder):
        entries["data.cursor"] = u64([batches.cursor])
        entries["data.epoch"] = u64([batches.epoch])
    else:
        state = batches.state()
        entries["data.generator_state"] = state["generator_state"]
        entries["data.draws"] = state["draws"]
    return entries


def portable_entries(entries: Mapping[str, Tensor]) -> dict[str, tuple[str, Any]]:
    """Entries as plain values for the trip to rank 0 (no tensor travels pickled)."""

    out: dict[str, tuple[str, Any]] = {}
    for name, value in entries.items():
        if value.dtype == torch.uint8:
            out[name] = ("u8", bytes(value.detach().cpu().numpy().tobytes()))
        else:
            out[name] = ("u64", u64_values(value.reshape(-1)))
    return out


def entries_from_portable(values: Mapping[str, tuple[str, Any]]) -> dict[str, Tensor]:

    return {name: torch.frombuffer(bytearray(data), dtype=torch.uint8) if kind == "u8" else u64(data)
            for name, (kind, data) in values.items()}


def captured_rank_tensors(peers: Sequence[Mapping[str, Tensor]]) -> list[tuple[str, Tensor]]:
    """The ``ranks.*`` tensors of a checkpoint saved by several processes (none for one:
    a single-process checkpoint is unchanged)."""
    if len(peers) <= 1:
        return []
    tensors: list[tuple[str, Tensor]] = [(WORLD_SIZE_ENTRY, u64([len(peers)]))]
    for rank, entries in enumerate(peers):
        if rank == 0:
            continue  # rank 0's state is the file's ordinary data and randomness entries
        tensors += [(f"{RANK_PREFIX}{rank}.{name}", value.detach().cpu()) for name, value in sorted(entries.items())]
    return tensors


def saved_world_size(tensors: Mapping[str, Tensor]) -> int:
    if WORLD_SIZE_ENTRY not in tensors:
        return 1
    (size,) = u64_values(tensors[WORLD_SIZE_ENTRY].reshape(-1))
    return size


def world_size_note(saved: int, now: int, step: int) -> str | None:
    """None when the world size is unchanged; else the continuation note of the change."""
    if saved == now:
        return None
    return (f"world size changed at step {step}: {saved} -> {now} processes (the global batch and each rank's "
            "data stream changed)")


def refuse_world_size_change(saved: int, now: int, *, allowed: bool) -> None:
    if saved != now and not allowed:
        raise ResumeRefused(
            f"the checkpoint was saved by {saved} process{'es' if saved != 1 else ''}, this run has {now}: "
            "the global batch would change; pass --allow-world-size-change to redistribute the data position"
        )


def apply_rank_entries(trainer: Trainer, tensors: Mapping[str, Tensor], saved_world: int) -> None:
    """Put this rank's saved data and random-stream state into a trainer that already holds
    rank 0's. With another world size the data position is redistributed: a shared document
    order continues from rank 0's position; a rank without a saved stream starts its own."""
    rank = trainer.parallel.rank
    batches = trainer.batches
    if saved_world != trainer.parallel.world_size and _redistributed(trainer, saved_world):
        return
    if rank == 0:
        return
    prefix = f"{RANK_PREFIX}{rank}."
    own = {name.removeprefix(prefix): value for name, value in tensors.items() if name.startswith(prefix)}
    if "randomness.dropout" not in own:
        raise ResumeRefused(f"the checkpoint holds no state for rank {rank}")
    seed, counter = u64_values(own["randomness.dropout"])
    if seed != trainer.dropout_seed:
        raise ResumeRefused(f"the saved dropout stream of rank {rank} differs from this rank's")
    _load_rank_batches(batches, own)
    trainer.dropout_counter = counter


def _redistributed(trainer: Trainer, saved_world: int) -> bool:
    """Under another world size, move this rank's data position on; True when the rank had
    no saved stream and has started its own (nothing saved is left to load)."""
    rank = trainer.parallel.rank
    batches = trainer.batches
    if isinstance(batches, ShardedDocumentOrder):
        batches.advance(rank * batches.per_rank)
    if rank < saved_world:
        return False
    if not isinstance(batches, DocumentOrder):
        batches.generator.manual_seed(rank_seed(trainer.config.seeds.data, rank))
        batches.draws = 0
    trainer.dropout_counter = 0
    return True


def _load_rank_batches(batches: Any, own: Mapping[str, Tensor]) -> None:
    """This rank's saved data position: a document order's cursor and epoch, or a
    sampler's generator state and draws."""
    if isinstance(batches, DocumentOrder):
        (batches.cursor,) = u64_values(own["data.cursor"])
        (batches.epoch,) = u64_values(own["data.epoch"])
    else:
        batches.load_state({"generator_state": own["data.generator_state"], "draws": own["data.draws"]})


# -- the session's side -------------------------------------------------------------------------
class CommandAgreement:
    """Commands and stop requests agreed by every rank at each update boundary, in one small
    all-reduce: a stop anywhere stops all; rank 0's commands (from the app or the control
    file) act on all, each kind once, in the order of ``AGREED_COMMANDS``."""

    AGREED_COMMANDS = ("pause", "resume", "evaluate", "save", "stop")

    def __init__(self, parallel: DataParallel, device: torch.device | None = None) -> None:
        self.parallel = parallel
        self.device = device  # nccl exchanges CUDA tensors only

    def agree(self, stop: bool, commands: list[str]) -> tuple[bool, list[str]]:
        if not self.parallel.distributed:
            return stop, commands

        mine = commands if self.parallel.rank == 0 else []
        flags = torch.tensor([int(stop)] + [int(name in mine) for name in self.AGREED_COMMANDS],
                             dtype=torch.int64, device=self.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        agreed = [name for name, flag in zip(self.AGREED_COMMANDS, flags.tolist()[1:]) if flag]
        return bool(flags[0]), agreed


class WriterCheckpointer:
    """Saves with every rank's state gathered; rank 0 alone writes (``inner`` is None on
    the other ranks). Every rank learns the outcome, so all count the save the same way."""

    def __init__(self, parallel: DataParallel, inner: Any | None) -> None:
        self.parallel = parallel
        self.inner = inner

    def save(self, trainer: Trainer, reason: str) -> Any:
        gathered = self.parallel.gather(portable_entries(rank_entries(trainer)))
        outcome: tuple[str, str]
        if self.inner is not None:
            trainer.peer_states = [entries_from_portable(values) for values in gathered]
            try:
                outcome = ("saved", str(self.inner.save(trainer, reason)))
            except MiniGPTError as err:
                outcome = ("refused", str(err))
            finally:
                trainer.peer_states = None
        else:
            outcome = ("refused", "rank 0 did not report")
        kind, text = self.parallel.from_writer(outcome)
        if kind != "saved":
            raise CheckpointError(text)
        return Path(text)

    def take_notes(self) -> list[str]:
        """Rank 0's notes about checkpoint folders kept for a user's files."""
        return self.inner.take_notes() if self.inner is not None else []
