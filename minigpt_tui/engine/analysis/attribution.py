"""Attribution patching: every site's patching effect estimated from gradients.

Exact activation patching (:mod:`~minigpt_tui.engine.analysis.patching`) runs the model
once per site and position. Attribution patching estimates all of them at once, to first
order: with a the corrupt run's activation at a site, a' the clean run's and m the metric
(the logit difference answer − against at the last position, as ``patch`` measures it),

    m(corrupt with a' at the site) − m(corrupt)  ≈  (a' − a) · ∂m/∂a  at the corrupt run,

summed over the site's width at each position (over a head's columns of ``attn.hook_z``
for a head). One clean forward gives every a', one corrupt forward and one backward every
∂m/∂a. The estimate is exact where m is linear in the site (the final norm's output, which
only the head's product reads) and off where the model bends between the site and the
answer.

Integrated gradients (``steps`` N) average the gradient over N points on the straight
line from a to a' (the midpoints of N equal segments) instead of taking it at a alone: a
site's estimates over all its positions then add up to the exact effect of patching every
position of that site (completeness), to within the quadrature's error, which shrinks as
1/N². Each point is a forward in which one batch row per site of a kind (``resid``,
``attn``, ``mlp``, ``head``) puts the interpolated values at its own site, and one
backward: N forwards and backwards per kind (per :data:`IG_ROWS` sites of a kind).

The grid is the exact sweep's (:func:`~minigpt_tui.engine.analysis.patching.plan`): the
same sites, layers, heads and positions in the same order, so the two compare cell by
cell; :func:`agreement` says how well (Spearman's rank correlation over the cells and the
top cells of each). Edge attribution (between components) is not built here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from minigpt_tui.engine.analysis.patching import Effect, grid, one_token, site_of
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.models.model import evaluating, soft_capped
from minigpt_tui.engine.models.sites import HEAD_VALUES, Sites

TOP_SITES = 5  # the top cells of each method that :func:`agreement` compares
IG_ROWS = 32  # integrated gradients: at most this many sites a batch (a kind with more takes several)
Progress = Callable[[int, int], None]
Key = tuple[str, int, int | None, int]  # site, layer, head, position: one cell of the grid


@dataclass(frozen=True)
class Estimate:
    """One cell's estimate: ``change`` the metric's estimated change from the corrupt run,
    ``difference`` the estimated metric, ``restored`` the share of the clean − corrupt gap."""

    site: str
    layer: int
    head: int | None
    position: int
    change: float
    difference: float
    restored: float | None

    @property
    def key(self) -> Key:
        return (self.site, self.layer, self.head, self.position)

    def to_json(self) -> dict[str, Any]:
        return {"site": self.site, "layer": self.layer, "head": self.head, "position": self.position,
                "change": self.change, "difference": self.difference, "restored": self.restored}


@dataclass(frozen=True)
class AttributionResult:
    clean_ids: tuple[int, ...]
    corrupt_ids: tuple[int, ...]
    answer: tuple[int, str]
    against: tuple[int, str]
    clean_difference: float
    corrupt_difference: float
    steps: int | None  # None: the gradient at the corrupt run; N: integrated gradients
    estimates: tuple[Estimate, ...]

    @property
    def method(self) -> str:
        return "gradient" if self.steps is None else "integrated_gradients"

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "steps": self.steps, "clean_difference": self.clean_difference,
                "corrupt_difference": self.corrupt_difference, "estimates": [e.to_json() for e in self.estimates]}


@dataclass(frozen=True)
class Agreement:
    """How attribution ranks the cells against exact patching: Spearman's rank correlation
    of their changes over ``cells`` cells (None where either is constant), and the ``k``
    cells of largest |change| of each, with how many they share."""

    cells: int
    spearman: float | None
    k: int
    top_exact: tuple[Key, ...]
    top_attributed: tuple[Key, ...]

    @property
    def shared(self) -> int:
        return len(set(self.top_exact) & set(self.top_attributed))


class Attributor:
    """The clean run's activations and the metric's gradients at the corrupt run, for a
    prompt pair of equal token length and two one-token answers (ids)."""

    def __init__(self, model: Any, clean_ids: Sequence[int], corrupt_ids: Sequence[int], answer: int,
                 against: int) -> None:
        if len(clean_ids) != len(corrupt_ids):
            raise GenerationError(f"the clean prompt is {len(clean_ids)} ids and the corrupt one {len(corrupt_ids)}: "
                                  "patching needs prompts of equal token length")
        if len(clean_ids) > model.config.context:
            raise GenerationError(f"the prompts are {len(clean_ids)} ids, more than the context of "
                                  f"{model.config.context}")
        self.model, self.answer, self.against = model, answer, against
        self.clean_ids, self.corrupt_ids = tuple(clean_ids), tuple(corrupt_ids)
        self.names = Sites(model.config).names
        with torch.no_grad():
            self._pair = model.head_weight[[answer, against]].detach()
        self.clean, self.clean_difference = self._run(self.clean_ids)
        self.corrupt, self.corrupt_difference = self._run(self.corrupt_ids)

    def _metric(self, hidden: Tensor) -> Tensor:
        """The metric [rows] of the final norm's output [rows, T, D], in float64."""
        pair = soft_capped(hidden[:, -1] @ self._pair.t(), self.model.config.logit_softcap).to(torch.float64)
        return pair[:, 0] - pair[:, 1]

    def _run(self, ids: Sequence[int]) -> tuple[dict[str, Tensor], float]:
        """Every site's values of a run over ``ids`` (no graph) and its metric."""
        sites = Sites(self.model.config).read("*")
        with evaluating(self.model), torch.no_grad():
            out = self.model(torch.tensor([list(ids)]), sites=sites, skip_head=True, return_attention=True)
        return dict(sites.values), float(self._metric(out.logits)[0])

    def gradients(self, names: Sequence[str]) -> dict[str, Tensor]:
        """∂metric/∂(site values) [1, T, W] at the corrupt run, for each of ``names``: one
        forward with the graph from the embeddings on, one backward."""
        model = self.model
        sites = Sites(model.config)
        for name in names:
            sites.check(name)
        sites.read(*names)
        ids = torch.tensor([list(self.corrupt_ids)])
        with evaluating(model), torch.enable_grad():
            with torch.no_grad():
                embeds = model.token_embedding(ids)
            embeds.requires_grad_(True)  # the graph starts here, whether or not the weights ask for one
            out = model(None, inputs_embeds=embeds, sites=sites, skip_head=True, return_attention=True)
            values = [sites[name] for name in names]
            found = torch.autograd.grad(self._metric(out.logits).sum(), values, allow_unused=True)
        return {name: torch.zeros_like(value) if g is None else g.detach()
                for name, value, g in zip(names, values, found)}

    def integrated(self, names: Sequence[tuple[str, int | None]], steps: int,
                   progress: Callable[[], None] | None = None) -> list[Tensor]:
        """For each (site name, head or None) of ``names``, the gradient [1, T, W] of the
        metric at that site averaged over ``steps`` points from the corrupt to the clean
        values there (a head's point changes its columns alone); one batched forward and
        backward a point, a row per entry, ``progress()`` after each."""
        model = self.model
        ids = torch.tensor([list(self.corrupt_ids)] * len(names))
        total = [torch.zeros_like(self.corrupt[name]) for name, _ in names]
        with evaluating(model), torch.enable_grad():
            for step in range(steps):
                alpha = (step + 0.5) / steps
                sites, points = Sites(model.config), []
                for row, (name, head) in enumerate(names):
                    a, clean = self.corrupt[name], self.clean[name]
                    point = (a + alpha * (clean - a)).detach().requires_grad_(True)
                    sites.replace(name, point, heads=None if head is None else (head,), rows=(row,))
                    points.append(point)
                out = model(ids, sites=sites, skip_head=True, return_attention=True)
                found = torch.autograd.grad(self._metric(out.logits).sum(), points, allow_unused=True)
                for kept, g in zip(total, found):
                    if g is not None:
                        kept.add_(g)
                if progress is not None:
                    progress()
        return [kept / steps for kept in total]

    def changes(self, name: str, gradient: Tensor) -> Tensor:
        """(clean − corrupt) · gradient at each position [T], in float64; at ``attn.hook_z``
        each head's columns apart [T, H]."""
        delta = (self.clean[name] - self.corrupt[name]).to(torch.float64)
        product = (delta * gradient.to(torch.float64))[0]
        if name.endswith(HEAD_VALUES):
            return product.view(product.shape[0], self.model.config.heads, -1).sum(-1)
        return product.sum(-1)

    def restored(self, difference: float) -> float | None:
        gap = self.clean_difference - self.corrupt_difference
        return None if gap == 0 else (difference - self.corrupt_difference) / gap

    def estimates(self, site: str, layer: int, head: int | None, changes: Tensor) -> list[Estimate]:
        """One grid row's estimates from its site's changes ([T], or [T, H] for heads)."""
        column = changes if head is None else changes[:, head]
        out = []
        for position, change in enumerate(column.tolist()):
            difference = self.corrupt_difference + change
            out.append(Estimate(site, layer, head, position, change, difference, self.restored(difference)))
        return out


