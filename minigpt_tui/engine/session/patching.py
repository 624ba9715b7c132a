"""Activation patching for the Generation screen: the defaults a decision suggests (its
context as the clean prompt, the chosen id against the runner-up) and the sweep itself, as
plain numbers. Torch-free at import: the screen's queue worker calls these functions and the
engine (:mod:`minigpt_tui.engine.analysis.patching`) does every forward pass, so the grid
shows exactly the engine's ``sweep``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.analysis.site_names import patch_site_name
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.session.generation import NO_MODEL, GenerationSession

if TYPE_CHECKING:
    from minigpt_tui.engine.analysis.attribution import Agreement, AttributionResult, Estimate
    from minigpt_tui.engine.analysis.patching import Effect, PatchingResult

GRID_SITES = ("resid", "attn", "mlp")  # the kinds the layer x position grid cycles through
Progress = Callable[[int, int], None]  # progress(done, total), on the worker thread


class PatchingStopped(Exception):
    """The view was closed while its sweep ran: the sweep ends at the next patched run."""


@dataclass(frozen=True)
class PatchDefaults:
    """What the dialog starts from: the decision's context, its chosen id and the runner-up
    (as text; an empty ``against`` when the decision has no other candidate)."""

    step: int
    clean: str
    answer: str
    against: str


@dataclass(frozen=True)
class PatchRequest:
    clean: str
    corrupt: str
    answer: str
    against: str
    sites: tuple[str, ...]


@dataclass(frozen=True)
class PatchingView:
    """A sweep's outcome: the two prompts' pieces, the metric at both ends, every effect
    (``head`` effects only where asked for) and the model's shape. An attribution view
    (:func:`run_attribution`) has the same shape, its effects the engine's estimates (each
    with the same cell fields, ``difference`` and ``restored``)."""

    request: PatchRequest
    clean_pieces: tuple[str, ...]
    corrupt_pieces: tuple[str, ...]
    answer_piece: str
    against_piece: str
    clean_difference: float
    corrupt_difference: float
    layers: int
    heads: int
    effects: tuple[Effect, ...] | tuple[Estimate, ...]

    @property
    def differing(self) -> frozenset[int]:
        """Positions where the clean and corrupt prompts hold different pieces."""
        return frozenset(i for i, (a, b) in enumerate(zip(self.clean_pieces, self.corrupt_pieces)) if a != b)


def _token_text(tokenizer: Any, token_id: int) -> str:
    return tokenizer.decode([token_id]).display


def _typable(tokenizer: Any, token_id: int) -> bool:
    """Whether the id's text can be typed in the one-line field (printable, so no newline or
    control byte) and encodes back to that one id (a lone byte of a longer UTF-8 character,
    or a special, does not)."""
    text = _token_text(tokenizer, token_id)
    return bool(text) and text.isprintable() and tokenizer.encode(text, bos=False, eos=False) == [token_id]


def patch_defaults(session: GenerationSession, step: int) -> PatchDefaults:
    """Decision ``step`` (1-based) as the dialog's defaults: its context, the chosen id and
    the runner-up (the best-ranked other eligible id whose text can be typed)."""
    stepper = session.stepper
    if stepper is None:
        raise GenerationError(NO_MODEL)
    if not 1 <= step <= len(stepper.decisions):
        raise GenerationError(f"there is no decision {step} to patch")
    decision = stepper.decisions[step - 1]
    tokenizer = stepper.tokenizer
    chosen = decision.chosen.id
    logits = decision.logits.tolist()
    ranked = sorted(range(len(logits)), key=lambda i: (-logits[i], i))  # the stepper's rank order
    eligible = decision.eligible.tolist()
    runner_up = next((i for i in ranked if i != chosen and eligible[i] and _typable(tokenizer, i)), None)
    against = _token_text(tokenizer, runner_up) if runner_up is not None else ""
    return PatchDefaults(step, tokenizer.decode(decision.prefix_ids).display, _token_text(tokenizer, chosen), against)


def _checked(progress: Progress | None, stop: threading.Event) -> Progress:
    def report(done: int, total: int) -> None:
        if stop.is_set():
            raise PatchingStopped
        if progress is not None:
            progress(done, total)
    return report


def _patcher(session: GenerationSession, request: PatchRequest) -> tuple[Any, Any, tuple[int, int], tuple[int, int]]:
    from minigpt_tui.engine.analysis.patching import (  # deferred: imports torch
        Patcher,
    )

    portable, tokenizer, a, b = _answers(session, request)
    patcher = Patcher(portable.model, tokenizer.encode_prompt(request.clean), tokenizer.encode_prompt(request.corrupt),
                      a, b)
    return patcher, tokenizer, (a, b), (len(patcher.clean_ids), portable.model.config.layers)


def _answers(session: GenerationSession, request: PatchRequest) -> tuple[Any, Any, int, int]:
    """The loaded model, its tokenizer and the answer's and the other answer's one id each."""
    from minigpt_tui.engine.analysis.patching import one_token  # deferred: imports torch

    portable = session.portable
    if portable is None:
        raise GenerationError(NO_MODEL)
    tokenizer = portable.tokenizer
    a, b = one_token(tokenizer, request.answer, "the answer"), one_token(tokenizer, request.against, "the other answer")
    return portable, tokenizer, a, b


def _view(request: PatchRequest, tokenizer: Any, runner: Any, answers: tuple[int, int], effects: Any) -> PatchingView:
    """A sweep's or an attribution's result as the view (``runner``: the Patcher or Attributor)."""
    config = runner.model.config
    a, b = answers
    return PatchingView(request, tuple(tokenizer.piece_text(i) for i in runner.clean_ids),
                        tuple(tokenizer.piece_text(i) for i in runner.corrupt_ids), tokenizer.piece_text(a),
                        tokenizer.piece_text(b), runner.clean_difference, runner.corrupt_difference, config.layers,
                        config.heads, effects)


def run_patching(session: GenerationSession, request: PatchRequest, progress: Progress | None = None,
                 stop: threading.Event | None = None) -> PatchingView:
    """The engine's sweep over ``request.sites``, as a view (worker thread)."""
    from minigpt_tui.engine.analysis.patching import (  # deferred: imports torch
        sweep,
    )

    stop = stop or threading.Event()
    if stop.is_set():
        raise PatchingStopped
    patcher, tokenizer, (a, b), _ = _patcher(session, request)
    return _view(request, tokenizer, patcher, (a, b), sweep(patcher, request.sites, _checked(progress, stop)))


