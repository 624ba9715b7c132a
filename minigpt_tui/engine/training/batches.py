"""Examples cut from records, padded batches, and two batch policies with savable state.

A record's ids (BOS + text + EOS) that do not fit the context are cut into consecutive
windows of ``context + 1`` ids that overlap by one id, so every target is predicted once.
Padded positions repeat EOS as input and carry target -1: no target, masked from the loss.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from minigpt_tui.engine.core.errors import CorpusError
from minigpt_tui.engine.core.tensors import bytes_digest, u64, u64_values
from minigpt_tui.engine.core.tokenizer import EOS, ByteBPETokenizer

NO_TARGET = -1


@dataclass(frozen=True)
class Example:
    ids: tuple[int, ...]
    record: int  # index of the source record within its split
    window: int


@dataclass(frozen=True)
class Batch:
    inputs: Tensor  # [B, T] int64
    targets: Tensor  # [B, T] int64, NO_TARGET where padded
    valid_targets: int


def make_examples(texts: list[str], tokenizer: ByteBPETokenizer, context: int,
                  encode: Callable[[list[str]], list[list[int]]] | None = None) -> list[Example]:
    """Each record's ids (``tokenizer.encode_many``, or ``encode`` where given: chat records
    are encoded as their template renders them), cut into windows that fit the context."""
    examples: list[Example] = []
    for record, ids in enumerate((encode or tokenizer.encode_many)(texts)):
        if len(ids) <= context + 1:
            examples.append(Example(tuple(ids), record, 0))
            continue
        for window, start in enumerate(range(0, len(ids) - 1, context)):
            examples.append(Example(tuple(ids[start : start + context + 1]), record, window))
    return examples


def make_batch(examples: list[Example]) -> Batch:
    width = max(len(e.ids) for e in examples) - 1
    inputs: list[int] = []
    targets: list[int] = []
    for example in examples:
        pad = width - (len(example.ids) - 1)
        inputs.extend(example.ids[:-1] + (EOS,) * pad)
        targets.extend(example.ids[1:] + (NO_TARGET,) * pad)
    shape = (len(examples), width)
    valid = sum(len(e.ids) - 1 for e in examples)
    return Batch(torch.tensor(inputs).view(shape), torch.tensor(targets).view(shape), valid)


def evaluation_batches(examples: list[Example], batch_size: int) -> list[Batch]:
    """The complete split in declared order, in batches of a fixed size."""
    return [make_batch(examples[i : i + batch_size]) for i in range(0, len(examples), batch_size)]


class ReplacementSampler:
    """Draws example indices with replacement from a dedicated generator (seed 003)."""

    kind = "replacement"

    def __init__(self, size: int, seed: int) -> None:
        if size < 1:
            raise CorpusError("the training split has no examples")
        self.size = size
        self.generator = torch.Generator().manual_seed(seed)
        self.draws = 0  # batches drawn; display only, the generator state is the truth

    def draw(self, microbatches: int, batch_size: int) -> list[list[int]]:
        self.draws += microbatches
        return [
            torch.randint(self.size, (batch_size,), generator=self.generator).tolist()
            for _ in range(microbatches)
        ]

    def peek(self, microbatches: int, batch_size: int) -> list[list[int]]:
        saved, draws = self.generator.get_state(), self.draws
        try:
            return self.draw(microbatches, batch_size)
        finally:
            self.generator.set_state(saved)
            self.draws = draws

    def state(self) -> dict[str, Tensor]:
        return {"generator_state": self.generator.get_state().clone(), "draws": u64([self.draws])}

    def load_state(self, state: dict[str, Tensor]) -> None:
        self.generator.set_state(state["generator_state"].to(torch.uint8).clone())
        if "draws" in state:
            (self.draws,) = u64_values(state["draws"])

    def progress(self) -> dict[str, object]:
        return {"draws": self.draws}

    def generator_digest(self) -> str:
        return bytes_digest(self.generator.get_state())


class DocumentOrder:
    """A fixed order over the examples, a cursor into that order, and a traversal count."""

    kind = "document_order"

    def __init__(self, size: int, order: tuple[int, ...] | None, seed: int) -> None:
        if size < 1:
            raise CorpusError("the training split has no examples")
        if order:
            if len(order) != size:
                raise CorpusError(
                    f"train.document_order has {len(order)} entries but the split has {size} examples"
                )
            self.order = tuple(order)
        else:
            generator = torch.Generator().manual_seed(seed)
            self.order = tuple(torch.randperm(size, generator=generator).tolist())
        self.size = size
        self.cursor = 0
        self.epoch = 0

    def _take(self, count: int) -> list[int]:
        return [self.order[(self.cursor + i) % self.size] for i in range(count)]

    def draw(self, microbatches: int, batch_size: int) -> list[list[int]]:
        taken = self._take(microbatches * batch_size)
        advanced = self.cursor + len(taken)
        self.epoch += advanced // self.size
        self.cursor = advanced % self.size
        return [taken[i * batch_size : (i + 1) * batch_size] for i in range(microbatches)]

    def peek(self, microbatches: int, batch_size: int) -> list[list[int]]:
        taken = self._take(microbatches * batch_size)
        return [taken[i * batch_size : (i + 1) * batch_size] for i in range(microbatches)]

    def state(self) -> dict[str, Tensor]:
        return {
            "order": u64(self.order),
            "cursor": u64([self.cursor]),
            "epoch": u64([self.epoch]),
        }

    def load_state(self, state: dict[str, Tensor]) -> None:
        order = tuple(u64_values(state["order"]))
        if sorted(order) != list(range(self.size)):
            raise CorpusError("saved document order does not match the training split")
        self.order = order
        (self.cursor,) = u64_values(state["cursor"])
        (self.epoch,) = u64_values(state["epoch"])

    def progress(self) -> dict[str, object]:
        return {"order": list(self.order), "cursor": self.cursor, "epoch": self.epoch}