def attribute(attributor: Attributor, sites: Sequence[str], steps: int | None = None,
              progress: Progress | None = None) -> tuple[Estimate, ...]:
    """Every cell of the grid over ``sites`` estimated: from the gradient at the corrupt run
    (``steps`` None), or from integrated gradients over ``steps`` points a kind."""
    config = attributor.model.config
    rows = grid(config, sites)
    if steps is not None and steps < 1:
        raise GenerationError(f"integrated gradients take at least 1 step, not {steps}")
    if steps is None:
        changes = _gradient_changes(attributor, rows)
        if progress is not None:
            progress(1, 1)
    else:
        changes = _integrated_changes(attributor, rows, steps, progress)
    found: list[Estimate] = []
    for row, change in zip(rows, changes):
        found.extend(attributor.estimates(*row, change))
    return tuple(found)


def _gradient_changes(attributor: Attributor, rows: Sequence[tuple[str, int, int | None]]) -> list[Tensor]:
    layers = attributor.model.config.layers
    names = [site_of(site, layer, layers) for site, layer, _ in rows]
    unique = list(dict.fromkeys(names))
    gradients = attributor.gradients(unique)
    per_name = {name: attributor.changes(name, gradients[name]) for name in unique}
    return [per_name[name] for name in names]


def _integrated_changes(attributor: Attributor, rows: Sequence[tuple[str, int, int | None]], steps: int,
                        progress: Progress | None) -> list[Tensor]:
    """Each row's changes from integrated gradients, a batched run a kind of site."""
    layers = attributor.model.config.layers
    kinds = list(dict.fromkeys(site for site, _, _ in rows))
    batches = [chunk for kind in kinds for chunk in _chunks([row for row in rows if row[0] == kind])]
    done, total = 0, steps * len(batches)

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    changes: dict[tuple[str, int, int | None], Tensor] = {}
    for batch in batches:
        names = [(site_of(site, layer, layers), head) for site, layer, head in batch]
        for row, (name, _), gradient in zip(batch, names, attributor.integrated(names, steps, tick)):
            changes[row] = attributor.changes(name, gradient)
    return [changes[row] for row in rows]


