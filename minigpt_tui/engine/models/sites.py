"""Named sites inside a model's forward: each can be read, replaced or added to.

Every activation a view or a method reads has a stable name (:data:`ACTIVATIONS`, the
naming of TransformerLens). A :class:`Sites` object given to ``MiniGPT.forward(sites=...)``
says what happens at them:

- ``read(*patterns)`` keeps the values of the sites the names (or shell patterns such as
  ``blocks.*.attn.hook_pattern``) match, in ``sites[name]``, as the rest of the forward
  sees them (after any edit there) and with the autograd graph when gradients are on;
- ``replace(name, source, ...)`` puts other values in: ``source`` is a tensor (the site's
  values, broadcast to its shape: a run recorded with ``read``, or a direction) or a
  function of the site's value returning the new one;
- ``add(name, direction, coefficient, ...)`` adds ``coefficient * direction``; a
  coefficient of 0 is no edit at all, so such a run has every bit of the unedited one.

An edit can be narrowed to ``positions`` (absolute: position p is p whether the forward
runs the whole prefix or continues a key/value cache), ``heads`` (query heads: the head's
columns of ``attn.hook_z``, its rows of ``attn.hook_pattern``) and batch ``rows``; the
values outside keep their bits. Several edits at one site apply in the order given.

The forward calls :meth:`SiteVisit.at` at each site (``None`` when there is nothing to do,
which costs a test against ``None``). A forward given no sites, or sites with nothing to
read or edit, takes the same path and computes the same bits as one that never heard of
them; training passes none. A forward with anything to read or edit computes attention
explicitly (the fused kernels keep no weights and have no sites inside).

Torch is only needed by the tensors handed in: this module imports it for the edits.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from minigpt_tui.engine.core.errors import GenerationError

# The sites a forward passes (``{l}`` is a block's index). T positions, D width, H query
# heads, K head width, S positions a query reads; every one has a leading batch dimension.
ACTIVATIONS: dict[str, str] = {
    "hook_embed": "[T, D] token table rows of the input",
    "hook_pos_embed": "[T, D] position table rows (learned positions only)",
    "blocks.{l}.hook_resid_pre": "[T, D] residual stream entering block l",
    "blocks.{l}.attn.hook_pattern": "[H, T, S] attention weights, query x key",
    "blocks.{l}.attn.hook_z": "[T, H * K] each head's weighted values, before the output map",
    "blocks.{l}.hook_attn_out": "[T, D] the attention block's output (all heads + bias)",
    "blocks.{l}.hook_resid_mid": "[T, D] residual after the attention add (sequential only)",
    "blocks.{l}.hook_mlp_out": "[T, D] the feed-forward block's output",
    "blocks.{l}.hook_resid_post": "[T, D] residual leaving block l",
    "ln_final.hook_normalized": "[T, D] the final norm's output",
}
PATTERN, HEAD_VALUES = "attn.hook_pattern", "attn.hook_z"
Source = Tensor | Callable[[Tensor], Tensor]


def site_names(config: Any) -> tuple[str, ...]:
    """Every site a model of ``config`` passes, in forward order."""
    kept = [t for t in ACTIVATIONS if _passed(t, config)]
    each_block = [t for t in kept if t.startswith("blocks.")]
    return (*(t for t in kept if t.startswith("hook_")),
            *(t.format(l=layer) for layer in range(config.layers) for t in each_block), "ln_final.hook_normalized")


def _passed(template: str, config: Any) -> bool:
    """Whether a model of ``config`` has the site: position rows only when learned, the
    residual between attention and feed-forward only when sequential."""
    if template == "hook_pos_embed":
        return bool(config.positions == "learned")
    if template.endswith("hook_resid_mid"):
        return bool(config.residual != "parallel")
    return True


@dataclass(frozen=True, eq=False)
class Edit:
    """One change at a site: ``source`` replaces the selected values, or with ``add`` the
    selected values gain ``coefficient * source``."""

    source: Source
    positions: tuple[int, ...] | None
    heads: tuple[int, ...] | None
    rows: tuple[int, ...] | None
    add: bool = False
    coefficient: float = 1.0


class Sites:
    """What a forward reads and edits at its named sites (see the module doc). Made for one
    model's settings (``Sites(model.config)``); the values read are kept in place of the
    previous forward's."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.names = site_names(config)
        self._known = frozenset(self.names)
        self._reads: set[str] = set()
        self._edits: dict[str, list[Edit]] = {}
        self.values: dict[str, Tensor] = {}

    @property
    def active(self) -> bool:
        """Whether a forward has anything to read or edit."""
        return bool(self._reads or self._edits)

    def read(self, *patterns: str) -> "Sites":
        """Keep the values of every site a name or shell pattern matches (``*``: all)."""
        for pattern in patterns:
            matched = fnmatch.filter(self.names, pattern)
            if not matched:
                raise GenerationError(f"no site matches '{pattern}' (sites: {self.legend()})")
            self._reads.update(matched)
        return self

    def replace(self, name: str, source: Source, positions: Iterable[int] | None = None,
                heads: Iterable[int] | None = None, rows: Iterable[int] | None = None) -> "Sites":
        """Put ``source`` (a tensor broadcast to the site's shape, or a function of the site's
        value) in place of the site's values at ``positions``, ``heads`` and ``rows`` (all
        when not given)."""
        return self._edit(name, Edit(source, *self._selection(name, positions, heads, rows)))

    def add(self, name: str, direction: Tensor, coefficient: float = 1.0, positions: Iterable[int] | None = None,
            heads: Iterable[int] | None = None, rows: Iterable[int] | None = None) -> "Sites":
        """Add ``coefficient * direction`` (broadcast to the site's shape) to the site's values
        at ``positions``, ``heads`` and ``rows``; a coefficient of 0 edits nothing."""
        selection = self._selection(name, positions, heads, rows)
        if coefficient == 0:
            return self
        return self._edit(name, Edit(direction, *selection, add=True, coefficient=float(coefficient)))

    def __getitem__(self, name: str) -> Tensor:
        try:
            return self.values[name]
        except KeyError:
            self.check(name)
            raise GenerationError(f"site '{name}' was not read by the last forward") from None

    def check(self, name: str) -> None:
        """Refuse a name this model has no site for, in one line listing the names it has."""
        if name not in self._known:
            raise GenerationError(f"unknown site '{name}' (sites: {self.legend()})")

    def legend(self) -> str:
        """The site names of this model in one line, the blocks' as a range."""
        layers = self.config.layers
        span = "0" if layers == 1 else f"0..{layers - 1}"
        shown = dict.fromkeys(n.replace(f"blocks.{n.split('.')[1]}.", f"blocks.{{{span}}}.")
                              if n.startswith("blocks.") else n for n in self.names)
        return ", ".join(shown)

    def visit(self, past: int) -> "SiteVisit | None":
        """What one forward over the positions after ``past`` applies (the values the last
        one read are dropped); None when there is nothing to read or edit."""
        if not self.active:
            return None
        self.values = {}
        return SiteVisit(self, past)

    def _selection(self, name: str, positions: Iterable[int] | None, heads: Iterable[int] | None,
                   rows: Iterable[int] | None) -> tuple[tuple[int, ...] | None, ...]:
        self.check(name)
        chosen = tuple(None if v is None else tuple(int(i) for i in v) for v in (positions, heads, rows))
        if chosen[1] is not None:
            self._check_heads(name, chosen[1])
        if chosen[0] is not None and any(p < 0 for p in chosen[0]):
            raise GenerationError("positions count from 0")
        return chosen

    def _check_heads(self, name: str, heads: tuple[int, ...]) -> None:
        if not name.endswith((PATTERN, HEAD_VALUES)):
            raise GenerationError(f"site '{name}' has no heads: heads select in *.{PATTERN} and *.{HEAD_VALUES}")
        bad = [h for h in heads if not 0 <= h < self.config.heads]
        if bad:
            raise GenerationError(f"head {bad[0]} does not exist: each block has heads 0 to {self.config.heads - 1}")

    def _edit(self, name: str, edit: Edit) -> "Sites":
        self._edits.setdefault(name, []).append(edit)
        return self


