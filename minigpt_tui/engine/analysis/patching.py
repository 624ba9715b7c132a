"""Activation patching: which site carries what makes the model prefer one answer.

Two prompts of equal token length, a clean one and a corrupt one, and two one-token
answers A and B. The metric is the logit difference A − B at the last position. Each
site's activation from the clean run is put into the corrupt run, one site and one
position at a time, and the difference measured again:

- ``resid`` at layer l: the residual stream entering block l (0: the embeddings; L, the
  number of blocks: after the last block, where the final norm reads it);
- ``attn`` and ``mlp`` at layer l: the block's attention and feed-forward outputs;
- ``head`` (l, h): head h's weighted values, before the output map (its share of ``attn``).

``restored`` is (difference − corrupt) / (clean − corrupt): 1 where the site alone brings
the clean answer back, 0 where it changes nothing.

Every run (clean, corrupt, patched) is one row of a batch of the same shape: ``rows`` runs
of the prompt's length, the rows no run needs carrying the corrupt run. The last bits of a
matrix product depend on its shape, and at some shapes on the row's place in it, so the
shape is fixed per patcher and chosen where each row's bits depend on nothing but that
row: the clean and corrupt runs are computed ``rows`` times over, side by side, and every
copy must agree bit for bit, or fewer rows are tried, down to one run at a time. Patching
is then exact at both ends: the embeddings at every position where the prompts differ
give the clean difference bit for bit, and so does the last residual at the last
position; a site patched with its own corrupt value gives the corrupt difference; and a
patched run gives the same bits whichever runs share its batch and whichever row it takes.
The figures differ from a one-row forward of the same prompt (``rows`` 1) in their last
bits only.

A patch is a ``replace`` at the model's own named site (:func:`site_of`, through
:class:`~minigpt_tui.engine.models.sites.Sites`): each run's clean values put into its row
of the batch, a head's into its columns of ``attn.hook_z``. A patch at layer l leaves the
blocks before l as they were in the corrupt run, so a batch's forward enters at its first
patched block with the corrupt run's residual there (kept from that run) instead of
recomputing them: the same operations on the same values, so the same bits. Only the last
position's two answer logits are computed, in every run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.models.model import ForwardOutput, evaluating, soft_capped
from minigpt_tui.engine.models.sites import Sites

SITES = ("resid", "attn", "mlp", "head")
# Positions (runs × prompt length) a batch of patched runs aims at: past about this many the
# products stop being bound by reading the weights, and a run no longer gets cheaper.
BATCH_POSITIONS = 128
# A batch's positions are a multiple of this: at other counts this CPU's products gave a
# row different bits depending on its place (float64 at counts not a multiple of 4).
POSITION_MULTIPLE = 8

# The model's site each kind of patch replaces at layer l (``resid`` at l = layers: the
# residual leaving the last block, what the final norm reads).
SITE_NAMES = {"resid": "blocks.{l}.hook_resid_pre", "attn": "blocks.{l}.hook_attn_out",
              "mlp": "blocks.{l}.hook_mlp_out", "head": "blocks.{l}.attn.hook_z"}

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Patch:
    """Put the clean run's ``site`` activation at ``positions`` into the corrupt run."""

    site: str
    layer: int
    positions: tuple[int, ...]
    head: int | None = None


@dataclass(frozen=True)
class Effect:
    site: str
    layer: int
    head: int | None
    position: int
    difference: float
    restored: float | None

    def to_json(self) -> dict[str, Any]:
        return {"site": self.site, "layer": self.layer, "head": self.head, "position": self.position,
                "difference": self.difference, "restored": self.restored}


@dataclass(frozen=True)
class PatchingResult:
    clean_ids: tuple[int, ...]
    corrupt_ids: tuple[int, ...]
    answer: tuple[int, str]
    against: tuple[int, str]
    clean_difference: float
    corrupt_difference: float
    effects: tuple[Effect, ...]

    def to_json(self) -> dict[str, Any]:
        return {"clean_ids": list(self.clean_ids), "corrupt_ids": list(self.corrupt_ids),
                "answer": {"id": self.answer[0], "piece": self.answer[1]},
                "against": {"id": self.against[0], "piece": self.against[1]},
                "clean_difference": self.clean_difference, "corrupt_difference": self.corrupt_difference,
                "effects": [e.to_json() for e in self.effects]}


def site_of(site: str, layer: int, layers: int) -> str:
    """The model's site that ``site`` at ``layer`` names (see :data:`SITE_NAMES`)."""
    if site == "resid" and layer == layers:
        return f"blocks.{layers - 1}.hook_resid_post"
    return SITE_NAMES[site].format(l=layer)


