"""A scored text drawn token by token, each token's background graded by its loss (or by the
change between two models), with a cursor that moves over the scored tokens; and the texts
beside it: the legend and the selected token's detail.

The text is wrapped here, token by token (Textual's Line API: one strip per wrapped line), so
the cursor's line is known and kept in view however long the text is. A newline inside a
piece shows as ↵ and breaks the line; other control characters are escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.widgets.pieces import SPECIAL_PIECES, fitted_piece, piece_text

# Colours of the 256-colour cube, so a terminal without true colour keeps every step apart;
# each dark enough for light text. Low loss green to high loss red:
LOSS_COLOURS = ("#005f00", "#008700", "#5f8700", "#5f5f00", "#875f00", "#af5f00", "#af0000", "#d70000")
# B predicts better (blue) through no change (grey) to B predicts worse (red):
CHANGE_COLOURS = ("#0000d7", "#0000af", "#005faf", "#5f5f87", "#585858", "#875f5f", "#870000", "#af0000",
                  "#d70000")
# The text colour alternates from one scored token to the next, so that two neighbours of the
# same colour still read as two tokens.
LOSS_TEXT = ("#ffffff", "#afffff")
CHANGE_TEXT = ("#ffffff", "#ffff87")
SHOWN_MARKS = {"\t": "→", "\r": "␍"}
TOP_PIECE_CELLS = 16  # an alternative's piece in the side panel, cut with an ellipsis beyond


def loss_colour(loss: float, high: float) -> str:
    """The loss scale's colour for ``loss``: equal steps from 0 to ``high`` nats, the last
    step for ``high`` and above."""
    step = int(len(LOSS_COLOURS) * max(loss, 0.0) / high) if high > 0 else 0
    return LOSS_COLOURS[min(step, len(LOSS_COLOURS) - 1)]


def change_colour(change: float, scale: float) -> str:
    """The change scale's colour: the middle step for no change, the ends at ±``scale``."""
    half = len(CHANGE_COLOURS) // 2
    if scale <= 0:
        return CHANGE_COLOURS[half]
    step = round(half * max(-1.0, min(1.0, change / scale)))
    return CHANGE_COLOURS[half + step]


def change_scale(changes: Sequence[float]) -> float:
    return max((abs(c) for c in changes), default=0.0)


def _swatch(colours: Sequence[str]) -> Text:
    return Text.assemble(*((" ", Style(bgcolor=colour)) for colour in colours))


def loss_legend(high: float, vocab_size: int) -> Text:
    """``loss 0 ▒▒▒▒▒▒▒▒ 5.55+ nats (ln 258: a uniform guess)``"""
    return Text.assemble("loss low 0 ", _swatch(LOSS_COLOURS), f" {high:.2f}+ nats high",
                         (f"  ({high:.2f} = ln {vocab_size}: a uniform guess)", "dim"))


def change_legend(scale: float) -> Text:
    return Text.assemble(f"B − A −{scale:.2g} ", _swatch(CHANGE_COLOURS), f" +{scale:.2g} nats",
                         ("  (blue: B predicts better, red: worse)", "dim"))


def shown_piece(piece: str) -> str:
    """A piece as it reads in the running text: ↵ then a line break for a newline, tab and
    carriage return as marks, other control characters escaped, specials as they are."""
    if piece in SPECIAL_PIECES:
        return piece
    marked = "".join("↵\n" if ch == "\n" else SHOWN_MARKS.get(ch, ch) for ch in piece)
    return "\n".join(escape_controls(part) for part in marked.split("\n"))


@dataclass(frozen=True)
class Fragment:
    index: int  # which id of the text
    x: int
    text: str


def _chop(text: str, width: int) -> tuple[str, str]:
    """The longest head of ``text`` that takes at most ``width`` cells (at least one character)."""
    used = 0
    for at, ch in enumerate(text):
        used += cell_len(ch)
        if used > width and at > 0:
            return text[:at], text[at:]
    return text, ""


def _word_starts(shown: Sequence[str]) -> list[bool]:
    """Whether each piece starts a word: it begins with whitespace, follows one that ends
    with whitespace, or is a special piece or follows one."""
    starts = []
    for index, piece in enumerate(shown):
        before = shown[index - 1] if index else ""
        starts.append(not before or piece[:1].isspace() or before[-1:].isspace() or piece in SPECIAL_PIECES
                      or before in SPECIAL_PIECES)
    return starts


def _word_widths(shown: Sequence[str]) -> list[int]:
    """For a piece that starts a word, the cells up to the next word (or line break); 0 for the others."""
    starts, widths = _word_starts(shown), [0] * len(shown)
    for index, start in enumerate(starts):
        if not start:
            continue
        width, at = 0, index
        while at < len(shown) and (at == index or not starts[at]):
            head = shown[at].split("\n")[0]
            width += cell_len(head)
            if "\n" in shown[at]:
                break
            at += 1
        widths[index] = width
    return widths


