"""The trainer: one call to :meth:`Trainer.update` is one complete logical update.

An update draws its microbatches from the batch policy, runs forward and backward on each
(losses weighted per valid target across all microbatches of the update), unscales and
checks the gradients when loss scaling is on, clips the global norm, steps AdamW with the
scheduled rate of the 1-based committed step, clears the gradients, and draws the
monitoring sample. Evaluating never touches a training random stream, so evaluating,
saving and pausing never change the trajectory.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from minigpt_tui.engine.core.config import RunConfig, TrainConfig
from minigpt_tui.engine.core.devices import choose_device
from minigpt_tui.engine.core.errors import (
    CaptureRefused,
    ConfigError,
    CorpusError,
    EvaluationInterrupted,
)
from minigpt_tui.engine.core.precision import precision_of
from minigpt_tui.engine.core.tensors import bytes_digest, digest_tensors
from minigpt_tui.engine.core.tokenizer import BOS, ByteBPETokenizer
from minigpt_tui.engine.training.batches import (
    NO_TARGET,
    Batch,
    DocumentOrder,
    Example,
    ReplacementSampler,
    evaluation_batches,
    make_batch,
    make_examples,
)
from minigpt_tui.engine.training.chat_tokens import chat_stream, encode_plain
from minigpt_tui.engine.training.corpus import Corpus
from minigpt_tui.engine.training.distributed import (
    DataParallel,
    ShardedDocumentOrder,
    rank_seed,
)
from minigpt_tui.engine.models.model import DropoutKey, MiniGPT, count_parameters, evaluating
from minigpt_tui.engine.training.optimizer import AdamW
from minigpt_tui.engine.training.source_index import SourceIndex
from minigpt_tui.engine.training.stream import (
    TRAINING_TOKENIZER,
    Progress,
    TokenStream,
    TokenWindows,
    check_stream,
    encode_records,
)
from minigpt_tui.engine.training.token_cache import cached_stream


def autocast_for(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The forward's autocast region: bf16/fp16 compute over float32 weights, else none."""
    compute = precision_of(precision).autocast_dtype()
    if compute is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=compute)


def mixed_precision_note(precision: str, device_kind: str) -> str | None:
    """What a user should know before training in bf16 on this processor (None: nothing)."""
    if precision_of(precision).autocast_name != "bfloat16" or device_kind != "cpu":
        return None
    if torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return None
    return "this processor has no native bf16: bf16 on the CPU is emulated and can be much slower than fast"


def apply_precision(train: TrainConfig) -> None:
    """Process-wide numeric settings: the run's thread count (automatic: the training
    session chooses and adapts it) and, where bits are promised, deterministic algorithms."""
    threads = train.effective_threads
    if not threads.auto:
        torch.set_num_threads(threads.count)
    if train.precision_kind.deterministic:
        _deterministic_algorithms(True)
    elif torch.are_deterministic_algorithms_enabled():
        _deterministic_algorithms(False)


def _deterministic_algorithms(mode: bool) -> None:
    """``torch.use_deterministic_algorithms(mode)`` without loading torch's compiler: the
    public call imports it (about a second) only to copy the flag into the compiler's
    config, and this project never compiles. Once the compiler is loaded anyway, or where
    torch has no such switch, the public call runs."""
    switch = getattr(torch._C, "_set_deterministic_algorithms", None)
    if switch is None or "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(mode)
    else:
        switch(mode, warn_only=False)


def scheduled_lr(train: TrainConfig, step: int) -> float:
    """The rate of update ``step`` (1-based): linear warmup, then cosine to ``final_lr``."""
    if train.schedule == "constant":
        return train.lr
    if train.warmup and step <= train.warmup:
        return train.lr * step / train.warmup
    span = train.steps - train.warmup
    if span <= 0:
        return train.lr
    progress = (step - train.warmup) / span
    return train.final_lr + (train.lr - train.final_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def target_loss_sum(logits: Tensor, targets: Tensor) -> Tensor:
    """Summed negative log-likelihood over valid targets; padded positions count nothing.
    Divided by the update's (or split's) valid-target count, every event weighs the same."""
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=NO_TARGET, reduction="sum"
    )


