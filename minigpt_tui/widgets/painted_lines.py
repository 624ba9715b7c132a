"""Text kept as lines of segments and painted a line at a time, for views that change a few
lines at a time (a head move in the head view changes two rows of the head-role grid and the
pattern's cells, never the size). A ``Static`` updated with the whole text made Textual turn
it into content, lay out the screen again and repaint every line: about 170 ms a head key on
a model of 270 heads. Here a change repaints only the lines that changed, and lays out only
when the size changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widgets import Static

Line = list[Segment]
DIM = Style(dim=True)
BOLD = Style(bold=True)


def lines_text(lines: Iterable[Sequence[Segment]]) -> Text:
    """The lines as one rich text (what the view reads as, for ``content`` and tests)."""
    out = Text(no_wrap=True)
    for index, line in enumerate(lines):
        if index:
            out.append("\n")
        for segment in line:
            out.append(segment.text, segment.style)
    return out


def message_line(text: str, style: Style | None = DIM) -> Line:
    return [Segment(text, style)]


class PaintedLines(Static):
    """A Static whose text is a list of segment lines; see the module's docstring."""

    def __init__(self, lines: Sequence[Line] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lines: list[Line] = []
        self._strips: list[Strip] = []
        self._width = 0
        self.show_lines(lines)

    @property
    def content(self) -> Text:  # type: ignore[override]  # read-only: show_lines sets it
        return lines_text(self._lines)

    @property
    def lines(self) -> tuple[Line, ...]:
        return tuple(self._lines)

    def show_message(self, text: str, style: Style | None = DIM) -> None:
        self.show_lines([message_line(text, style)])

    def show_lines(self, lines: Sequence[Line]) -> None:
        """Show ``lines`` in place of the text shown: repaint the whole view, and lay it out
        again only when its size changed."""
        resized = self._set(list(lines))
        self.refresh(layout=resized)

    def replace_lines(self, changed: dict[int, Line]) -> None:
        """Replace the lines at these indexes and repaint only them (a whole repaint when the
        width changes)."""
        lines, strips = list(self._lines), list(self._strips)
        for index, line in changed.items():
            lines[index], strips[index] = line, Strip(line)
        self._lines, self._strips = lines, strips
        width = max((strip.cell_length for strip in strips), default=0)
        if width != self._width:
            self._width = width
            self.clear_cached_dimensions()
            self.refresh(layout=True)
            return
        width = max(self.size.width, self._width)
        for index in changed:
            self.refresh(Region(0, index, width, 1))

    def _set(self, lines: list[Line]) -> bool:
        """Keep ``lines``; True when the size changed."""
        before = (self._width, len(self._strips))
        self._lines = lines
        self._strips = [Strip(line) for line in lines]
        self._width = max((strip.cell_length for strip in self._strips), default=0)
        self.clear_cached_dimensions()
        return before != (self._width, len(self._strips))

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return self._width

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._strips)

    def render_line(self, y: int) -> Strip:
        width = self.content_region.width
        if not 0 <= y < len(self._strips):
            return Strip.blank(width, self.rich_style)
        return self._strips[y].crop(0, width).extend_cell_length(width).apply_style(self.rich_style)