class SiteVisit:
    """The sites of one forward over the positions after ``past``."""

    def __init__(self, sites: Sites, past: int) -> None:
        self.sites, self.past = sites, past

    def at(self, name: str, value: Tensor) -> Tensor:
        """``value`` after the edits at ``name``, kept when read."""
        sites = self.sites
        edits = sites._edits.get(name)
        if edits:
            value = _edited(value, edits, name, self.past, sites.config.heads)
        if name in sites._reads:
            sites.values[name] = value
        return value


def _edited(value: Tensor, edits: list[Edit], name: str, past: int, heads: int) -> Tensor:
    """``value`` with ``edits`` applied in order; the values none selects keep their bits.
    An edit everywhere makes a new tensor; one narrowed writes into a copy of the value."""
    axis = 2 if name.endswith(PATTERN) else 1  # the position axis
    copied = False
    for edit in edits:
        source = _source(edit, value, name, axis, past)
        index = _index(edit, value, axis, past, heads, name.endswith(HEAD_VALUES))
        if index is None:
            value = value + edit.coefficient * source if edit.add else source
            copied = False  # possibly the caller's tensor or a view: copy before writing into it
            continue
        if not copied:
            value, copied = value.clone(), True
        value[index] = value[index] + edit.coefficient * source[index] if edit.add else source[index]
    return value


