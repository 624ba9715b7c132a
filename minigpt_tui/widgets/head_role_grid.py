"""Every head's score for one role as a block x head grid, above the head pattern: each cell
prints the score and is coloured by it (dark 0 to bright 1, on a square-root scale so the
small scores of an untrained model still differ), the head whose pattern is shown is
bracketed, and the role's top heads are named below. ``o`` cycles the role.

The scores are the engine's head-role records (what ``minigpt-tui heads`` prints), computed
once per model on the generation worker.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from rich.color import Color
from rich.color_triplet import ColorTriplet
from rich.style import Style
from rich.text import Text
from textual.widgets import Static

from minigpt_tui.engine.analysis.roles import HEAD_ROLES
from minigpt_tui.engine.analysis.site_names import head_name
from minigpt_tui.engine.session.head_role_view import HeadRolesView, ModelKey

ROLE_LABELS = {role: role.replace("_", "-") for role in HEAD_ROLES}  # as `minigpt-tui heads` names them
TOP_HEADS = 3
LABEL_CELLS = 4  # "b12 " before the cells
# dark blue, teal, yellow: the colour of a score from 0 through 1
RAMP = (ColorTriplet(28, 36, 82), ColorTriplet(18, 132, 138), ColorTriplet(250, 214, 64))


def score_cell(score: float) -> str:
    """A score as each cell prints it (two decimals)."""
    return f"{score:.2f}"


@functools.lru_cache(maxsize=4096)  # a head-view key redraws every cell: a style is made once per score
def score_style(score: float) -> Style:
    scale = math.sqrt(min(max(score, 0.0), 1.0))
    low, high = (RAMP[0], RAMP[1]) if scale < 0.5 else (RAMP[1], RAMP[2])
    t = scale * 2 if scale < 0.5 else scale * 2 - 1
    background = ColorTriplet(*(round(a + (b - a) * t) for a, b in zip(low, high)))
    return Style(color="black" if scale >= 0.6 else "white", bgcolor=Color.from_triplet(background))


def grid_text(view: HeadRolesView, role: str, highlight: tuple[int, int]) -> Text:
    out = Text(no_wrap=True)
    out.append(f"head roles · {ROLE_LABELS[role]}", style="bold")
    out.append("  (o: next role)\n", style="dim")
    out.append(" " * LABEL_CELLS + "".join(f" h{head:<4}" for head in range(view.heads)).rstrip() + "\n",
               style="dim")
    for layer in range(view.layers):
        out.append(f"b{layer:<{LABEL_CELLS - 1}}", style="dim")
        for head in range(view.heads):
            score = view.score(role, layer, head)
            if (layer, head) == highlight:
                out.append("[", style="bold")
                out.append(score_cell(score), style=score_style(score) + Style(bold=True, underline=True))
                out.append("]", style="bold")
            else:
                out.append(" ")
                out.append(score_cell(score), style=score_style(score))
                out.append(" ")
        out.append("\n")
    top = " · ".join(f"{head_name(r.layer, r.head)} {score_cell(getattr(r, role))}" for r in view.top(role, TOP_HEADS))
    out.append(f"top: {top}\nrows: bN = block N · columns: hH = head H", style="dim")
    return out


class HeadRoleGrid(Static):
    DEFAULT_CSS = """
    HeadRoleGrid { width: auto; height: auto; padding: 0 1; margin-bottom: 1; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(Text("head roles: shown for the loaded model", style="dim"), **kwargs)
        self.view: HeadRolesView | None = None  # the scores shown
        self.role = HEAD_ROLES[0]
        self.highlight = (0, 0)  # the block and head whose pattern is shown
        self.asked: ModelKey | None = None

    def ask(self, key: ModelKey) -> bool:
        """Mark the grid waiting for the model ``key``; False when it is shown or asked already."""
        if key == self.asked:
            return False
        self.asked = key
        self.update(Text("head roles: scoring every head on repeated random sequences…", style="dim"))
        return True

    def forget_pending(self) -> None:
        """The queue dropped work: ask again next time unless the asked scores are shown."""
        if self.view is None or self.view.model_key != self.asked:
            self.asked = None

    def show_roles(self, view: HeadRolesView) -> None:
        if view.model_key != self.asked:  # scores of a model replaced since; its own are asked
            return
        self.view = view
        self._show()

    def cycle_role(self) -> str:
        self.role = HEAD_ROLES[(HEAD_ROLES.index(self.role) + 1) % len(HEAD_ROLES)]
        self._show()
        return self.role

    def show_head(self, layer: int, head: int) -> None:
        self.highlight = (layer, head)
        self._show()

    def scores(self) -> tuple[tuple[float, ...], ...]:
        """The shown role's score of every head, a row per block (empty before the scores come)."""
        view = self.view
        if view is None or view.problem is not None:
            return ()
        return tuple(tuple(view.score(self.role, layer, head) for head in range(view.heads))
                     for layer in range(view.layers))

    def _show(self) -> None:
        view = self.view
        if view is None or view.model_key != self.asked:
            return
        if view.problem is not None:
            self.update(Text(f"head roles: {view.problem}", style="dim"))
            return
        self.update(grid_text(view, self.role, self.highlight))
