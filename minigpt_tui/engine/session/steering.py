"""Steering as ``generate`` asks for it (and the app may): a direction from a contrast pair of
prompts or a steering file, added at a site during generation (:mod:`..analysis.steering`),
optionally saved, and the decisions with and without it side by side.

Torch-free at import: the engine is imported inside the functions that run it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.core.files import check_user_output

if TYPE_CHECKING:
    from minigpt_tui.engine.analysis.generation import DecisionStepper
    from minigpt_tui.engine.analysis.steering import Steering

POSITIONS = ("all", "prompt", "generated")  # as analysis.steering.POSITIONS
REDUCTIONS = ("last", "mean")  # as analysis.steering.REDUCTIONS


@dataclass(frozen=True)
class SteeringRequest:
    """Where a steering direction comes from (``contrast``: prompts A and B, or ``file``), the
    site (needed for a contrast; for a file, another site than the file's), the coefficient,
    the positions, how a contrast reduces positions (``last``/``mean``) and whether it is
    scaled to norm 1 (``unit``), a file to save the direction to (``save``, replaced only with
    ``replace``), and whether to run the unsteered generation beside it (``compare``).
    Everything that can be refused without a model is refused when it is made."""

    contrast: tuple[str, str] | None = None
    file: str | None = None
    site: str | None = None
    coefficient: float = 1.0
    positions: str = "all"
    reduce: str = "last"
    unit: bool = False
    save: str | None = None
    replace: bool = False
    compare: bool = False

    def __post_init__(self) -> None:
        self._check_source()
        self._check_values()

    def _check_source(self) -> None:
        """One source of the direction, with what it needs and nothing that shapes the other."""
        if (self.contrast is None) == (self.file is None):
            raise GenerationError("steering takes its direction from either a contrast pair of prompts or a file")
        if self.contrast is not None and not self.site:
            raise GenerationError("a contrast direction needs the site to read it at (say blocks.0.hook_resid_post)")
        if self.file is not None and (self.unit or self.reduce != "last"):
            raise GenerationError("--steer-reduce and --steer-unit shape a contrast direction, not a file's")
        if self.save and self.contrast is None:
            raise GenerationError("only a contrast direction is saved: the file given is one already")

    def _check_values(self) -> None:
        if not math.isfinite(self.coefficient):
            raise GenerationError(f"the steering coefficient must be a finite number, got {self.coefficient}")
        if self.positions not in POSITIONS:
            raise GenerationError(f"steering positions must be one of {', '.join(POSITIONS)}, got '{self.positions}'")
        if self.reduce not in REDUCTIONS:
            raise GenerationError(f"a contrast reduces positions by one of {', '.join(REDUCTIONS)}, got '{self.reduce}'")

    def check_outputs(self) -> None:
        """Refuse a save path that may not be written, before any model is opened."""
        if self.save:
            check_user_output(Path(self.save), replace=self.replace)

    def make(self, portable: Any) -> Steering:
        """The steering for ``portable``'s model, checked against it (site, width), and saved
        when asked."""
        from minigpt_tui.engine.analysis import steering as engine  # deferred: imports torch

        if self.contrast is not None:
            made = engine.contrast_steering(portable.model, portable.tokenizer, str(self.site), self.contrast,
                                            coefficient=self.coefficient, positions=self.positions,
                                            reduce=self.reduce, unit=self.unit)
        else:
            made = engine.load_direction(str(self.file), coefficient=self.coefficient, positions=self.positions,
                                         site=self.site or None)
        made.check(portable.model.config)
        if self.save:
            self.check_outputs()
            engine.save_direction(made, self.save)
        return made


def compared_decisions(plain: DecisionStepper, steered: DecisionStepper) -> list[dict[str, Any]]:
    """Each step's chosen id, piece and raw probability without and with the steering (each
    generation follows its own choices; a step one of them did not reach is None)."""
    rows = []
    for step in range(max(len(plain.decisions), len(steered.decisions))):
        without, with_ = (_chosen(s.decisions[step]) if step < len(s.decisions) else None for s in (plain, steered))
        rows.append({"step": step + 1, "without": without, "with": with_,
                     "same": without is not None and with_ is not None and without["id"] == with_["id"]})
    return rows


def _chosen(decision: Any) -> dict[str, Any]:
    chosen = decision.chosen
    return {"id": chosen.id, "piece": chosen.piece.text, "probability": chosen.raw_probability,
            "selection_probability": chosen.selection_probability}
