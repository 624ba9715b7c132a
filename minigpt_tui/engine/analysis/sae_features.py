"""Sparse-autoencoder features of one site: the activations read, training, evaluation and
the decomposition of a decision.

- :func:`site_activations`: one site's values at every position of some token sequences,
  read inside the model's forward (:class:`~minigpt_tui.engine.models.sites.Sites`), float64;
- :func:`train_autoencoder`: Adam over shuffled batches, everything in float64 and every
  random draw from one seed, so two runs with one seed give the same bits (bitwise resume
  is not built yet); JumpReLU learns its thresholds (as logs) through the straight-through
  rectangle-kernel estimator with an L0 penalty, as Rajamanoharan et al. (2024) and SAELens;
- :func:`evaluate`: reconstruction MSE, explained variance, L0 and the dead-feature fraction;
- :func:`decompose`: the site's value at the last position as the features' parts plus the
  decoder bias plus an error term defined as what is left, so the sum holds to rounding.
  Where the site is the final norm's output the chosen logit is linear in it and each
  part's share of the logit is exact; elsewhere a feature's decoder row is read through the
  final norm's weight and the head (the "logit lens of a feature"), which is not a share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.models.model import MiniGPT, decision_logits, evaluating, norm_gain
from minigpt_tui.engine.models.sae import SAEConfig, SAERefused, SparseAutoencoder, initialized
from minigpt_tui.engine.models.sites import PATTERN, Sites, site_names

FINAL_SITE = "ln_final.hook_normalized"  # the logit is linear in this site's values
EVALUATION_ROWS = 4096  # activations encoded at once while evaluating


def check_site(model: MiniGPT, site: str) -> None:
    """Refuse a site the model does not pass, or one that is not a vector per position."""
    names = site_names(model.config)
    if site not in names:
        last = f"blocks.{model.config.layers - 1}.hook_resid_post"
        raise GenerationError(f"the model has no site '{site}' ({len(names)} sites from {names[0]} to {names[-1]}, "
                              f"for example {last})")
    if site.endswith(PATTERN):
        raise GenerationError(f"'{site}' holds attention weights, not a vector per position: choose another site")


def site_activations(model: MiniGPT, sequences: Sequence[Sequence[int]], site: str,
                     progress: Callable[[int, int], None] | None = None) -> Tensor:
    """The site's values [positions, width] at every position of every sequence, float64."""
    check_site(model, site)
    rows = []
    sites = Sites(model.config).read(site)
    with evaluating(model), torch.no_grad():
        for done, ids in enumerate(sequences, 1):
            model(torch.tensor([list(ids)], dtype=torch.int64), sites=sites, last_only=True)
            value = sites.values[site][0]
            rows.append(value.reshape(value.shape[0], -1).to(torch.float64))
            if progress is not None:
                progress(done, len(sequences))
    if not rows:
        raise GenerationError("the corpus gave no token sequence to read activations from")
    return torch.cat(rows)


# -- training -----------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainingSettings:
    """How an autoencoder is trained: updates, batch rows, Adam's rate, the L1 weight (relu),
    the seed of every draw, how often it is evaluated (0: only at the end), and for jumprelu
    the L0 weight, the kernel's bandwidth and every feature's first threshold."""

    steps: int
    batch_size: int = 256
    learning_rate: float = 1e-3
    l1: float = 1e-2
    seed: int = 0
    eval_every: int = 0
    l0: float = 1e-3
    bandwidth: float = 1e-3
    first_threshold: float = 1e-3


@dataclass(frozen=True)
class Evaluation:
    """An autoencoder's figures over held-out activations after ``step`` updates."""

    step: int
    mse: float  # mean squared error per element
    explained_variance: float  # 1 - residual sum of squares / total sum of squares about the mean
    l0: float  # features active per activation, on average
    dead_fraction: float  # features never active over these activations
    train_loss: float

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "mse": self.mse, "explained_variance": self.explained_variance, "l0": self.l0,
                "dead_fraction": self.dead_fraction, "train_loss": self.train_loss}