def run_attribution(session: GenerationSession, request: PatchRequest,
                    stop: threading.Event | None = None) -> PatchingView:
    """The attribution grid of ``request`` (every head's too: the gradients give them at no
    cost) as a view whose effects are the engine's estimates (worker thread; quick: one
    clean forward, one corrupt forward and one backward)."""
    from minigpt_tui.engine.analysis.attribution import (  # deferred: imports torch
        Attributor,
        attribute,
    )
    if stop is not None and stop.is_set():
        raise PatchingStopped
    portable, tokenizer, a, b = _answers(session, request)
    attributor = Attributor(portable.model, tokenizer.encode_prompt(request.clean),
                            tokenizer.encode_prompt(request.corrupt), a, b)
    estimates = attribute(attributor, tuple(dict.fromkeys((*request.sites, "head"))))
    return _view(request, tokenizer, attributor, (a, b), estimates)


def view_agreement(exact: PatchingView, attributed: PatchingView) -> Agreement:
    """The engine's ``agreement`` of a sweep's view and an attribution view (the cells both have)."""
    from minigpt_tui.engine.analysis.attribution import (  # deferred: imports torch
        agreement,
    )

    return agreement(exact.effects, attributed.effects, exact.corrupt_difference)


def run_layer_heads(session: GenerationSession, request: PatchRequest, layer: int, progress: Progress | None = None,
                    stop: threading.Event | None = None) -> tuple[Effect, ...]:
    """Every head of block ``layer`` at every position, each patched alone, in the order (and
    with the very runs, batched alike) of the engine's ``sweep`` over ``head``."""
    from minigpt_tui.engine.analysis.patching import (  # deferred: imports torch
        Patch,
        effects_of,
    )

    stop = stop or threading.Event()
    if stop.is_set():
        raise PatchingStopped
    patcher, _, _, (length, layers) = _patcher(session, request)
    if not 0 <= layer < layers:
        raise GenerationError(f"head has layers 0 to {layers - 1}, not {layer}")
    plan = [Patch("head", layer, (position,), head) for head in range(patcher.model.config.heads)
            for position in range(length)]
    return effects_of(patcher, plan, _checked(progress, stop))