def _chunks(rows: list[tuple[str, int, int | None]]) -> list[list[tuple[str, int, int | None]]]:
    return [rows[i:i + IG_ROWS] for i in range(0, len(rows), IG_ROWS)]


def attribute_prompts(model: Any, tokenizer: Any, clean: str, corrupt: str, answer: str, against: str,
                      sites: Sequence[str] = ("resid", "attn", "mlp"), steps: int | None = None,
                      progress: Progress | None = None) -> AttributionResult:
    """``patch --attribution``: the grid over ``sites`` for two prompts and two answers (text)."""
    a, b = one_token(tokenizer, answer, "the answer"), one_token(tokenizer, against, "the other answer")
    attributor = Attributor(model, tokenizer.encode_prompt(clean), tokenizer.encode_prompt(corrupt), a, b)
    estimates = attribute(attributor, sites, steps, progress)
    return AttributionResult(attributor.clean_ids, attributor.corrupt_ids, (a, tokenizer.piece_text(a)),
                             (b, tokenizer.piece_text(b)), attributor.clean_difference,
                             attributor.corrupt_difference, steps, estimates)


def agreement(exact: Sequence[Effect], estimates: Sequence[Estimate], corrupt_difference: float,
              k: int = TOP_SITES) -> Agreement:
    """Exact patching's effects against attribution's estimates over the cells both have
    (in the sweep's order): Spearman's rank correlation of the changes (the exact change is
    the effect's difference − ``corrupt_difference``) and the ``k`` cells of largest
    |change| of each (equal sizes keep the grid's order)."""
    attributed = {e.key: e.change for e in estimates}
    exact_changes = {(e.site, e.layer, e.head, e.position): e.difference - corrupt_difference for e in exact}
    keys = [key for key in exact_changes if key in attributed]
    if not keys:
        raise GenerationError("exact patching and attribution share no site to compare")
    xs = [exact_changes[key] for key in keys]
    ys = [attributed[key] for key in keys]
    return Agreement(len(keys), spearman(xs, ys), k, _top(keys, xs, k), _top(keys, ys, k))


def _top(keys: Sequence[Key], values: Sequence[float], k: int) -> tuple[Key, ...]:
    order = sorted(range(len(keys)), key=lambda i: -abs(values[i]))
    return tuple(keys[i] for i in order[:k])


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation of two equally long sequences (equal values share their
    mean rank); None where either holds one value throughout or fewer than two."""
    if len(xs) != len(ys):
        raise ValueError("spearman needs sequences of equal length")
    rx, ry = _ranks(xs), _ranks(ys)
    n = len(rx)
    if n < 2:
        return None
    mx, my = sum(rx) / n, sum(ry) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def _ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties given the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start:end + 1]:
            ranks[i] = (start + end) / 2 + 1
        start = end + 1
    return ranks