def loss_of(sae: SparseAutoencoder, batch: Tensor, settings: TrainingSettings,
            log_threshold: Tensor | None = None) -> Tensor:
    """Squared error summed over the width, averaged over rows; for relu plus the L1 penalty
    on each feature weighted by its decoder row's norm; for jumprelu (``log_threshold``
    given) plus the L0 penalty, thresholds learned through the straight-through kernel."""
    if log_threshold is not None:
        pre = sae.pre_activations(batch)
        threshold = log_threshold.exp()
        features = _JumpReLU.apply(pre, threshold, settings.bandwidth)
        active = _Step.apply(pre, threshold, settings.bandwidth).sum(-1).mean()
        return (sae.decode(features) - batch).pow(2).sum(-1).mean() + settings.l0 * active
    reconstruction, features = sae(batch)
    loss = (reconstruction - batch).pow(2).sum(-1).mean()
    if sae.config.kind == "relu":
        loss = loss + settings.l1 * (features * sae.W_dec.norm(dim=-1)).sum(-1).mean()
    return loss


def _near(pre: Tensor, threshold: Tensor, bandwidth: float) -> Tensor:
    """The rectangle kernel of width ``bandwidth`` about each threshold, over its width."""
    return ((pre - threshold).abs() < bandwidth / 2).to(pre.dtype) / bandwidth


class _JumpReLU(torch.autograd.Function):
    """``pre`` where above the threshold, else 0; the threshold's gradient is the
    straight-through estimate -threshold x kernel (Rajamanoharan et al., 2024)."""

    @staticmethod
    def forward(ctx: Any, pre: Tensor, threshold: Tensor, bandwidth: float) -> Tensor:
        ctx.save_for_backward(pre, threshold)
        ctx.bandwidth = bandwidth
        return pre * (pre > threshold)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, None]:
        pre, threshold = ctx.saved_tensors
        through = -threshold * _near(pre, threshold, ctx.bandwidth) * grad
        return grad * (pre > threshold), through.reshape(-1, threshold.shape[0]).sum(0), None


class _Step(torch.autograd.Function):
    """1 where ``pre`` is above the threshold, else 0 (the L0 count); the threshold's
    gradient is the straight-through estimate -kernel, and ``pre`` gets none."""

    @staticmethod
    def forward(ctx: Any, pre: Tensor, threshold: Tensor, bandwidth: float) -> Tensor:
        ctx.save_for_backward(pre, threshold)
        ctx.bandwidth = bandwidth
        return (pre > threshold).to(pre.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, Tensor, None]:
        pre, threshold = ctx.saved_tensors
        through = -_near(pre, threshold, ctx.bandwidth) * grad
        return None, through.reshape(-1, threshold.shape[0]).sum(0), None


def evaluate(sae: SparseAutoencoder, activations: Tensor, step: int = 0,
             train_loss: float = float("nan")) -> Evaluation:
    """The figures of :class:`Evaluation` over ``activations``."""
    squared, active, ever = 0.0, 0.0, torch.zeros(sae.config.d_sae, dtype=torch.bool)
    with torch.no_grad():
        for start in range(0, activations.shape[0], EVALUATION_ROWS):
            rows = activations[start:start + EVALUATION_ROWS]
            reconstruction, features = sae(rows)
            squared += float((reconstruction - rows).pow(2).sum())
            nonzero = features != 0
            active += float(nonzero.sum())
            ever |= nonzero.any(0)
        total = float((activations - activations.mean(0)).pow(2).sum())
    count = activations.shape[0]
    return Evaluation(step, squared / activations.numel(), 1.0 - squared / total if total > 0 else float("nan"),
                      active / count, 1.0 - float(ever.sum()) / sae.config.d_sae, train_loss)


def _unheard(*_args: Any) -> None:
    pass


