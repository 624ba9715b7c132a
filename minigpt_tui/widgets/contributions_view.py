"""Where a logit comes from: a signed bar per part (embedding, each head, each attention
bias, each feed-forward block, the final norm's bias), drawn left of the axis when negative,
right when positive, all on the scale of the largest part; the sum beside the model's logit.
The parts are listed largest |contribution| first (a model of 30 blocks of 9 heads has 301
parts: the few that matter come first), or in the order they enter the residual stream;
``b`` on the Generation screen switches. Parts are named as everywhere else
(:mod:`minigpt_tui.engine.analysis.site_names`).

Left of the axis a bar is drawn in whole cells, right of it in eighths of a cell.
Parts come from the engine's contribution records (plain floats), computed on a worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.containers import ScrollableContainer
from textual.widgets import Static

from minigpt_tui.engine.session.insight import PARTS_ORDER, largest_parts
from minigpt_tui.widgets.pieces import bar, fitted_piece

HALF_WIDTH = 20  # the most cells on each side of the axis
MIN_HALF_WIDTH = 4
VALUE_CELLS = 9 + 1  # "+123.4567 "
NAME_CELLS = 15  # "block 29 head 8": names of a 30-block model fit without moving the bars
EMPTY = "Press x to split the selected decision's logit into its parts."


def contribution_rows(parts: Any, *, largest_first: bool = False) -> list[tuple[str, float]]:
    """(name, value) for every part: in the order they enter the residual stream, or the
    largest |contribution| first."""
    named = largest_parts(parts.parts()) if largest_first else parts.parts()
    return [(part.name, part.value) for part in named]


def order_line(largest_first: bool) -> str:
    return f"{PARTS_ORDER} · b: model order" if largest_first else "model order · b: largest first"


def signed_bar(value: float, largest: float, half: int) -> Text:
    fraction = abs(value) / largest if largest > 0 else 0.0
    out = Text()
    if value < 0:
        # Left of the axis there are no left-growing partial glyphs: whole cells, right-aligned.
        out.append(("█" * round(fraction * half)).rjust(half), style="bold")
        out.append("│" + " " * half, style="dim")
    else:
        out.append(" " * half + "│", style="dim")
        out.append(bar(fraction, half), style="bold")
    return out


def sum_line(parts: Any) -> str:
    """The parts' sum beside the logit; where the two differ in the digits shown, whether the
    model's own precision explains it (a float32 model's logit is rounded to float32)."""
    total = f"{parts.total:+.6f}"
    if total == f"{parts.logit:+.6f}":
        return f"parts add up to {total}"
    if parts.agrees:
        return f"parts add up to {total}, equal to the logit to {parts.dtype} rounding"
    return f"parts add up to {total}, {abs(parts.total - parts.logit):.1e} from the logit"


def name_cells(all_parts: Sequence[Any]) -> int:
    """Cells for the part names: the longest name, at least NAME_CELLS, plus a space."""
    longest = max((len(part.name) for parts in all_parts for part in parts.parts()), default=0)
    return max(longest, NAME_CELLS) + 1


def contributions_text(all_parts: Sequence[Any], half: int = HALF_WIDTH, *, largest_first: bool = True) -> Text:
    out = Text(no_wrap=True)
    out.append(order_line(largest_first) + "\n", style="dim")
    cells = name_cells(all_parts)
    for index, parts in enumerate(all_parts):
        if index:
            out.append("\n")
        rows = contribution_rows(parts, largest_first=largest_first)
        largest = max((abs(value) for _, value in rows), default=0.0)
        out.append("logit of ", style="dim")
        out.append_text(fitted_piece(parts.piece, 12, style="bold reverse"))
        out.append(f" {parts.id}: {parts.logit:+.6f}\n{sum_line(parts)}\n", style="dim")
        for name, value in rows:
            out.append(f"{name:<{cells}}{value:+9.4f} ")
            out.append_text(signed_bar(value, largest, half))
            out.append("\n")
    out.append("norm scale: final residual · full bar: largest part", style="dim")
    return out


def half_width(cells: int, label_cells: int = NAME_CELLS + 1) -> int:
    """Bar cells on each side of the axis for a view ``cells`` wide (padding excluded) whose
    rows start with ``label_cells`` of name."""
    return min(HALF_WIDTH, max(MIN_HALF_WIDTH, (cells - label_cells - VALUE_CELLS - 1) // 2))


class ContributionsView(ScrollableContainer):
    DEFAULT_CSS = """
    ContributionsView { height: auto; max-height: 1fr; }
    ContributionsView > Static { width: auto; height: auto; padding: 0 1; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.parts: Sequence[Any] | None = None
        self.largest_first = True

    def compose(self) -> Any:
        yield Static(Text(EMPTY, style="dim"), id="contributions-text")

    def show_contributions(self, all_parts: Sequence[Any] | None) -> None:
        self.parts = all_parts
        target = self.query_one("#contributions-text", Static)
        if not all_parts:
            target.update(Text(EMPTY, style="dim"))
            return
        half = half_width(self.scrollable_content_region.width - 2, name_cells(all_parts))
        target.update(contributions_text(all_parts, half, largest_first=self.largest_first))

    def set_order(self, largest_first: bool) -> None:
        """List the parts largest first or in the model's order, from the top of the list."""
        self.largest_first = largest_first
        if self.parts:
            self.show_contributions(self.parts)
        self.scroll_home(animate=False)

    def on_resize(self) -> None:
        if self.parts:
            self.show_contributions(self.parts)
