"""Steering: a direction added, times a coefficient, to one site's values during generation.

A :class:`Steering` holds the site (a name of :mod:`~minigpt_tui.engine.models.sites`
whose values are [T, width]: the residual stream, a block's attention or feed-forward output,
the final norm's output, or ``attn.hook_z``), the direction [width], the coefficient, which
positions it edits and where the direction came from. :meth:`Steering.sites` makes the
:class:`~minigpt_tui.engine.models.sites.Sites` a
:class:`~minigpt_tui.engine.analysis.generation.DecisionStepper` takes; the edit is
``Sites.add``, so a coefficient of 0 records no edit and such a generation has every bit of
the unsteered one.

Positions (absolute, so a cached and a recomputed generation edit the same ones):

- ``all``: every position of every forward;
- ``prompt``: the prompt's positions (BOS included), 0 to P - 1;
- ``generated``: the positions that decide, the prompt's last (P - 1, whose output is the
  first decision) and every generated one after it. Past the context the sliding window's
  positions are counted from its start, as the model sees them.

Directions:

- :func:`contrast_direction`: from a contrast pair of prompts A and B, the site's value for
  A minus its value for B, read by one forward each (BOS prepended as a generation prompt
  is), at the ``last`` position of each prompt (the default: prompts of different lengths
  are fine) or the ``mean`` over each prompt's positions. The raw difference by default
  (coefficient 1 adds the whole difference: at the last position of B it gives A's value
  there); ``unit`` scales it to norm 1.
- :func:`load_direction` / :func:`save_direction`: a safetensors file holding one tensor
  ``direction`` [width] and the metadata ``format``, ``version``, ``site`` and ``source``
  (JSON: how it was made).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.core.tensors import bytes_digest
from minigpt_tui.engine.formats.safetensors_read import load_file
from minigpt_tui.engine.formats.safetensors_write import write_safetensors
from minigpt_tui.engine.models.model import evaluating
from minigpt_tui.engine.models.sites import HEAD_VALUES, PATTERN, Sites

POSITIONS = ("all", "prompt", "generated")
REDUCTIONS = ("last", "mean")
STEERING_FORMAT = "minigpt-tui-steering"
STEERING_VERSION = 1
TENSOR = "direction"


@dataclass(frozen=True, eq=False)
class Steering:
    """One steering edit: ``coefficient * direction`` added at ``site`` over ``positions``;
    ``source`` says where the direction came from (JSON-able)."""

    site: str
    direction: Tensor
    coefficient: float = 1.0
    positions: str = "all"
    source: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_coefficient(self.coefficient)
        if self.positions not in POSITIONS:
            raise GenerationError(f"steering positions must be one of {', '.join(POSITIONS)}, got '{self.positions}'")
        if self.direction.dim() != 1 or not self.direction.is_floating_point():
            raise GenerationError(f"a steering direction is one vector of floats, got {self.direction.dtype} "
                                  f"{list(self.direction.shape)}")
        if not bool(torch.isfinite(self.direction).all()):
            raise GenerationError("the steering direction holds NaN or infinite values")

    @property
    def digest(self) -> str:
        """SHA-256 of the direction's bytes (as stored: its own dtype)."""
        return bytes_digest(self.direction)

    @property
    def norm(self) -> float:
        return float(self.direction.to(torch.float64).norm())

    def check(self, config: Any) -> None:
        """Refuse a site this model has not, a site that is not [T, width] and a direction
        of another width, each in one line."""
        sites = Sites(config)
        sites.check(self.site)
        width = site_width(config, self.site)
        if self.direction.shape[0] != width:
            raise GenerationError(f"the steering direction has width {self.direction.shape[0]} but site "
                                  f"'{self.site}' of this model holds {width} values a position")

    def sites(self, config: Any, prompt_length: int, budget: int) -> Sites:
        """The stepper's sites for a prompt of ``prompt_length`` ids (BOS included) and at
        most ``budget`` new tokens."""
        self.check(config)
        return Sites(config).add(self.site, self.direction, self.coefficient,
                                 positions=self.position_list(prompt_length, budget))

    def position_list(self, prompt_length: int, budget: int) -> range | None:
        """The absolute positions edited (None: all). A sliding window's positions (past the
        context) are below ``prompt_length + budget`` too."""
        if self.positions == "all":
            return None
        if self.positions == "prompt":
            return range(prompt_length)
        return range(max(prompt_length - 1, 0), prompt_length + budget)

    def record(self) -> dict[str, Any]:
        """What a trace records: site, coefficient, positions, the direction's digest, norm,
        width and dtype, and its source."""
        return {"site": self.site, "coefficient": self.coefficient, "positions": self.positions,
                "direction_sha256": self.digest, "direction_norm": self.norm, "width": int(self.direction.shape[0]),
                "dtype": str(self.direction.dtype).removeprefix("torch."), "source": self.source}


