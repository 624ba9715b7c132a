"""Where the last position looks: above, the chosen head's whole pattern as a picture (see
``attention_picture``; ``[ ] { } j`` choose the head); below, for one decision, each head's
attention weights over the prefix as a heat row (one cell per prefix position, taller and
bolder for more weight), with its largest weight past the first position and where it
falls. The sharpest heads come first (by that weight: many heads park unused weight on the
first position, an attention sink, so their weight there says little), or every head in the
model's order; ``b`` on the Generation screen switches. Heads are named as everywhere else ("block 3 head 1")."""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from minigpt_tui.engine.session.generation import DecisionView, PieceView
from minigpt_tui.engine.session.insight import HEADS_ORDER, PatternView, heads_by_focus
from minigpt_tui.widgets.attention_picture import picture_lines
from minigpt_tui.widgets.painted_lines import Line, lines_text, message_line
from minigpt_tui.widgets.pieces import axis_glyph, visible_piece

LEVELS = "▁▂▃▄▅▆▇█"
PLACEHOLDER = "Attention weights of the selected decision appear here."
TITLE = "Attention"  # of the last position over the prefix: the legend and help say so
PAD = 1  # a column of space each side, as the other panels have
STYLES = {"bold": Style(bold=True), "dim": Style(dim=True), "": None}

Run = tuple[str, str]  # text and its style: "bold", "dim" or ""


def heat_cell(weight: float, row_max: float) -> tuple[str, str]:
    """A glyph for a weight: its height relative to the row's largest weight (so a spread-out
    row still shows its shape), its style by absolute weight (bold from 0.5, dim under 0.1)."""
    scale = weight / row_max if row_max > 0 else 0.0
    glyph = LEVELS[min(int(scale * len(LEVELS)), len(LEVELS) - 1)]
    style = "bold" if weight >= 0.5 else ("" if weight >= 0.1 else "dim")
    return glyph, style


def heat_runs(weights: tuple[float, ...] | list[float]) -> list[Run]:
    """One glyph per position, consecutive glyphs of one style in one run."""
    runs: list[Run] = []
    row_max = max(weights, default=0.0)
    for weight in weights:
        glyph, style = heat_cell(weight, row_max)
        if runs and runs[-1][1] == style:
            runs[-1] = (runs[-1][0] + glyph, style)
        else:
            runs.append((glyph, style))
    return runs


def attention_rows(decision: DecisionView | None, prefix: tuple[PieceView, ...], *,
                   largest_first: bool = True) -> list[list[Run]]:
    """The view's lines as runs of one style each: the prefix axis, one heat row per head
    (the sharpest first, or in the model's order) with its largest weight past the first
    position, and the legend."""
    if decision is None:
        return [[(PLACEHOLDER, "dim")]]
    if decision.attention is None:
        return [[("no attention weights were recorded for this decision", "dim")]]
    length = decision.prefix_length
    prefix = prefix[decision.window_start:]  # past the context: the sliding window the model saw
    focus = heads_by_focus(decision.attention, largest_first=largest_first)
    cells = max((len(f.name) for f in focus), default=0) + 2
    axis = "".join(axis_glyph(p.text) for p in prefix[:length])
    rows: list[list[Run]] = [[(f"{'':{cells}}{axis}", "dim")]]
    for head in focus:
        weights = decision.attention[head.layer][head.head]
        row: list[Run] = [(f"{head.name:<{cells}}", "bold"), *heat_runs(weights)]
        if weights:
            piece = visible_piece(prefix[head.position].text) if head.position < len(prefix) else "?"
            row.append((f"  {head.weight:.2f} at {head.position} {piece!r}", "dim"))
        rows.append(row)
    rows.append([(f"{length} positions · height: weight / row max · bold ≥ 0.5, dim < 0.1 · ^ <bos> · "
                  "row end: the largest weight past the first position (sharpest: the highest)", "dim")])
    return rows


def order_title(largest_first: bool) -> str:
    order = f"{HEADS_ORDER} · b: model order" if largest_first else "model order · b: sharpest first"
    return f"{TITLE} · {order}"


def row_segments(row: list[Run]) -> list[Segment]:
    return [Segment(" " * PAD), *(Segment(text, STYLES[style]) for text, style in row)]


class AttentionView(ScrollView):
    """The heat rows of the selected decision, drawn a line at a time: a model of 30 blocks
    of 9 heads has 272 lines, and only those in view are painted (one Static of them all
    took 100-400 ms of the UI thread at every decision)."""

    DEFAULT_CSS = """
    AttentionView { height: auto; max-height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.largest_first = True
        self.border_title = order_title(self.largest_first)
        self.rows: list[list[Run]] = []
        self.picture: list[Line] = []  # the chosen head's picture, above the rows
        self._row_lines: list[list[Segment]] = []
        self._lines: list[list[Segment]] = []
        self._shown: tuple[DecisionView | None, tuple[PieceView, ...]] = (None, ())
        self.show_decision(None, ())

    @property
    def plain(self) -> str:
        """The heads' rows (the axis, a row per head, the legend), as text."""
        return "\n".join("".join(text for text, _ in row) for row in self.rows)

    @property
    def picture_plain(self) -> str:
        """The chosen head's picture, as text (empty when none is shown)."""
        return lines_text(self.picture).plain

    def show_picture(self, head: tuple[int, int], pattern: PatternView | None) -> None:
        """Draw block and head ``head``'s whole pattern of the decision shown as a picture
        above the rows (None: the records do not hold it). Only the picture is drawn again; the
        view is laid out again only when its size changed."""
        decision = self._shown[0]
        if decision is None or decision.attention is None:
            self.picture = []
        elif pattern is None:
            note = (f"block {head[0]} head {head[1]}: the decisions' records do not hold its whole pattern "
                    "(a slid window, or a long prompt); h computes it in the head view")
            self.picture = [message_line(note), []]
        else:
            self.picture = [*picture_lines(pattern.layer, pattern.head, pattern.pieces, pattern.weights), []]
        self._paint()

    def allow_focus(self) -> bool:
        """Only a view with more to see than fits takes the keyboard (to scroll it): an empty
        or whole one would only be a stop between the candidates and the form."""
        return self.max_scroll_y > 0 or self.max_scroll_x > 0

    def show_decision(self, decision: DecisionView | None, prefix: tuple[PieceView, ...]) -> None:
        if decision is None or decision is not self._shown[0]:
            self.picture = []  # another decision: its picture comes with show_picture
        self._shown = (decision, prefix)
        self.rows = attention_rows(decision, prefix, largest_first=self.largest_first)
        self._row_lines = [row_segments(row) for row in self.rows]
        self._paint()

    def _paint(self) -> None:
        self._lines = [[Segment(" " * PAD), *line] for line in self.picture] + self._row_lines
        width = max(sum(segment.cell_length for segment in line) for line in self._lines) + PAD
        size = Size(width, len(self._lines))
        if size != self.virtual_size:
            self.virtual_size = size
        self.refresh()

    def set_order(self, largest_first: bool) -> None:
        """Show the sharpest heads first or every head in the model's order, from the top."""
        self.largest_first = largest_first
        self.border_title = order_title(largest_first)
        self.show_decision(*self._shown)
        self.scroll_home(animate=False)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = y + scroll_y
        width = self.scrollable_content_region.width
        if not 0 <= index < len(self._lines):
            return Strip.blank(width, self.rich_style)
        strip = Strip(self._lines[index]).crop(scroll_x, scroll_x + width).extend_cell_length(width)
        return strip.apply_style(self.rich_style)