def batch_rows(length: int) -> tuple[int, ...]:
    """Runs per batch to try for prompts of ``length`` ids, most first; 1 always last."""
    step = _step(length)
    most = BATCH_POSITIONS // max(length, 1) // step * step
    if not most and step * length <= 2 * BATCH_POSITIONS:
        most = step
    tried = (most, most // 2 // step * step)
    return tuple(dict.fromkeys(r for r in tried if r > 1)) + (1,)


def _step(length: int) -> int:
    """The fewest runs whose positions make a multiple of POSITION_MULTIPLE."""
    step = 1
    while (step * length) % POSITION_MULTIPLE:
        step += 1
    return step


class Patcher:
    """The clean run's activations, and patched corrupt runs that read them, ``rows`` a batch
    (chosen here unless given; 1 runs them one at a time)."""

    def __init__(self, model: Any, clean_ids: Sequence[int], corrupt_ids: Sequence[int], answer: int,
                 against: int, rows: int | None = None) -> None:
        if len(clean_ids) != len(corrupt_ids):
            raise GenerationError(f"the clean prompt is {len(clean_ids)} ids and the corrupt one {len(corrupt_ids)}: "
                                  "patching needs prompts of equal token length")
        if len(clean_ids) > model.config.context:
            raise GenerationError(f"the prompts are {len(clean_ids)} ids, more than the context of "
                                  f"{model.config.context}")
        if rows is not None and rows < 1:
            raise GenerationError(f"a batch holds at least one run, not {rows}")
        self.model, self.answer, self.against = model, answer, against
        self.clean_ids, self.corrupt_ids = tuple(clean_ids), tuple(corrupt_ids)
        with torch.no_grad():
            self._pair = model.head_weight[[answer, against]]  # the two answers' rows of the head
        self.rows = 1
        self.clean: dict[str, Tensor] = {}
        self.corrupt: dict[str, Tensor] = {}
        for candidate in (rows,) if rows is not None else batch_rows(len(clean_ids)):
            if self._settle(candidate):
                break
        else:
            self._settle(1)

    def _settle(self, rows: int) -> bool:
        """Run clean and corrupt ``rows`` times each; keep their activations and differences
        when every copy agrees bit for bit (always, for one row)."""
        clean: dict[str, Tensor] = {}
        corrupt: dict[str, Tensor] = {}
        clean_differences = self._base(self.clean_ids, rows, clean)
        corrupt_differences = self._base(self.corrupt_ids, rows, corrupt)
        if rows > 1 and not all(_rows_agree(v) for v in (clean_differences, corrupt_differences,
                                                         *clean.values(), *corrupt.values())):
            return False
        self.rows = rows
        self.clean = {name: value[:1].clone() for name, value in clean.items()}
        self.corrupt = {name: value[:1].clone() for name, value in corrupt.items()}
        self.clean_difference = float(clean_differences[0])
        self.corrupt_difference = float(corrupt_differences[0])
        return True

    def _base(self, ids: Sequence[int], rows: int, record: dict[str, Tensor]) -> Tensor:
        """The differences [rows] of ``rows`` copies of a run over ``ids``; every site's
        values go into ``record``."""
        model = self.model
        sites = Sites(model.config).read("*")
        with evaluating(model), torch.no_grad():
            # Attention weights asked for: every run takes the same (explicit) path.
            out = model(torch.tensor([list(ids)] * rows), sites=sites, skip_head=True, return_attention=True)
        record.update(sites.values)
        return self._metric(out)

    def _metric(self, out: ForwardOutput) -> Tensor:
        """The metric [rows] of a forward's final norm output (``skip_head``), in float64."""
        pair = soft_capped(out.logits[:, -1] @ self._pair.t(), self.model.config.logit_softcap).to(torch.float64)
        return pair[:, 0] - pair[:, 1]

    def _entering(self, layer: int) -> Tensor:
        """The corrupt run's residual stream entering block ``layer`` (L: after the last)."""
        return self.corrupt[site_of("resid", layer, self.model.config.layers)]

    def restored(self, difference: float) -> float | None:
        gap = self.clean_difference - self.corrupt_difference
        return None if gap == 0 else (difference - self.corrupt_difference) / gap

    def check(self, patch: Patch) -> None:
        layers, heads, length = self.model.config.layers, self.model.config.heads, len(self.clean_ids)
        if patch.site not in SITES:
            raise GenerationError(f"unknown site '{patch.site}' (sites: {', '.join(SITES)})")
        top = layers if patch.site == "resid" else layers - 1
        if not 0 <= patch.layer <= top:
            raise GenerationError(f"{patch.site} has layers 0 to {top}, not {patch.layer}")
        if patch.site == "head" and not (patch.head is not None and 0 <= patch.head < heads):
            raise GenerationError(f"a head patch names a head 0 to {heads - 1}, not {patch.head}")
        if not patch.positions or not all(0 <= p < length for p in patch.positions):
            raise GenerationError(f"positions must lie in 0 to {length - 1}")

    def difference(self, patches: Sequence[Patch]) -> float:
        """The corrupt run with every patch in ``patches`` applied, as the metric."""
        return self.differences([patches])[0]

    def differences(self, runs: Sequence[Sequence[Patch]], progress: Progress | None = None) -> list[float]:
        """The metric of each run of ``runs`` (the patches it applies together), ``rows`` runs a
        batch, the runs that start at the same block together; ``progress(done, total)``
        after each batch."""
        for patches in runs:
            for patch in patches:
                self.check(patch)
        order = sorted(range(len(runs)), key=lambda i: self._start(runs[i]))
        found = [0.0] * len(runs)
        for first in range(0, len(order), self.rows):
            chunk = order[first:first + self.rows]
            values = self._batch([runs[i] for i in chunk]).tolist()
            for i, value in zip(chunk, values):
                found[i] = value
            if progress is not None:
                progress(first + len(chunk), len(runs))
        return found

    def _start(self, patches: Sequence[Patch]) -> int:
        """The first block a run changes (blocks before it compute what the corrupt run did)."""
        return min((patch.layer for patch in patches), default=self.model.config.layers)

    def _batch(self, runs: Sequence[Sequence[Patch]]) -> Tensor:
        """The metric of up to ``rows`` runs, one a row; the rows left over carry the corrupt run."""
        start = min(self._start(patches) for patches in runs)
        x = self._entering(start).expand(self.rows, -1, -1).contiguous()
        with evaluating(self.model), torch.no_grad():
            out = self.model(None, entering=(start, x), sites=self.sites(runs), skip_head=True,
                             return_attention=True)
        return self._metric(out)[:len(runs)]

    def sites(self, runs: Sequence[Sequence[Patch]]) -> Sites:
        """The edits of a batch: each run's clean values at its patches' sites, positions and
        heads, in its row (the rows after the last run are left as the corrupt run)."""
        layers = self.model.config.layers
        sites = Sites(self.model.config)
        for row, patches in enumerate(runs):
            for patch in patches:
                name = site_of(patch.site, patch.layer, layers)
                sites.replace(name, self.clean[name], positions=patch.positions,
                              heads=None if patch.head is None else (patch.head,), rows=(row,))
        return sites


def _rows_agree(value: Tensor) -> bool:
    """Whether every row of ``value`` (batch first) has the bits of the first."""
    return value.shape[0] == 1 or bool(torch.equal(value, value[:1].expand_as(value)))


def one_token(tokenizer: Any, text: str, what: str) -> int:
    ids = tokenizer.encode(text, bos=False, eos=False)
    if len(ids) != 1:
        pieces = ", ".join(repr(tokenizer.piece_text(i)) for i in ids) or "nothing"
        raise GenerationError(f"{what} {text!r} must be one token; it encodes to {len(ids)}: {pieces}")
    return ids[0]


def grid(config: Any, sites: Sequence[str]) -> list[tuple[str, int, int | None]]:
    """The (site, layer, head) rows of the sweep's grid over ``sites``, in its order."""
    rows: list[tuple[str, int, int | None]] = []
    for site in sites:
        if site not in SITES:
            raise GenerationError(f"unknown site '{site}' (sites: {', '.join(SITES)})")
        layers = range(config.layers + 1) if site == "resid" else range(config.layers)
        heads: Sequence[int | None] = range(config.heads) if site == "head" else (None,)
        rows.extend((site, layer, head) for layer in layers for head in heads)
    return rows


def plan(patcher: Patcher, sites: Sequence[str]) -> list[Patch]:
    """Every site of ``sites`` at every layer (and head) and position, in the sweep's order."""
    positions = range(len(patcher.clean_ids))
    return [Patch(site, layer, (position,), head)
            for site, layer, head in grid(patcher.model.config, sites) for position in positions]


def effects_of(patcher: Patcher, patches: Sequence[Patch], progress: Progress | None = None) -> tuple[Effect, ...]:
    """Each one-position patch of ``patches`` applied alone, as effects in the same order."""
    differences = patcher.differences([(patch,) for patch in patches], progress)
    return tuple(Effect(patch.site, patch.layer, patch.head, patch.positions[0], difference,
                        patcher.restored(difference)) for patch, difference in zip(patches, differences))


def sweep(patcher: Patcher, sites: Sequence[str], progress: Progress | None = None) -> tuple[Effect, ...]:
    """Every site of ``sites`` at every layer (and head) and position, each patched alone."""
    return effects_of(patcher, plan(patcher, sites), progress)


def patch_prompts(model: Any, tokenizer: Any, clean: str, corrupt: str, answer: str, against: str,
                  sites: Sequence[str] = ("resid", "attn", "mlp"),
                  progress: Progress | None = None) -> PatchingResult:
    a, b = one_token(tokenizer, answer, "the answer"), one_token(tokenizer, against, "the other answer")
    patcher = Patcher(model, tokenizer.encode_prompt(clean), tokenizer.encode_prompt(corrupt), a, b)
    effects = sweep(patcher, sites, progress)
    return PatchingResult(patcher.clean_ids, patcher.corrupt_ids, (a, tokenizer.piece_text(a)),
                          (b, tokenizer.piece_text(b)), patcher.clean_difference, patcher.corrupt_difference, effects)