def train_autoencoder(config: SAEConfig, settings: TrainingSettings, train: Tensor, held_out: Tensor,
                      on_step: Callable[[int, float], None] = _unheard,
                      on_evaluation: Callable[[Evaluation], None] = _unheard
                      ) -> tuple[SparseAutoencoder, list[Evaluation]]:
    """An autoencoder of ``config`` trained on ``train`` [N, d_in] (see the module doc); the
    evaluations over ``held_out`` at every ``eval_every`` updates and after the last."""
    sae = initialized(config, settings.seed, train.mean(0))
    log_threshold = _log_threshold(sae, settings)
    learned = [p for p in sae.parameters() if p.requires_grad] + ([] if log_threshold is None else [log_threshold])
    optimizer = torch.optim.Adam(learned, lr=settings.learning_rate)
    order = _batch_order(train.shape[0], settings)
    evaluations = []
    for step in range(1, settings.steps + 1):
        loss = _update(sae, optimizer, train[next(order)], settings, log_threshold)
        on_step(step, loss)
        if step == settings.steps or (settings.eval_every and step % settings.eval_every == 0):
            evaluations.append(evaluate(sae, held_out, step, loss))
            on_evaluation(evaluations[-1])
    return sae, evaluations


def _update(sae: SparseAutoencoder, optimizer: Any, batch: Tensor, settings: TrainingSettings,
            log_threshold: Tensor | None) -> float:
    """One Adam update on ``batch``; its loss before the update."""
    optimizer.zero_grad(set_to_none=True)
    value = loss_of(sae, batch, settings, log_threshold)
    value.backward()
    optimizer.step()
    if log_threshold is not None:
        with torch.no_grad():
            sae.threshold.copy_(log_threshold.exp())
    return float(value.detach())


def _log_threshold(sae: SparseAutoencoder, settings: TrainingSettings) -> Tensor | None:
    """For jumprelu, the learned log of every threshold (kept positive), set to the first
    threshold, which ``sae.threshold`` takes too; None for the other kinds."""
    if sae.config.kind != "jumprelu":
        return None
    with torch.no_grad():
        sae.threshold.fill_(settings.first_threshold)
    return torch.nn.Parameter(sae.threshold.detach().log())


def _batch_order(rows: int, settings: TrainingSettings) -> Any:
    """Row indices of each batch: a new permutation from the seeded generator each pass."""
    generator = torch.Generator().manual_seed(settings.seed + 1)
    size = min(settings.batch_size, rows)
    while True:
        permutation = torch.randperm(rows, generator=generator)
        for start in range(0, rows - size + 1, size):
            yield permutation[start:start + size]


# -- a decision, decomposed -----------------------------------------------------------------
@dataclass(frozen=True)
class FeaturePart:
    """One feature at the last position: its activation, its exact share of the chosen logit
    (only at the final norm's output, else None), and the tokens its decoder row promotes
    and suppresses most through the head (id, value)."""

    index: int
    activation: float
    logit: float | None
    lens_chosen: float | None
    promotes: tuple[tuple[int, float], ...]
    suppresses: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class Decomposition:
    """The site's value x at the last position = Σ activation × decoder row + b_dec + error.
    ``gap`` is the largest |x − that sum| (rounding only); with ``exact`` the chosen logit's
    parts (features, bias, error) add up to ``total``, beside the model's own ``logit``."""

    site: str
    chosen_id: int
    exact: bool
    active: int
    parts: tuple[FeaturePart, ...]
    gap: float
    residual_norm: float
    error_norm: float
    features_logit: float | None
    bias_logit: float | None
    error_logit: float | None
    total: float | None
    logit: float


@dataclass(frozen=True)
class ResidualSplit:
    """A value x [d_in] split as ``parts.sum(0) + bias + error``: ``parts`` [d_sae, d_in] is
    each feature's activation times its decoder row, ``error`` what is left (float64)."""

    x: Tensor
    features: Tensor
    parts: Tensor
    bias: Tensor
    error: Tensor

    @property
    def gap(self) -> float:
        """The largest |x - (parts + bias + error)|: rounding only."""
        return float((self.parts.sum(0) + self.bias + self.error - self.x).abs().max())