class _Lines:
    """Lines being filled, fragment by fragment, up to ``width`` cells each."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.lines: list[list[Fragment]] = [[]]
        self.x = 0

    def newline(self) -> None:
        self.lines.append([])
        self.x = 0

    def place(self, index: int, part: str) -> None:
        """Part of piece ``index`` (no newline in it) from the current column on: on the next
        line when it fits there and not here, cut at the line's end when wider than a line."""
        while part:
            size = cell_len(part)
            if self.x >= self.width or (self.x and self.x + size > self.width >= size):
                self.newline()
            head, part = _chop(part, self.width - self.x) if self.x + size > self.width else (part, "")
            self.lines[-1].append(Fragment(index, self.x, head))
            self.x += cell_len(head)
            if part:
                self.newline()


def wrap_pieces(shown: Sequence[str], width: int) -> list[list[Fragment]]:
    """The pieces laid out in lines of ``width`` cells: a word (its pieces) moves to the next
    line when it does not fit the rest of this one, and a piece is cut only when it is wider
    than a whole line."""
    layout = _Lines(max(width, 1))
    for index, (piece, word) in enumerate(zip(shown, _word_widths(shown))):
        if layout.x and layout.x + word > layout.width >= word:
            layout.newline()
        for number, part in enumerate(piece.split("\n")):
            if number:
                layout.newline()
            layout.place(index, part)
    return layout.lines