class LossScaler:
    """Dynamic loss scaling with bounds: backs off on a non-finite gradient, grows after
    ``growth_interval`` consecutive finite updates, and always stays within [min, max]."""

    def __init__(self, train: TrainConfig) -> None:
        self.enabled = train.loss_scale or train.precision_kind.scales_loss
        self.scale = train.loss_scale_init if self.enabled else 1.0
        self.minimum = train.loss_scale_min
        self.maximum = train.loss_scale_max
        self.growth_interval = train.loss_scale_growth_interval
        self.growth_factor = train.loss_scale_growth_factor
        self.backoff_factor = train.loss_scale_backoff_factor
        self.finite_updates = 0  # consecutive finite updates toward the next growth

    def update(self, finite: bool) -> None:
        if not self.enabled:
            return
        if not finite:
            self.scale = max(self.minimum, self.scale * self.backoff_factor)
            self.finite_updates = 0
            return
        self.finite_updates += 1
        if self.finite_updates >= self.growth_interval:
            self.scale = min(self.maximum, self.scale * self.growth_factor)
            self.finite_updates = 0


@dataclass(frozen=True)
class UpdateRecord:
    step: int  # committed successful updates after this one
    lr: float
    loss: float  # forward mean, nats per valid target, before this update's commit
    grad_norm: float
    loss_scale: float
    next_loss_scale: float
    applied: bool
    batch: list[list[int]]  # example indices per microbatch
    valid_targets: int
    dropout_counter: int  # next counter after this update
    data_progress: dict[str, Any]
    monitoring_ids: list[int]
    seconds: float = field(default=0.0, compare=False)
    tokens_per_second: float = field(default=0.0, compare=False)

    def exact_fields(self) -> dict[str, Any]:
        """Everything that must match bit for bit between equivalent runs."""
        data = asdict(self)
        data.pop("seconds")
        data.pop("tokens_per_second")
        return data


@dataclass(frozen=True)
class EvaluationRecord:
    step: int
    train_loss: float
    validation_loss: float | None
    train_targets: int
    validation_targets: int
    extra: bool = False  # off schedule: never changes the best-step rule


@dataclass
class TrainingSetup:
    """What a trainer is built from: resolved config, corpus and its tokenizer, and in
    stream mode the corpus's token arrays (encoded on first use, through the token cache)."""

    config: RunConfig
    corpus: Corpus
    tokenizer: ByteBPETokenizer
    stream: TokenStream | None = None
    progress: Progress | None = None

    @staticmethod
    def build(
        config: RunConfig,
        corpus: Corpus,
        tokenizer: ByteBPETokenizer | None = None,
        progress: Progress | None = None,
    ) -> TrainingSetup:
        """Train the tokenizer (unless given); in stream mode also encode the corpus, so
        that every corpus problem is found before anything is written."""
        if tokenizer is None:
            merges = config.tokenizer.merges
            if progress is not None and merges:
                progress(TRAINING_TOKENIZER, 0, 1)
            # Without merges the records are not needed (a restart from the cache never reads them).
            texts = merge_training_records(corpus.train, config.tokenizer.train_bytes) if merges else []
            tokenizer = ByteBPETokenizer.train(texts, merges)
            if progress is not None and merges:
                progress(TRAINING_TOKENIZER, 1, 1)
        setup = TrainingSetup(config, corpus, tokenizer, progress=progress)
        if config.corpus.mode == "stream":
            setup.token_stream()
        return setup

    def corpus_summary(self) -> dict[str, object]:
        """The corpus's summary with its mode (and, in stream mode, its token counts)."""
        summary: dict[str, object] = {**self.corpus.summary(), "mode": self.config.corpus.mode}
        if self.config.corpus.mode == "stream":
            stream = self.token_stream()
            summary.update(train_tokens=int(stream.train.size), validation_tokens=int(stream.validation.size),
                           token_dtype=stream.train.dtype.name)
        return summary

    def token_stream(self) -> TokenStream:
        """Both splits as token arrays: from the cache when an intact entry exists."""
        if self.stream is None:
            corpus, tokenizer, context = self.corpus, self.tokenizer, self.config.window

            def build() -> TokenStream:
                if corpus.chat:  # as the template renders each record, with the masks of --train-on assistant
                    return chat_stream(corpus.train, corpus.validation, corpus.turns, tokenizer, corpus.source,
                                       self.progress)
                return TokenStream(
                    encode_records(corpus.train, tokenizer, progress=self.progress, label="encoding train"),
                    encode_records(corpus.validation, tokenizer, progress=self.progress, label="encoding validation"),
                )

            def check(stream: TokenStream) -> None:
                check_stream(stream, context, corpus.source, has_validation=corpus.counts.validation_records > 0)

            warn = getattr(self.progress, "warn", None)
            stream = cached_stream(corpus.identity, tokenizer.identity, corpus.source, build, check,
                                   progress=self.progress, vocab_size=tokenizer.vocab_size,
                                   warn=(lambda message: warn("token cache", message)) if warn else None)
            check(stream)
            SourceIndex.at().remember(corpus)  # the next run on these bytes skips reading the records
            self.stream = stream
        return self.stream