def check_coefficient(coefficient: float) -> None:
    if not isinstance(coefficient, (int, float)) or not math.isfinite(coefficient):
        raise GenerationError(f"the steering coefficient must be a finite number, got {coefficient}")


def site_width(config: Any, site: str) -> int:
    """How many values a position of ``site`` holds; a site that is not [T, width] (the
    attention pattern) is refused."""
    if site.endswith(PATTERN):
        raise GenerationError(f"site '{site}' holds attention weights [heads, T, S]: steering adds to a site of "
                              "[T, width] values (hook_resid_*, hook_attn_out, hook_mlp_out, attn.hook_z, ...)")
    if site.endswith(HEAD_VALUES):
        return int(config.heads * config.head_dim)
    return int(config.width)


# -- directions --------------------------------------------------------------------------
def site_values(model: Any, ids: list[int], site: str) -> Tensor:
    """The site's values [T, width] for one sequence of ids, read by one forward in evaluation."""
    if not ids:
        raise GenerationError("a contrast prompt encodes to no ids and this tokenizer adds no BOS: give some text")
    if len(ids) > model.config.context:
        raise GenerationError(f"a contrast prompt of {len(ids)} ids (BOS included) is longer than the model's "
                              f"context of {model.config.context}")
    sites = Sites(model.config).read(site)
    with evaluating(model), torch.no_grad():
        model(torch.tensor([ids], dtype=torch.int64), sites=sites, skip_head=True)
    return sites[site][0]


def contrast_direction(model: Any, tokenizer: Any, site: str, prompt_a: str, prompt_b: str, *,
                       reduce: str = "last", unit: bool = False) -> Tensor:
    """A's value at ``site`` minus B's (see the module doc), in the model's dtype."""
    if reduce not in REDUCTIONS:
        raise GenerationError(f"a contrast direction reduces positions by one of {', '.join(REDUCTIONS)}, "
                              f"got '{reduce}'")
    Sites(model.config).check(site)
    site_width(model.config, site)
    values = [site_values(model, tokenizer.encode_prompt(p), site) for p in (prompt_a, prompt_b)]
    a, b = (v[-1] if reduce == "last" else v.mean(dim=0) for v in values)
    direction = (a - b).detach().clone()
    norm = float(direction.to(torch.float64).norm())
    if norm == 0:
        raise GenerationError(f"the two prompts give the same values at '{site}': the direction is zero")
    return direction / norm if unit else direction


def contrast_steering(model: Any, tokenizer: Any, site: str, prompts: tuple[str, str], *, coefficient: float = 1.0,
                      positions: str = "all", reduce: str = "last", unit: bool = False) -> Steering:
    """A :class:`Steering` whose direction is the contrast of ``prompts`` (A, B) at ``site``."""
    check_coefficient(coefficient)
    direction = contrast_direction(model, tokenizer, site, *prompts, reduce=reduce, unit=unit)
    source = {"kind": "contrast", "a": prompts[0], "b": prompts[1], "reduce": reduce, "unit": unit}
    return Steering(site, direction, coefficient, positions, source)


def save_direction(steering: Steering, path: Path | str) -> Path:
    """Write the direction as a steering file (the caller checks the path may be written)."""
    metadata = {"format": STEERING_FORMAT, "version": str(STEERING_VERSION), "site": steering.site,
                "source": json.dumps(steering.source, sort_keys=True, ensure_ascii=False)}
    written = write_safetensors(path, [(TENSOR, steering.direction.detach().contiguous().clone())], metadata)
    return written.path


def load_direction(path: Path | str, *, coefficient: float = 1.0, positions: str = "all",
                   site: str | None = None) -> Steering:
    """A steering file's direction (``site``: another site than the file's), one line for a
    file that is not one."""
    loaded = load_file(path)
    meta = loaded.metadata
    if meta.get("format") != STEERING_FORMAT:
        raise GenerationError(f"{path} is not a steering file (its metadata format is {meta.get('format')!r}, "
                              f"not '{STEERING_FORMAT}')")
    if meta.get("version") != str(STEERING_VERSION):
        raise GenerationError(f"{path}: unsupported steering file version {meta.get('version')!r} "
                              f"(this program reads version {STEERING_VERSION})")
    if loaded.header.names != [TENSOR] or "site" not in meta:
        raise GenerationError(f"{path}: a steering file holds one tensor '{TENSOR}' and a 'site' in its metadata")
    direction = loaded.tensor(TENSOR).clone()
    source = {"kind": "file", "path": str(path), "sha256": loaded.sha256, "saved": _saved_source(meta)}
    return Steering(meta["site"] if site is None else site, direction, coefficient, positions, source)


def _saved_source(meta: Any) -> Any:
    """The ``source`` record the file was saved with (JSON), or its text when it is not JSON."""
    text = meta.get("source", "")
    try:
        return json.loads(text) if text else None
    except (json.JSONDecodeError, RecursionError, ValueError):
        return text[:200]