def patch_prompts_of(portable: Any, clean: str, corrupt: str, answer: str, against: str, sites: Sequence[str],
                     progress: Progress | None = None) -> PatchingResult:
    """``patch``: the engine's sweep over ``sites`` of an opened model, as one record."""
    from minigpt_tui.engine.analysis.patching import (  # deferred: imports torch
        patch_prompts,
    )

    return patch_prompts(portable.model, portable.tokenizer, clean, corrupt, answer, against, sites,
                         progress=progress)


def named_patching_json(result: PatchingResult) -> dict[str, Any]:
    """A sweep's record as JSON, each effect with its site's display name beside the stable keys."""
    data = result.to_json()
    for effect in data["effects"]:
        effect["name"] = patch_site_name(effect["site"], effect["layer"], effect["head"])
    return data


def attribute_prompts_of(portable: Any, clean: str, corrupt: str, answer: str, against: str, sites: Sequence[str],
                         steps: int | None = None, progress: Progress | None = None) -> AttributionResult:
    """``patch --attribution``: the engine's attribution grid over ``sites`` of an opened
    model (integrated gradients over ``steps`` points when given), as one record."""
    from minigpt_tui.engine.analysis.attribution import (  # deferred: imports torch
        attribute_prompts,
    )

    if steps is not None and steps < 1:
        raise GenerationError(f"--ig-steps must be at least 1, got {steps}")
    return attribute_prompts(portable.model, portable.tokenizer, clean, corrupt, answer, against, sites, steps,
                             progress=progress)


def agreement_of(result: PatchingResult, attribution: AttributionResult) -> Agreement:
    """How the attribution grid ranks the cells against the exact sweep (the engine's
    ``agreement``: Spearman over the cells, the top five of each)."""
    from minigpt_tui.engine.analysis.attribution import (  # deferred: imports torch
        agreement,
    )

    return agreement(result.effects, attribution.estimates, result.corrupt_difference)


def cell_name(key: tuple[str, int, int | None, int]) -> str:
    """A grid cell (site, layer, head, position) as its site's display name and position."""
    site, layer, head, position = key
    return f"{patch_site_name(site, layer, head)} @ {position}"


def patch_json(result: PatchingResult | None, attribution: AttributionResult | None) -> dict[str, Any]:
    """``patch --json``: the sweep's record (``effects``) when it ran; with attribution its
    grid under ``attribution`` and, beside a sweep, the two compared under ``agreement``."""
    if result is not None:
        data = named_patching_json(result)
    elif attribution is not None:
        data = {"clean_ids": list(attribution.clean_ids), "corrupt_ids": list(attribution.corrupt_ids),
                "answer": {"id": attribution.answer[0], "piece": attribution.answer[1]},
                "against": {"id": attribution.against[0], "piece": attribution.against[1]},
                "clean_difference": attribution.clean_difference,
                "corrupt_difference": attribution.corrupt_difference}
    else:
        raise ValueError("patch_json needs a sweep, an attribution grid or both")
    if attribution is None:
        return data
    grid = attribution.to_json()
    for estimate in grid["estimates"]:
        estimate["name"] = patch_site_name(estimate["site"], estimate["layer"], estimate["head"])
    data["attribution"] = grid
    if result is not None:
        data["agreement"] = agreement_json(agreement_of(result, attribution))
    return data


def agreement_json(agreement: Agreement) -> dict[str, Any]:
    def cells(keys: Sequence[tuple[str, int, int | None, int]]) -> list[dict[str, Any]]:
        return [{"site": s, "layer": l, "head": h, "position": p, "name": patch_site_name(s, l, h)}
                for s, l, h, p in keys]

    return {"cells": agreement.cells, "spearman": agreement.spearman, "k": agreement.k,
            "top_exact": cells(agreement.top_exact), "top_attributed": cells(agreement.top_attributed),
            "shared": agreement.shared}
