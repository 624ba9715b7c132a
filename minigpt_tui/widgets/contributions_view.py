"""Where a logit comes from: a signed bar per part (embedding, each head, each attention
bias, each feed-forward block, the final norm's bias), drawn left of the axis when negative,
right when positive, all on the scale of the largest part; the sum beside the model's logit.

Left of the axis a bar is drawn in whole cells, right of it in eighths of a cell.
Parts come from the engine's contribution records (plain floats), computed on a worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.containers import ScrollableContainer
from textual.widgets import Static

from minigpt_tui.widgets.pieces import bar, fitted_piece

HALF_WIDTH = 20  # the most cells on each side of the axis
MIN_HALF_WIDTH = 4
LABEL_CELLS = 13 + 9 + 1  # "b0 attn bias  " and "+123.4567 "
EMPTY = "Press x to split the selected decision's logit into its parts."


def contribution_rows(parts: Any) -> list[tuple[str, float]]:
    """(label, value) for every part, in the order they enter the residual stream."""
    rows = [("embedding", parts.embedding)]
    for layer, heads in enumerate(parts.heads):
        rows.extend((f"b{layer} head {head}", value) for head, value in enumerate(heads))
        if parts.attention_bias[layer]:
            rows.append((f"b{layer} attn bias", parts.attention_bias[layer]))
        rows.append((f"b{layer} ffn", parts.ffn[layer]))
    if parts.norm_bias:
        rows.append(("norm bias", parts.norm_bias))
    return rows


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


def contributions_text(all_parts: Sequence[Any], half: int = HALF_WIDTH) -> Text:
    out = Text(no_wrap=True)
    for index, parts in enumerate(all_parts):
        if index:
            out.append("\n\n")
        rows = contribution_rows(parts)
        largest = max((abs(value) for _, value in rows), default=0.0)
        out.append("logit of ", style="dim")
        out.append_text(fitted_piece(parts.piece, 12, style="bold reverse"))
        out.append(f" {parts.id}: {parts.logit:+.6f}\n{sum_line(parts)}\n", style="dim")
        for label, value in rows:
            out.append(f"{label:<13}{value:+9.4f} ")
            out.append_text(signed_bar(value, largest, half))
            out.append("\n")
    out.append("norm scale: final residual · full bar: largest part", style="dim")
    return out


def half_width(cells: int) -> int:
    """Bar cells on each side of the axis for a view ``cells`` wide (padding excluded)."""
    return min(HALF_WIDTH, max(MIN_HALF_WIDTH, (cells - LABEL_CELLS - 1) // 2))


class ContributionsView(ScrollableContainer):
    DEFAULT_CSS = """
    ContributionsView { height: auto; max-height: 1fr; }
    ContributionsView > Static { width: auto; height: auto; padding: 0 1; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.parts: Sequence[Any] | None = None

    def compose(self) -> Any:
        yield Static(Text(EMPTY, style="dim"), id="contributions-text")

    def show_contributions(self, all_parts: Sequence[Any] | None) -> None:
        self.parts = all_parts
        target = self.query_one("#contributions-text", Static)
        half = half_width(self.scrollable_content_region.width - 2)
        target.update(contributions_text(all_parts, half) if all_parts else Text(EMPTY, style="dim"))

    def on_resize(self) -> None:
        if self.parts:
            self.show_contributions(self.parts)
