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
the clean answer back, 0 where it changes nothing. Every run (clean, corrupt, patched) is
the same forward with the same shapes, so patching is exact at both ends: the embeddings
at every position where the prompts differ give the clean difference bit for bit, and so
does the last residual at the last position; a site patched with its own corrupt value
gives the corrupt difference.

A patch at layer l leaves the blocks before l as they were in the corrupt run, so a patched
run starts from the corrupt run's residual entering block l (kept from that run) instead of
recomputing them: the same operations on the same values, so the same bits, at about half
the cost of a sweep. Only the last position goes through the output head, in every run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.training.model import decision_logits, evaluating

SITES = ("resid", "attn", "mlp", "head")


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


class Patcher:
    """The clean run's activations, and patched corrupt runs that read them."""

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
        self.clean: dict[str, Tensor] = {}
        self.corrupt: dict[str, Tensor] = {}
        self.clean_difference = self._difference(self._run(self.clean_ids, record=self.clean))
        self.corrupt_difference = self._difference(self._run(self.corrupt_ids, record=self.corrupt))

    def _run(self, ids: Sequence[int] | None, record: dict[str, Tensor] | None = None, start: int = 0) -> Tensor:
        """The last position's logits of a run over ``ids``; with ``start`` l > 0 the run
        begins at block l from the corrupt run's residual entering it (``ids`` unused)."""
        model = self.model
        with evaluating(model), torch.no_grad():
            if start == 0:
                x, self._rope = model.embed(torch.tensor([list(ids or ())]), None, 0, record)
            else:
                x = self._entering(start)
            for block in model.blocks[start:]:
                # Attention weights asked for: every run takes the same (explicit) path.
                x = block(x, self._rope, None, 0, None, True, record)[0]
            hidden = model.final_norm(x)
            if record is not None:
                record["ln_final.hook_normalized"] = hidden
            return decision_logits(model, hidden)

    def _entering(self, layer: int) -> Tensor:
        """The corrupt run's residual stream entering block ``layer`` (L: after the last)."""
        layers = self.model.config.layers
        if layer < layers:
            return self.corrupt[f"blocks.{layer}.hook_resid_pre"]
        return self.corrupt[f"blocks.{layers - 1}.hook_resid_post"]

    def _difference(self, logits: Tensor) -> float:
        return float(logits[self.answer].to(torch.float64) - logits[self.against].to(torch.float64))

    def restored(self, difference: float) -> float | None:
        gap = self.clean_difference - self.corrupt_difference
        return None if gap == 0 else (difference - self.corrupt_difference) / gap

    def _hook(self, patch: Patch) -> tuple[Any, Callable[..., Any], bool]:
        """(module, hook, is a pre-hook) putting the clean values in at the patch's positions."""
        model, clean, at = self.model, self.clean, list(patch.positions)
        layers = model.config.layers
        if patch.site == "resid":
            name = f"blocks.{patch.layer}.hook_resid_pre" if patch.layer < layers else \
                f"blocks.{layers - 1}.hook_resid_post"
            module = model.blocks[patch.layer] if patch.layer < layers else model.final_norm

            def pre(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
                x = args[0].clone()
                x[:, at] = clean[name][:, at]
                return (x, *args[1:])
            return module, pre, True
        if patch.site == "head":
            hd = model.config.head_dim
            columns = slice(patch.head * hd, (patch.head + 1) * hd)
            name = f"blocks.{patch.layer}.attn.hook_z"

            def pre_z(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
                z = args[0].clone()
                z[:, at, columns] = clean[name][:, at, columns]
                return (z, *args[1:])
            return model.blocks[patch.layer].attn.o_proj, pre_z, True
        name = f"blocks.{patch.layer}.hook_{'attn_out' if patch.site == 'attn' else 'mlp_out'}"
        module = model.blocks[patch.layer].attn if patch.site == "attn" else model.blocks[patch.layer].ffn

        def post(_module: Any, _args: Any, output: Any) -> Any:
            value = output[0] if isinstance(output, tuple) else output
            value = value.clone()
            value[:, at] = clean[name][:, at]
            return (value, *output[1:]) if isinstance(output, tuple) else value
        return module, post, False

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
        handles = []
        try:
            for patch in patches:
                self.check(patch)
                module, hook, pre = self._hook(patch)
                handles.append(module.register_forward_pre_hook(hook) if pre else module.register_forward_hook(hook))
            # Blocks before the first patched one compute what the corrupt run did.
            return self._difference(self._run(self.corrupt_ids, start=min(patch.layer for patch in patches)
                                              if patches else 0))
        finally:
            for handle in handles:
                handle.remove()


def one_token(tokenizer: Any, text: str, what: str) -> int:
    ids = tokenizer.encode(text, bos=False, eos=False)
    if len(ids) != 1:
        pieces = ", ".join(repr(tokenizer.piece_text(i)) for i in ids) or "nothing"
        raise GenerationError(f"{what} {text!r} must be one token; it encodes to {len(ids)}: {pieces}")
    return ids[0]


def sweep(patcher: Patcher, sites: Sequence[str], progress: Callable[[int, int], None] | None = None
          ) -> tuple[Effect, ...]:
    """Every site of ``sites`` at every layer (and head) and position, one at a time."""
    config = patcher.model.config
    plan: list[Patch] = []
    for site in sites:
        if site not in SITES:
            raise GenerationError(f"unknown site '{site}' (sites: {', '.join(SITES)})")
        layers = range(config.layers + 1) if site == "resid" else range(config.layers)
        heads: Sequence[int | None] = range(config.heads) if site == "head" else (None,)
        for layer in layers:
            for head in heads:
                for position in range(len(patcher.clean_ids)):
                    plan.append(Patch(site, layer, (position,), head))
    effects = []
    for done, patch in enumerate(plan, start=1):
        difference = patcher.difference([patch])
        effects.append(Effect(patch.site, patch.layer, patch.head, patch.positions[0], difference,
                              patcher.restored(difference)))
        if progress is not None:
            progress(done, len(plan))
    return tuple(effects)


def patch_prompts(model: Any, tokenizer: Any, clean: str, corrupt: str, answer: str, against: str,
                  sites: Sequence[str] = ("resid", "attn", "mlp"),
                  progress: Callable[[int, int], None] | None = None) -> PatchingResult:
    a, b = one_token(tokenizer, answer, "the answer"), one_token(tokenizer, against, "the other answer")
    patcher = Patcher(model, tokenizer.encode_prompt(clean), tokenizer.encode_prompt(corrupt), a, b)
    effects = sweep(patcher, sites, progress)
    return PatchingResult(patcher.clean_ids, patcher.corrupt_ids, (a, tokenizer.piece_text(a)),
                          (b, tokenizer.piece_text(b)), patcher.clean_difference, patcher.corrupt_difference, effects)