class TokenLossView(ScrollView, can_focus=True):
    """Every id of the text; the scored ones coloured, the cursor on one of them."""

    DEFAULT_CSS = """
    TokenLossView { height: 1fr; scrollbar-gutter: stable; background: $surface; }
    """
    BINDINGS = [
        Binding("left", "move(-1)", "Previous token", show=False),
        Binding("right", "move(1)", "Next token", show=False),
        Binding("up", "line(-1)", "Line up", show=False),
        Binding("down", "line(1)", "Line down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "move_to(0)", "First token", show=False),
        Binding("end", "move_to(-1)", "Last token", show=False),
    ]

    class Moved(Message):
        """The cursor is on another scored token (its index among the scored ones)."""

        def __init__(self, cursor: int) -> None:
            super().__init__()
            self.cursor = cursor

    def __init__(self, pieces: Sequence[str], scored: Sequence[int], **kwargs: Any) -> None:
        """``pieces``: every id's piece; ``scored``: the indexes of the scored ids, in order."""
        super().__init__(**kwargs)
        self.shown = [shown_piece(piece) for piece in pieces]
        self.scored = list(scored)
        self._cursor_of = {index: cursor for cursor, index in enumerate(self.scored)}
        self.colours: list[str | None] = [None] * len(self.shown)
        self._text: list[str | None] = [None] * len(self.shown)
        self.cursor = 0
        self.lines: list[list[Fragment]] = []
        self._line_of: dict[int, int] = {}  # id index -> the line of its first fragment
        self._width = 0

    # -- content --------------------------------------------------------------------------
    def paint(self, colours: Sequence[str], text: Sequence[str] = LOSS_TEXT) -> None:
        """Give the scored ids their backgrounds (one each, in order) and the text the two
        colours it alternates between; the other ids stay plain."""
        self.colours = [None] * len(self.shown)
        self._text = [None] * len(self.shown)
        for cursor, (index, colour) in enumerate(zip(self.scored, colours)):
            self.colours[index] = colour
            self._text[index] = text[cursor % len(text)]
        self.refresh()

    def _layout(self) -> None:
        width = self.scrollable_content_region.width
        if width <= 0 or width == self._width:
            return
        self._width = width
        self.lines = wrap_pieces(self.shown, width)
        self._line_of = {}
        for number, line in enumerate(self.lines):
            for fragment in line:
                self._line_of.setdefault(fragment.index, number)
        self.virtual_size = Size(width, len(self.lines))
        self._keep_cursor_in_view()
        self.refresh()

    def on_mount(self) -> None:
        self.call_after_refresh(self._layout)

    def on_resize(self) -> None:
        self._layout()

    # -- drawing --------------------------------------------------------------------------
    def _style(self, index: int, base: Style) -> Style:
        colour = self.colours[index]
        style = base + (Style(dim=True) if colour is None else Style(color=self._text[index], bgcolor=colour))
        if self.scored and index == self.scored[self.cursor]:
            style += Style(reverse=True, bold=True, underline=self.has_focus)
        return style

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        base = self.rich_style
        number = scroll_y + y
        if number >= len(self.lines):
            return Strip.blank(width, base)
        segments, x = [], 0
        for fragment in self.lines[number]:
            if fragment.x > x:
                segments.append(Segment(" " * (fragment.x - x), base))
            segments.append(Segment(fragment.text, self._style(fragment.index, base)))
            x = fragment.x + cell_len(fragment.text)
        return Strip(segments).crop_extend(scroll_x, scroll_x + width, base)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    # -- the cursor ------------------------------------------------------------------------
    @property
    def cursor_line(self) -> int:
        return self._line_of.get(self.scored[self.cursor], 0) if self.scored else 0

    def _keep_cursor_in_view(self) -> None:
        if self.scored and self.lines:
            self.scroll_to_region(Region(0, self.cursor_line, 1, 1), animate=False, immediate=True)

    def move_cursor(self, cursor: int) -> None:
        if not self.scored:
            return
        cursor = max(0, min(cursor, len(self.scored) - 1))
        changed = cursor != self.cursor
        self.cursor = cursor
        self._keep_cursor_in_view()
        self.refresh()
        if changed:
            self.post_message(self.Moved(cursor))

    def action_move(self, step: int) -> None:
        self.move_cursor(self.cursor + step)

    def action_move_to(self, cursor: int) -> None:
        self.move_cursor(cursor if cursor >= 0 else len(self.scored) - 1)

    def _scored_near(self, line: int, x: int) -> int | None:
        """The scored token on ``line`` nearest column ``x`` (None when the line has none)."""
        best: tuple[int, int] | None = None
        for fragment in self.lines[line]:
            if fragment.index in self._cursor_of:
                distance = 0 if fragment.x <= x < fragment.x + cell_len(fragment.text) else abs(fragment.x - x)
                if best is None or distance < best[0]:
                    best = (distance, fragment.index)
        return None if best is None else self._cursor_of[best[1]]

    def _fragment_x(self) -> int:
        index = self.scored[self.cursor]
        return next((f.x for f in self.lines[self.cursor_line] if f.index == index), 0)

    def action_line(self, step: int, lines: int = 1) -> None:
        if not self.scored or not self.lines:
            return
        x, line = self._fragment_x(), self.cursor_line
        target = max(0, min(line + step * lines, len(self.lines) - 1))
        while 0 <= target < len(self.lines):
            found = self._scored_near(target, x)
            if found is not None and found != self.cursor:
                self.move_cursor(found)
                return
            target += step

    def action_page(self, step: int) -> None:
        self.action_line(step, max(self.scrollable_content_region.height - 1, 1))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        line = self.scroll_offset.y + offset.y
        if 0 <= line < len(self.lines):
            found = self._scored_near(line, self.scroll_offset.x + offset.x)
            if found is not None:
                event.stop()
                self.move_cursor(found)


def probability_label(value: float) -> str:
    """A probability with four decimals, or in scientific notation under 0.001."""
    return f"{value:.4f}" if value >= 0.001 or value == 0 else f"{value:.2e}"


def token_detail(token: Any, vocab_size: int, compared: Any | None = None) -> Text:
    """The selected token (a ``TokenScore``): its piece, loss, probability and rank, the
    model's five likeliest ids (the token itself highlighted) and, with a second model,
    both losses and their change (a ``ComparedToken``)."""
    out = Text()
    out.append("piece ", "dim")
    out.append_text(piece_text(token.piece, style="bold"))
    out.append(f"  id {token.id}\n", "dim")
    out.append(f"position {token.position}\n", "dim")
    out.append(f"loss  {token.loss:.4f} nats\n")
    out.append(f"p     {probability_label(token.probability)}\n")
    out.append(f"rank  {token.rank} of {vocab_size}\n")
    if compared is not None:
        out.append(f"loss B {compared.loss_b:.4f} nats\n")
        out.append(f"B − A  {compared.change:+.4f}\n", "bold")
    out.append("\nthe model expected\n", "dim")
    width = min(max((piece_text(piece).cell_len for _, piece, _ in token.top), default=1), TOP_PIECE_CELLS)
    for rank, (token_id, piece, probability) in enumerate(token.top, start=1):
        shown = fitted_piece(piece, width, style="bold reverse" if token_id == token.id else "")
        shown.pad_right(width - shown.cell_len)
        out.append(f"{rank} ")
        out.append_text(shown)
        out.append(f"  {probability_label(probability)}\n")
    out.rstrip()
    return out


def summary_text(scored: Any, second_label: str | None = None, second_mean: float | None = None) -> Text:
    """The text's mean loss as ``minigpt-tui score`` prints it, and the second model's."""
    loss = scored.mean_loss
    out = Text(f"{len(scored.tokens)} tokens scored in {scored.windows} window(s) of {scored.window} ids "
               f"(stride {scored.stride}): mean loss {loss:.4f} nats, perplexity {math.exp(loss):.3g}")
    if second_label is not None and second_mean is not None:
        out.append(f"\nB {escape_controls(second_label)}: mean loss {second_mean:.4f} nats "
                   f"({second_mean - loss:+.4f})")
    return out