def split_value(sae: SparseAutoencoder, x: Tensor) -> ResidualSplit:
    """``x`` through the autoencoder's features, every product in float64."""
    with torch.no_grad():
        x = x.to(torch.float64)
        decoder, bias, encoder, encoder_bias = (p.detach().to(torch.float64)
                                                for p in (sae.W_dec, sae.b_dec, sae.W_enc, sae.b_enc))
        x_in = x - bias if sae.config.apply_b_dec_to_input else x
        features = sae.activate(x_in @ encoder + encoder_bias)
        parts = features[:, None] * decoder
        return ResidualSplit(x, features, parts, bias, x - (parts.sum(0) + bias))


def decompose(model: MiniGPT, sae: SparseAutoencoder, ids: Sequence[int], top: int = 10,
              lens_top: int = 3) -> Decomposition:
    """The decision after ``ids`` decomposed through the autoencoder's features (module doc)."""
    site = sae.config.hook_name
    x, logits = _last_value(model, ids, site)
    if x.shape[0] != sae.config.d_in:
        raise SAERefused(f"the autoencoder reads width {sae.config.d_in}; the model's '{site}' has {x.shape[0]}")
    split = split_value(sae, x)
    features = split.features
    chosen = int(torch.argmax(logits))
    order = [i for i in torch.argsort(features.abs(), descending=True, stable=True).tolist()[:top] if features[i] != 0]
    head = model.head_weight.detach().to(torch.float64)
    shares = _logit_shares(split, head[chosen]) if site == FINAL_SITE else None
    lens = _feature_lens(model, site, sae.W_dec.detach()[order].to(torch.float64), head)
    entries = tuple(FeaturePart(i, float(features[i]), None if shares is None else float(shares[0][i]),
                                *_lens_of(lens, n, chosen, lens_top)) for n, i in enumerate(order))
    return Decomposition(site, chosen, shares is not None, int((features != 0).sum()), entries, split.gap,
                         float(split.x.norm()), float(split.error.norm()),
                         *(shares[1:] if shares is not None else (None, None, None, None)), float(logits[chosen]))


def _logit_shares(split: ResidualSplit, row: Tensor) -> tuple[Tensor, float, float, float, float]:
    """Each feature's share of the logit, then the features', the bias's and the error's
    shares and their sum (the logit is ``x @ row`` where the site is the norm's output)."""
    shares, bias, error = split.parts @ row, split.bias @ row, split.error @ row
    return shares, float(shares.sum()), float(bias), float(error), float(shares.sum() + bias + error)


def _lens_of(lens: Tensor | None, n: int, chosen: int, count: int) -> tuple[Any, ...]:
    if lens is None:
        return None, (), ()
    return (float(lens[n, chosen]), *_extremes(lens[n], count))


def _last_value(model: MiniGPT, ids: Sequence[int], site: str) -> tuple[Tensor, Tensor]:
    """The site's value at the last position (float64) and the decision's logits there."""
    check_site(model, site)
    if not ids or len(ids) > model.config.context:
        raise GenerationError(f"the prompt must be 1 to {model.config.context} tokens, got {len(ids)}")
    sites = Sites(model.config).read(site)
    with evaluating(model), torch.no_grad():
        out = model(torch.tensor([list(ids)], dtype=torch.int64), sites=sites, last_only=True)
        logits = decision_logits(model, out.hidden[0])
    value = sites.values[site][0]
    return value.reshape(value.shape[0], -1)[-1].to(torch.float64), logits.to(torch.float64)


def _feature_lens(model: MiniGPT, site: str, rows: Tensor, head: Tensor) -> Tensor | None:
    """Decoder rows through the head, before it through the final norm's weight (where it
    has one) unless the site is the norm's output; None for a site of another width (hook_z)."""
    if rows.shape[-1] != head.shape[1]:
        return None
    weight = norm_gain(model.final_norm, torch.float64)
    if site != FINAL_SITE and weight is not None:
        rows = rows * weight
    return rows @ head.t()


def _extremes(values: Tensor, count: int) -> tuple[tuple[tuple[int, float], ...], tuple[tuple[int, float], ...]]:
    high = torch.topk(values, min(count, values.shape[0]))
    low = torch.topk(-values, min(count, values.shape[0]))
    return (tuple((int(i), float(v)) for i, v in zip(high.indices, high.values)),
            tuple((int(i), float(-v)) for i, v in zip(low.indices, low.values)))