def merge_training_records(texts: list[str], limit: int) -> list[str]:
    """The leading records whose UTF-8 bytes reach ``limit`` (whole records, at least one);
    every record when ``limit`` is 0."""
    if not limit:
        return texts
    taken, size = [], 0
    for text in texts:
        if taken and size >= limit:
            break
        taken.append(text)
        size += len(text.encode("utf-8"))
    return taken


class Trainer:
    def __init__(self, setup: TrainingSetup, initial_weights: dict[str, Tensor] | None = None,
                 parallel: DataParallel | None = None) -> None:
        self.setup = setup
        # Asked between evaluation batches: True abandons the evaluation (nothing recorded),
        # so a stop is honoured within a batch even during a long complete-split evaluation.
        self.interrupted: Callable[[], bool] | None = None
        self.config = config = setup.config
        train = config.train
        self.dtype = train.precision_kind.torch_dtype()
        # One process unless a launcher made several; rank 0's streams are the one-process ones.
        self.parallel = parallel or DataParallel()
        rank, world = self.parallel.rank, self.parallel.world_size
        self.placement = choose_device(train.device, local_rank=self.parallel.world.local_rank)
        self.device = self.placement.torch_device()
        self.tokenizer = setup.tokenizer
        self.stream_mode = config.corpus.mode == "stream"
        self._load_examples(setup, config.window)
        if not self.train_examples:
            raise CorpusError("the training split has no records")
        if world > len(self.train_examples):
            raise ConfigError(
                f"{world} processes but the training split has only {len(self.train_examples)} examples: "
                "each process needs at least one"
            )

        self.model = MiniGPT(
            config.model, self.tokenizer.vocab_size, self.dtype, fused_attention=train.precision_kind.fused
        )
        if initial_weights is None:
            self.model.initialize(config.seeds.init)
        self.model.to(self.device)
        if initial_weights is not None:
            # Every parameter, or a refusal: a seeded initialization would only be overwritten
            # (it draws from a generator of its own, so skipping it changes no other stream;
            # 11 s of a 135M fine-tune's start).
            self.load_weights(initial_weights)
        self.param_names = {p: n for n, p in self.model.named_parameters()}
        self.optimizer = self._new_optimizer()
        self.batches: ReplacementSampler | DocumentOrder = self._new_batch_order(rank, world)
        # The module the training forward runs through (DDP with several processes).
        self.forward_module = self.parallel.wrap(self.model, self.device)
        self.dropout_seed = rank_seed(config.seeds.dropout, rank)
        # Every rank's own data and random-stream state, gathered by rank 0 while it saves.
        self.peer_states: list[dict[str, Tensor]] | None = None
        self.dropout_counter = 0
        self.sampling = torch.Generator().manual_seed(config.seeds.sampling)
        self.scaler = LossScaler(train)
        self.pending_microbatches = 0
        self.step = 0
        self.curve: list[EvaluationRecord] = []
        self.best_step: int | None = None
        self.best_validation: float | None = None
        evaluation = torch.Generator().manual_seed(config.seeds.evaluation)
        self._train_eval = self._evaluation_set(self.train_examples, evaluation)
        self._validation_eval = self._evaluation_set(self.validation_examples, evaluation)

    def _load_examples(self, setup: TrainingSetup, context: int) -> None:
        """The training and validation examples: windows over the token stream in stream
        mode, else one example per record."""
        if self.stream_mode:
            stream = setup.token_stream()
            self.train_examples: list[Example] | TokenWindows = TokenWindows(stream.train, context, stream.train_mask)
            self.validation_examples: list[Example] | TokenWindows = TokenWindows(stream.validation, context,
                                                                                  stream.validation_mask)
        else:
            corpus = setup.corpus
            encode = (lambda texts: [encode_plain(self.tokenizer, t) for t in texts]) if corpus.chat else None
            self.train_examples = make_examples(corpus.train, self.tokenizer, context, encode)
            self.validation_examples = make_examples(corpus.validation, self.tokenizer, context, encode)

    def _new_optimizer(self) -> AdamW:
        """AdamW over the model's parameters: weight decay on matrices only."""
        train = self.config.train
        decay = [p for n, p in self.model.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in self.model.named_parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": train.weight_decay}]
        if no_decay:
            groups.append({"params": no_decay, "weight_decay": 0.0})
        # Exact precision keeps the reference per-parameter loop; fast precision takes the
        # fused kernel (one pass over each parameter's moments).
        kernel = {"fused": True} if train.precision_kind.fused else {"foreach": False}
        return AdamW(groups, lr=scheduled_lr(train, 1), betas=train.betas, eps=train.eps, **kernel)

    def _new_batch_order(self, rank: int, world: int) -> ReplacementSampler | DocumentOrder:
        """The order training examples are drawn in: sampled with replacement, or a document
        order (this rank's shard of it with several processes)."""
        config = self.config
        train = config.train
        if train.batch_policy == "replacement":
            return ReplacementSampler(len(self.train_examples), rank_seed(config.seeds.data, rank))
        if world > 1:
            return ShardedDocumentOrder(len(self.train_examples), train.document_order, config.seeds.data,
                                        rank=rank, world_size=world, per_rank=train.microbatches * train.batch_size)
        return DocumentOrder(len(self.train_examples), train.document_order, config.seeds.data)

    def _evaluation_set(self, examples: list[Example] | TokenWindows, generator: torch.Generator) -> list[Batch]:
        """The batches every evaluation reads: the complete split (non-overlapping windows
        in stream mode), or ``eval_batches`` fixed batches drawn once from ``generator``
        when the complete split would need more batches than that."""
        train = self.config.train
        size = train.eval_batch_size
        if isinstance(examples, TokenWindows):
            complete = examples.tiling()
            if train.eval_batches and len(complete) > train.eval_batches * size:
                starts = torch.randint(len(examples), (train.eval_batches, size), generator=generator)
                return [examples.batch(row.numpy()) for row in starts]
            return [examples.batch(complete[i : i + size]) for i in range(0, len(complete), size)]
        if train.eval_batches and len(examples) > train.eval_batches * size:
            drawn = torch.randint(len(examples), (train.eval_batches, size), generator=generator).tolist()
            return [make_batch([examples[i] for i in row]) for row in drawn]
        return evaluation_batches(examples, size)

    @property
    def evaluation_rule(self) -> str:
        """How evaluation reads each split, in words (for summaries and metadata)."""
        t = self.config.train
        if not t.eval_every:
            return "none scheduled (train.eval_every = 0)"
        counts = f"{len(self._train_eval)} + {len(self._validation_eval)} batches of {t.eval_batch_size}"
        if not t.eval_batches:
            return f"complete splits ({counts})"
        return (
            f"at most {t.eval_batches} fixed batches per split, drawn once from seeds.evaluation; "
            f"a split that fits in them is read completely ({counts})"
        )

    def data_summary(self) -> dict[str, Any]:
        """The corpus mode and what training draws from: examples, or stream windows."""
        if isinstance(self.train_examples, TokenWindows):
            return {
                "mode": "stream",
                "train_tokens": int(self.train_examples.tokens.size),
                "validation_tokens": int(self.validation_examples.tokens.size),
                "train_windows": len(self.train_examples),
                "window": self.config.window + 1,
            }
        return {"mode": "records", "train_examples": len(self.train_examples),
                "validation_examples": len(self.validation_examples)}

    def _batch(self, indices: list[int]) -> Batch:
        if isinstance(self.train_examples, TokenWindows):
            return self.train_examples.batch(indices)
        return make_batch([self.train_examples[i] for i in indices])

    # -- facts ---------------------------------------------------------------------------
    @property
    def parameter_counts(self) -> tuple[int, int]:
        return count_parameters(self.model)

    @property
    def finished(self) -> bool:
        return self.step >= self.config.train.steps

    def evaluation_due(self) -> bool:
        every = self.config.train.eval_every
        if not every:
            return False
        if self.step % every != 0 and self.step != self.config.train.steps:
            return False
        return not any(r.step == self.step and not r.extra for r in self.curve)

    def next_batch(self) -> list[list[int]]:
        """The batch the next update would draw, without drawing it."""
        t = self.config.train
        return self.batches.peek(t.microbatches, t.batch_size)

    # -- one update ----------------------------------------------------------------------
    def update(self) -> UpdateRecord:
        if self.finished:
            raise ConfigError(f"all {self.config.train.steps} scheduled updates are complete")
        started = time.perf_counter()
        train = self.config.train
        step = self.step + 1
        lr = scheduled_lr(train, step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        indices = self.batches.draw(train.microbatches, train.batch_size)
        batches = [self._batch(idx) for idx in indices]
        parallel = self.parallel
        # Weighted per valid target of the whole global batch; DDP averages over the ranks,
        # so each rank's share is multiplied back by the world size (exact: one process is x1).
        total_valid = parallel.sum_int(sum(b.valid_targets for b in batches), self.device)
        weight = (self.scaler.scale * parallel.world_size) / total_valid
        scale = self.scaler.scale
        loss_sum, tokens = self._accumulate_gradients(batches, weight)
        loss_sum = parallel.sum_float(loss_sum, self.device)
        indices, data_progress = self._gathered_progress(indices)
        finite, grad_norm = self._apply_gradients(scale, step)
        monitoring = self._monitoring_sample()
        seconds = time.perf_counter() - started
        return UpdateRecord(
            step=self.step,
            lr=lr,
            loss=loss_sum / total_valid,
            grad_norm=grad_norm,
            loss_scale=scale,
            next_loss_scale=self.scaler.scale,
            applied=finite,
            batch=indices,
            valid_targets=total_valid,
            dropout_counter=self.dropout_counter,
            data_progress=data_progress,
            monitoring_ids=monitoring,
            seconds=seconds,
            tokens_per_second=tokens / seconds if seconds > 0 else 0.0,
        )

    def _accumulate_gradients(self, batches: list[Any], weight: float) -> tuple[float, int]:
        """Forward and backward over each microbatch in order, gradients summed in place;
        returns this rank's summed loss and its token count."""
        train = self.config.train
        model = self.model
        parallel = self.parallel
        model.train()
        loss_sum = 0.0
        tokens = 0
        with torch.enable_grad():
            for number, batch in enumerate(batches, start=1):
                self.pending_microbatches += 1
                key = DropoutKey(self.dropout_seed, self.dropout_counter) if model.config.dropout > 0 else None
                with parallel.accumulating(self.forward_module, last=number == len(batches)):
                    with autocast_for(train.precision, self.device):
                        out = self.forward_module(batch.inputs.to(self.device), dropout=key, recompute=train.recompute)
                    # Advanced here, outside any recomputed region: recomputation reuses the key.
                    self.dropout_counter += out.consumed
                    # The loss in the weights' dtype (mixed precisions: float32 over bf16/fp16 logits).
                    summed = target_loss_sum(out.logits.to(self.dtype), batch.targets.to(self.device))
                    loss_sum += float(summed.detach())
                    (summed * weight).backward()
                tokens += batch.inputs.numel()
        return loss_sum, tokens

    def _gathered_progress(self, indices: list[Any]) -> tuple[list[Any], Any]:
        """This update's batch and data position; with several ranks, every rank's."""
        data_progress = self.batches.progress()
        if self.parallel.distributed:
            views = self.parallel.gather((indices, data_progress))
            indices = [microbatch for rank_indices, _ in views for microbatch in rank_indices]
            data_progress = {"ranks": [progress for _, progress in views]}
        return indices, data_progress

    def _apply_gradients(self, scale: float, step: int) -> tuple[bool, float]:
        """Unscale, check, clip and apply the summed gradients (skipped when not finite),
        then let the loss scaler react; returns (applied, gradient norm before clipping)."""
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        finite = self._unscaled_finite(params, scale)
        grads = [p.grad for p in params if p.grad is not None]
        total_norm = torch.nn.utils.get_total_norm(grads, foreach=True)
        if self.config.train.clip > 0:
            torch.nn.utils.clip_grads_with_norm_(params, self.config.train.clip, total_norm, foreach=True)
        grad_norm = float(total_norm)
        if finite:  # the averaged gradients are the same on every rank: so is this decision
            self.optimizer.step()
            self.step = step
        self.scaler.update(finite)
        self.optimizer.zero_grad(set_to_none=True)
        self.pending_microbatches = 0
        return finite, grad_norm

    def _unscaled_finite(self, params: list[Tensor], scale: float) -> bool:
        """With loss scaling, divide the gradients by ``scale`` and say whether every one is
        finite; without it, True (nothing touched)."""
        if not self.scaler.enabled:
            return True
        for p in params:
            if p.grad is not None:
                p.grad.div_(scale)
        return all(bool(torch.isfinite(p.grad).all()) for p in params if p.grad is not None)

    @torch.no_grad()
    def _monitoring_sample(self) -> list[int]:
        """Sample ``monitor_tokens`` ids after the first training example's first token.
        Uses only the monitoring generator; the sample never feeds the training loss."""
        count = self.config.train.monitor_tokens
        if not count or self.parallel.rank != 0:  # rank 0 alone reports, so rank 0 alone samples
            return []
        model = self.model
        ids = [BOS, self.train_examples[0].ids[1]]
        out: list[int] = []
        with evaluating(model):
            for _ in range(count):
                if len(ids) >= model.config.context:
                    break
                logits = model(torch.tensor([ids], device=self.device)).logits[0, -1]
                probs = torch.softmax(logits.to(device="cpu", dtype=torch.float64), dim=-1)
                probs[BOS] = 0.0
                if not bool(torch.isfinite(probs).all()) or float(probs.sum()) <= 0.0:
                    break  # a diverged model: non-finite logits never reach sampling (nothing drawn)
                choice = int(torch.multinomial(probs, 1, generator=self.sampling))
                ids.append(choice)
                out.append(choice)
        return out

    # -- evaluation ----------------------------------------------------------------------
    @torch.no_grad()
    def split_loss(self, batches: list) -> tuple[float, int]:
        total, count = 0.0, 0
        for batch in batches:
            if self.interrupted is not None and self.interrupted():  # a stop asked mid-evaluation
                raise EvaluationInterrupted(self.step)
            logits = self.model(batch.inputs.to(self.device)).logits
            total += float(target_loss_sum(logits, batch.targets.to(self.device)))
            count += batch.valid_targets
        return total, count

    def evaluate(self, extra: bool = False) -> EvaluationRecord:
        """Event-weighted mean loss over the evaluation batches of both splits."""
        with evaluating(self.model):
            train_total, train_count = self.split_loss(self._train_eval)
            val_total, val_count = self.split_loss(self._validation_eval)
        record = EvaluationRecord(
            step=self.step,
            train_loss=train_total / train_count,
            validation_loss=val_total / val_count if val_count else None,
            train_targets=train_count,
            validation_targets=val_count,
            extra=extra,
        )
        self.curve.append(record)
        if not extra and record.validation_loss is not None:
            if self.best_validation is None or record.validation_loss < self.best_validation:
                self.best_validation = record.validation_loss
                self.best_step = record.step
        return record

    # -- weights and digests -------------------------------------------------------------
    def named_weights(self) -> list[tuple[str, Tensor]]:
        """Distinct learned tensors by name; the tied table appears once."""
        return [(n, p.detach().cpu()) for n, p in self.model.named_parameters()]

    def load_weights(self, weights: dict[str, Tensor]) -> None:
        names = [n for n, _ in self.model.named_parameters()]
        missing = [n for n in names if n not in weights]
        extra = [n for n in weights if n not in names]
        if missing or extra:
            raise ConfigError(f"weights do not fit the model: missing {missing[:3]}, unexpected {extra[:3]}")
        with torch.no_grad():
            for name, param in self.model.named_parameters():
                value = weights[name]
                if tuple(value.shape) != tuple(param.shape):
                    raise ConfigError(f"weight {name} has shape {list(value.shape)}, expected {list(param.shape)}")
                param.copy_(value.to(param.dtype))

    def named_optimizer_tensors(self) -> list[tuple[str, Tensor]]:
        out: list[tuple[str, Tensor]] = []
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                state = self.optimizer.state.get(p, {})
                for key in sorted(state):
                    value = state[key]
                    if isinstance(value, Tensor):
                        out.append((f"{self.param_names[p]}.{key}", value.cpu()))
        return out

    def weights_digest(self) -> str:
        return digest_tensors(self.named_weights())

    def optimizer_digest(self) -> str:
        return digest_tensors(self.named_optimizer_tensors())

    def state_digest(self) -> str:
        """SHA-256 over every parameter's and optimizer tensor's name, dtype, shape, bytes."""
        return digest_tensors([*((f"param/{name}", tensor) for name, tensor in self.named_weights()),
                               *((f"optim/{name}", tensor) for name, tensor in self.named_optimizer_tensors())])

    def progress(self) -> dict[str, Any]:
        """Data, random and scaler progress: what decides the next update besides tensors."""
        return {
            "step": self.step,
            "data": self.batches.progress(),
            "data_generator_sha256": (
                self.batches.generator_digest() if isinstance(self.batches, ReplacementSampler) else None
            ),
            "next_batch": self.next_batch(),
            "dropout_seed": self.dropout_seed,
            "dropout_counter": self.dropout_counter,
            "sampling_generator_sha256": bytes_digest(self.sampling.get_state()),
            "loss_scale": self.scaler.scale,
            "loss_scale_finite_updates": self.scaler.finite_updates,
            "best_step": self.best_step,
        }

    def require_update_boundary(self) -> None:
        """Refuse state capture inside an update (microbatches pending or gradients held): a
        checkpoint is only taken between complete updates. Never clears anything."""
        if self.pending_microbatches:
            raise CaptureRefused(
                f"cannot capture training state: {self.pending_microbatches} microbatches are pending"
            )
        pending = [n for n, p in self.model.named_parameters() if p.grad is not None]
        if pending:
            raise CaptureRefused(
                f"cannot capture training state: {len(pending)} parameters hold gradients (first: {pending[0]})"
            )


def scheduled_work(trainer: Trainer, until: int | None = None) -> Iterator[UpdateRecord | EvaluationRecord]:
    """The run's schedule, one unit at a time: a due evaluation, else the next update.

    Stopping between two items always leaves the trainer at a complete update boundary.
    """
    limit = trainer.config.train.steps if until is None else min(until, trainer.config.train.steps)
    while True:
        if trainer.evaluation_due():
            yield trainer.evaluate()
            continue
        if trainer.step >= limit:
            return
        yield trainer.update()
