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
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from minigpt_tui.engine.session.head_role_view import HeadRolesView, ModelKey
from minigpt_tui.widgets.painted_lines import BOLD, DIM, Line, PaintedLines, lines_text, message_line
from minigpt_tui.engine.session.view_names import HEAD_ROLES, head_name

ROLE_LABELS = {role: role.replace("_", "-") for role in HEAD_ROLES}  # as `minigpt-tui heads` names them
TOP_HEADS = 3
LABEL_CELLS = 4  # "b12 " before the cells
HIGHLIGHT = Style(bold=True, underline=True)
# dark blue, teal, yellow: the colour of a score from 0 through 1
RAMP = (ColorTriplet(28, 36, 82), ColorTriplet(18, 132, 138), ColorTriplet(250, 214, 64))


def score_cell(score: float) -> str:
    """A score as each cell prints it (two decimals)."""
    return f"{score:.2f}"


def ramp_colour(scale: float) -> Color:
    """The colour at ``scale`` (0 to 1) along the three-colour RAMP."""
    low, high = (RAMP[0], RAMP[1]) if scale < 0.5 else (RAMP[1], RAMP[2])
    t = scale * 2 if scale < 0.5 else scale * 2 - 1
    return Color.from_triplet(ColorTriplet(*(round(a + (b - a) * t) for a, b in zip(low, high))))


@functools.lru_cache(maxsize=4096)  # a head-view key redraws every cell: a style is made once per score
def score_style(score: float) -> Style:
    scale = math.sqrt(min(max(score, 0.0), 1.0))
    return Style(color="black" if scale >= 0.6 else "white", bgcolor=ramp_colour(scale))


HEADER_LINES = 2  # the title and the head axis, above a line per block


def block_line(view: HeadRolesView, role: str, layer: int, highlight: tuple[int, int]) -> Line:
    """Block ``layer``'s cells: each head's score on its colour, the highlighted one bracketed."""
    line: Line = [Segment(f"b{layer:<{LABEL_CELLS - 1}}", DIM)]
    for head in range(view.heads):
        score = view.score(role, layer, head)
        if (layer, head) == highlight:
            line += [Segment("[", BOLD), Segment(score_cell(score), score_style(score) + HIGHLIGHT), Segment("]", BOLD)]
        else:
            line += [Segment(" "), Segment(score_cell(score), score_style(score)), Segment(" ")]
    return line


def grid_lines(view: HeadRolesView, role: str, highlight: tuple[int, int]) -> list[Line]:
    axis = " " * LABEL_CELLS + "".join(f" h{head:<4}" for head in range(view.heads)).rstrip()
    lines: list[Line] = [[Segment(f"head roles · {ROLE_LABELS[role]}", BOLD), Segment("  (o: next role)", DIM)],
                         message_line(axis)]
    lines += [block_line(view, role, layer, highlight) for layer in range(view.layers)]
    top = " · ".join(f"{head_name(r.layer, r.head)} {score_cell(getattr(r, role))}" for r in view.top(role, TOP_HEADS))
    return [*lines, message_line(f"top: {top}"), message_line("rows: bN = block N · columns: hH = head H")]


def grid_text(view: HeadRolesView, role: str, highlight: tuple[int, int]) -> Text:
    return lines_text(grid_lines(view, role, highlight))


class HeadRoleGrid(PaintedLines):
    DEFAULT_CSS = """
    HeadRoleGrid { width: auto; height: auto; padding: 0 1; margin-bottom: 1; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__([message_line("head roles: shown for the loaded model")], **kwargs)
        self.view: HeadRolesView | None = None  # the scores shown
        self.role = HEAD_ROLES[0]
        self.highlight = (0, 0)  # the block and head whose pattern is shown
        self.asked: ModelKey | None = None

    def ask(self, key: ModelKey) -> bool:
        """Mark the grid waiting for the model ``key``; False when it is shown or asked already."""
        if key == self.asked:
            return False
        self.asked = key
        self.show_message("head roles: scoring every head on repeated random sequences…")
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
        """Bracket another head: only the rows of the old and the new head are drawn again."""
        before, self.highlight = self.highlight, (layer, head)
        view = self.view
        if view is None or view.model_key != self.asked or view.problem is not None:
            return
        if len(self.lines) != HEADER_LINES + view.layers + 2:  # not the grid yet
            self._show()
            return
        self.replace_lines({HEADER_LINES + row: block_line(view, self.role, row, self.highlight)
                            for row in {before[0], layer} if 0 <= row < view.layers})

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
            self.show_message(f"head roles: {view.problem}")
            return
        self.show_lines(grid_lines(view, self.role, self.highlight))