def _source(edit: Edit, value: Tensor, name: str, axis: int, past: int) -> Tensor:
    """The edit's values in the site's dtype and shape: a function's output on ``value``, or
    the tensor given, this forward's positions of it when it covers every position so far."""
    source = edit.source(value) if callable(edit.source) else edit.source
    source = source.to(value.device, value.dtype)
    if source.shape == value.shape:
        return source
    if source.dim() == value.dim() and past and source.shape[axis] == past + value.shape[axis]:
        source = source.narrow(axis, past, value.shape[axis])  # a run from position 0: this forward's part
    try:
        return source.expand_as(value)
    except RuntimeError:
        raise GenerationError(f"site '{name}' holds {list(value.shape)} here: an edit's values "
                              f"{list(source.shape)} do not broadcast to it") from None


def _index(edit: Edit, value: Tensor, axis: int, past: int, heads: int, head_columns: bool) -> tuple[Any, ...] | None:
    """The selected rows x positions x heads of ``value`` as an index (each chosen axis an
    index tensor shaped for the outer product); None when the edit applies everywhere."""
    chosen: dict[int, list[int]] = {}
    if edit.rows is not None:
        chosen[0] = _rows(edit.rows, value.shape[0])
    if edit.positions is not None:  # made local to this forward; those it does not compute left out
        chosen[axis] = [p - past for p in edit.positions if past <= p < past + value.shape[axis]]
    if edit.heads is not None:
        dim = value.dim() - 1 if head_columns else 1
        chosen[dim] = _columns(edit.heads, value.shape[dim] // heads) if head_columns else list(edit.heads)
    if not chosen:
        return None
    index: list[Any] = [slice(None)] * value.dim()
    for slot, dim in enumerate(sorted(chosen)):
        shape = [1] * len(chosen)
        shape[slot] = len(chosen[dim])
        index[dim] = torch.tensor(chosen[dim], dtype=torch.int64, device=value.device).view(shape)
    return tuple(index)


def _rows(rows: tuple[int, ...], size: int) -> list[int]:
    if any(row >= size for row in rows):
        raise GenerationError(f"an edit names row {max(rows)} of a batch of {size}")
    return list(rows)


def _columns(heads: tuple[int, ...], width: int) -> list[int]:
    """The columns of ``attn.hook_z`` [.., H * K] that hold ``heads``."""
    return [column for head in heads for column in range(head * width, (head + 1) * width)]
