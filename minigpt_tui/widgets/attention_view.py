"""Where the last position looks: for one decision, each layer's and head's attention
weights over the prefix as a heat row (one cell per prefix position, taller and bolder
for more weight), with the position that gets the most."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.containers import ScrollableContainer
from textual.widgets import Static

from minigpt_tui.engine.session.generation import DecisionView, PieceView
from minigpt_tui.widgets.pieces import SPECIAL_PIECES, visible_piece

LEVELS = "▁▂▃▄▅▆▇█"


def heat_cell(weight: float, row_max: float) -> tuple[str, str]:
    """A glyph for a weight: its height relative to the row's largest weight (so a spread-out
    row still shows its shape), its style by absolute weight (bold from 0.5, dim under 0.1)."""
    scale = weight / row_max if row_max > 0 else 0.0
    glyph = LEVELS[min(int(scale * len(LEVELS)), len(LEVELS) - 1)]
    style = "bold" if weight >= 0.5 else ("" if weight >= 0.1 else "dim")
    return glyph, style


def attention_text(decision: DecisionView, prefix: tuple[PieceView, ...]) -> Text:
    out = Text(no_wrap=True)
    if decision.attention is None:
        out.append("no attention weights were recorded for this decision", style="dim")
        return out
    length = decision.prefix_length
    axis = "".join("^" if p.text in SPECIAL_PIECES else (visible_piece(p.text)[:1] or "·")
                   for p in prefix[:length])
    out.append(f"{'':9}{axis}\n", style="dim")
    for layer, heads in enumerate(decision.attention):
        for head, weights in enumerate(heads):
            out.append(f"L{layer:<2} H{head:<2}  ", style="bold")
            row_max = max(weights, default=0.0)
            for weight in weights:
                glyph, style = heat_cell(weight, row_max)
                out.append(glyph, style=style)
            if weights:
                top = max(range(len(weights)), key=lambda i: weights[i])
                piece = visible_piece(prefix[top].text) if top < len(prefix) else "?"
                out.append(f"  max {weights[top]:.2f} at {top} {piece!r}", style="dim")
            out.append("\n")
    out.append(f"{length} positions · height: weight / row max · bold ≥ 0.5, dim < 0.1 · ^ <bos>", style="dim")
    return out


class AttentionView(ScrollableContainer):
    DEFAULT_CSS = """
    AttentionView { height: auto; max-height: 1fr; }
    AttentionView > Static { width: auto; height: auto; padding: 0 1; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.border_title = "Attention (last position over the prefix)"

    def allow_focus(self) -> bool:
        """Only a view with more to see than fits takes the keyboard (to scroll it): an empty
        or whole one would only be a stop between the candidates and the form."""
        return self.max_scroll_y > 0 or self.max_scroll_x > 0

    def compose(self) -> Any:
        yield Static(Text("Attention weights of the selected decision appear here.", style="dim"),
                     id="attention-text")

    def show_decision(self, decision: DecisionView | None, prefix: tuple[PieceView, ...]) -> None:
        target = self.query_one("#attention-text", Static)
        if decision is None:
            target.update(Text("Attention weights of the selected decision appear here.", style="dim"))
            return
        target.update(attention_text(decision, prefix))
