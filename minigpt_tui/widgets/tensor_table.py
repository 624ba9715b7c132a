"""The tensor entries of an inspected file or checkpoint: one row per entry of a header.

Rows come from header records alone (name, dtype, shape, elements, bytes, data offsets).
The table is virtual: it keeps the entries, their cell texts and the order, and draws only
the lines in view, so a file of ten thousand tensors opens, filters and sorts in the time
its list takes to sort (a DataTable builds and measures every cell of every row first).
It sorts by any column (click a header, or ``s`` cycles the column and ``S`` reverses) and
filters by a substring of the name, dtype, group or file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from minigpt_tui.engine.core.printable import escape_controls

# (header label, sort key of an entry record)
COLUMNS: tuple[tuple[str, str], ...] = (
    ("name", "name"),
    ("dtype", "dtype"),
    ("shape", "shape"),
    ("elements", "elements"),
    ("bytes", "bytes"),
    ("offsets", "begin"),
    ("group", "group"),
    ("file", "file"),
)
SORTABLE = tuple(key for _label, key in COLUMNS)
RIGHT_ALIGNED = ("elements", "bytes", "begin")
DIM_COLUMNS = ("group", "file")
# The columns kept in view beside the name when not every column fits; the others are
# scrolled to (and Detail shows them all).
KEY_COLUMNS = ("dtype", "shape", "elements", "bytes")
# Optimizer entry names run past 50 characters: the name column takes the width the other
# columns leave (never under MIN_NAME_WIDTH), cut from the left so that the end that tells
# rows apart (the layer number, the moment) stays; Detail shows the whole name.
MIN_NAME_WIDTH = 30  # every model parameter name of ours fits
# Beside the runs tree at 80 columns not even dtype and shape fit beside 30 cells of name:
# the name then gives up cells (down to NARROW_NAME_WIDTH) so that those two show whole.
NARROW_NAME_WIDTH = 20
WHOLE_COLUMNS = ("dtype", "shape")
CELL_PADDING = 1  # on each side of a cell
SCROLLBAR_WIDTH = 2
SORT_ARROW_WIDTH = 2
HEADER_LINES = 1


def shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]" if shape else "[] (scalar)"


def file_label(file_name: str) -> str:
    """A file column cell: the file name without its ``.safetensors`` suffix."""
    return file_name.removesuffix(".safetensors")


def left_truncate(text: str, width: int | None) -> str:
    """``text`` cut from the left to ``width`` cells behind an ellipsis: names share their
    start (``optimizer.state.model.transformer.``) and differ at the end (``h.0.`` against
    ``h.1.``, ``exp_avg`` against ``exp_avg_sq``)."""
    if width is None or len(text) <= width:
        return text
    return "…" + text[len(text) - width + 1:]


def entry_cells(entry: Any) -> dict[str, str]:
    """The text of every cell of an entry's row, by column key (the name uncut)."""
    return {
        "name": escape_controls(entry.name),
        "dtype": escape_controls(entry.dtype),
        "shape": shape_text(entry.shape) if entry.shape else "[]",  # the cell is narrow: Detail says "scalar"
        "elements": f"{entry.elements:,}",
        "bytes": f"{entry.bytes:,}",
        "begin": f"{entry.begin:,}–{entry.end:,}",
        "group": escape_controls(entry.group),
        "file": escape_controls(file_label(entry.file)),
    }


@dataclass(frozen=True)
class TensorOrder:
    column: str = "begin"
    reverse: bool = False


@dataclass(frozen=True)
class TableColumn:
    key: str
    label: str
    width: int  # cells of content, padding not included

    @property
    def render_width(self) -> int:
        return self.width + 2 * CELL_PADDING


class TensorTable(ScrollView, can_focus=True):
    """Entry records (``EntryRecord`` duck type) with sorting and a substring filter."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "tensor-table--header", "tensor-table--even-row", "tensor-table--cursor", "tensor-table--dim",
    }
    DEFAULT_CSS = """
    TensorTable {
        height: 1fr;
        background: $surface;
        color: $foreground;
        &:focus { background-tint: $foreground 5%; }
        & > .tensor-table--header { text-style: bold; background: $panel; color: $foreground; }
        & > .tensor-table--even-row { background: $surface-lighten-1 50%; }
        & > .tensor-table--dim { color: $text-muted; }
        & > .tensor-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        &:focus > .tensor-table--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
            text-style: $block-cursor-text-style;
        }
    }
    """

    BINDINGS = [
        Binding("enter", "select_cursor", "Select", show=False),
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home,ctrl+home", "first_row", "First row", show=False),
        Binding("end,ctrl+end", "last_row", "Last row", show=False),
        Binding("left", "scroll_left", "Scroll left", show=False),
        Binding("right", "scroll_right", "Scroll right", show=False),
        Binding("s", "cycle_sort", "Sort", show=False),
        Binding("S", "reverse_sort", "Reverse", show=False),
    ]

    class EntryChosen(Message):
        """An entry was chosen (enter, or a click on the row under the cursor): show its detail."""

        def __init__(self, table: "TensorTable", entry: Any) -> None:
            super().__init__()
            self.table = table
            self.entry = entry

        @property
        def control(self) -> "TensorTable":
            return self.table

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.entries: tuple[Any, ...] = ()
        self.filter_text = ""
        self.order = TensorOrder()
        self.shown: list[Any] = []
        self.cursor_row = 0
        self._cells: list[dict[str, str]] = []  # parallel to entries
        self._shown_cells: list[dict[str, str]] = []  # parallel to shown
        self._widths: dict[str, int] = {}  # widest cell of each column over every entry
        self._show_file = False
        self._name_width: int | None = None
        self.columns: tuple[TableColumn, ...] = ()

    # -- columns ----------------------------------------------------------------------------
    @property
    def column_keys(self) -> list[str]:
        return [key for _label, key in COLUMNS if key != "file" or self._show_file]

    def column_width(self, key: str) -> int:
        """Cells the column takes on screen, padding included."""
        return next(c.render_width for c in self.columns if c.key == key)

    def _fitted_name_width(self) -> int | None:
        """None when every name fits beside all the other columns; else the name width that
        keeps all of them in view, or failing that the key columns (never under MIN_NAME_WIDTH)."""
        others = [key for key in self.column_keys if key != "name"]

        def room_beside(columns: list[str]) -> int:
            taken = sum(self._widths[key] + 2 * CELL_PADDING for key in columns)
            return self.size.width - taken - 2 * CELL_PADDING - SORT_ARROW_WIDTH - SCROLLBAR_WIDTH

        every = room_beside(others)
        if self._widths["name"] <= every:
            return None
        if every >= MIN_NAME_WIDTH:
            return every
        keys = room_beside([key for key in others if key in KEY_COLUMNS])
        if keys >= MIN_NAME_WIDTH:
            return keys
        return max(NARROW_NAME_WIDTH, min(MIN_NAME_WIDTH, room_beside(list(WHOLE_COLUMNS))))

    def _layout_columns(self) -> None:
        self._name_width = self._fitted_name_width()
        columns = []
        for label, key in COLUMNS:
            if key == "file" and not self._show_file:
                continue
            width = max(self._widths[key], len(label) + (SORT_ARROW_WIDTH if key == self.order.column else 0))
            if key == "name" and self._name_width is not None:
                width = self._name_width
            columns.append(TableColumn(key, label, width))
        self.columns = tuple(columns)
        self.virtual_size = Size(sum(c.render_width for c in columns), len(self.shown) + HEADER_LINES)
        self.refresh()

    def on_resize(self) -> None:
        if self._widths and self._fitted_name_width() != self._name_width:
            self._layout_columns()

    # -- content -------------------------------------------------------------------------
    def show_entries(self, entries: Sequence[Any]) -> None:
        """Replace the entries (a new file or checkpoint); the filter and order stay."""
        self.entries = tuple(entries)
        self._cells = [entry_cells(e) for e in self.entries]
        self._show_file = len({e.file for e in self.entries}) > 1
        self._widths = {key: len(label) for label, key in COLUMNS}
        for cells in self._cells:
            for key, text in cells.items():
                if len(text) > self._widths[key]:
                    self._widths[key] = len(text)
        self._widths["name"] = max((cell_len(c["name"]) for c in self._cells), default=4)
        self.cursor_row = 0
        self._rebuild()
        self.scroll_to(0, 0, animate=False)

    def set_filter(self, text: str) -> None:
        """Show the entries that match ``text``. The cursor stays on the entry it was on
        while that entry is shown (clearing the filter keeps the row the user was looking
        at), else it goes to the first match."""
        highlighted = self.highlighted_entry
        self.filter_text = text.strip()
        self._rebuild()
        row = next((i for i, entry in enumerate(self.shown) if entry is highlighted), 0)
        self.move_cursor(row=row)
        # The rows just changed (and the filter field may be hiding): scroll once they are laid out.
        self.call_after_refresh(self.scroll_to_cursor)

    def sort_by(self, column: str, reverse: bool | None = None) -> None:
        if column not in SORTABLE:
            raise ValueError(f"cannot sort by {column}")
        if reverse is None:
            reverse = not self.order.reverse if self.order.column == column else False
        self.order = TensorOrder(column, reverse)
        self._rebuild()

    def matches(self, entry: Any) -> bool:
        if not self.filter_text:
            return True
        needle = self.filter_text.lower()
        return any(needle in str(value).lower() for value in (entry.name, entry.dtype, entry.group, entry.file))

    def _sort_key(self, entry: Any) -> Any:
        column = self.order.column
        if column == "shape":
            return (len(entry.shape), tuple(entry.shape))
        if column == "begin":
            return (entry.file, entry.begin)
        return getattr(entry, column)

    def _rebuild(self) -> None:
        """Filter and sort the entries (the data, not drawn rows); the lines in view are
        drawn from them on the next refresh."""
        indexes = [i for i, e in enumerate(self.entries) if self.matches(e)]
        entries = self.entries
        indexes.sort(key=lambda i: self._sort_key(entries[i]), reverse=self.order.reverse)
        self.shown = [entries[i] for i in indexes]
        self._shown_cells = [self._cells[i] for i in indexes]
        self.cursor_row = min(self.cursor_row, max(len(self.shown) - 1, 0))
        if self._widths:
            self._layout_columns()

    @property
    def row_count(self) -> int:
        return len(self.shown)

    def row_text(self, row: int) -> list[str]:
        """The cells of row ``row`` as drawn (the name cut to its column)."""
        cells = self._shown_cells[row]
        return [left_truncate(cells[c.key], c.width) if c.key == "name" else cells[c.key] for c in self.columns]

    # -- drawing -------------------------------------------------------------------------
    def _cell(self, column: TableColumn, text: str, right: bool) -> str:
        fitted = set_cell_size(text, column.width) if not right else text.rjust(column.width)[-column.width:]
        pad = " " * CELL_PADDING
        return pad + fitted + pad

    def _header_strip(self) -> Strip:
        style = self.get_component_rich_style("tensor-table--header")
        arrow = " ▼" if self.order.reverse else " ▲"
        segments = [Segment(self._cell(c, c.label + (arrow if c.key == self.order.column else ""), False), style)
                    for c in self.columns]
        return Strip(segments)

    def _row_strip(self, row: int, style: Style) -> Strip:
        dim = style + self.get_component_rich_style("tensor-table--dim", partial=True)
        segments = []
        for column, text in zip(self.columns, self.row_text(row)):
            cell = self._cell(column, text, column.key in RIGHT_ALIGNED)
            segments.append(Segment(cell, dim if column.key in DIM_COLUMNS else style))
        return Strip(segments)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        base = self.rich_style
        if y < HEADER_LINES:
            strip = self._header_strip()
        else:
            row = scroll_y + y - HEADER_LINES
            if row >= len(self.shown):
                return Strip.blank(width, base)
            style = base
            if row % 2 == 0:
                style += self.get_component_rich_style("tensor-table--even-row")
            if row == self.cursor_row:
                style += self.get_component_rich_style("tensor-table--cursor")
            strip = self._row_strip(row, style)
        return strip.crop_extend(scroll_x, scroll_x + width, base)

    # -- the cursor ------------------------------------------------------------------------
    @property
    def highlighted_entry(self) -> Any | None:
        if not self.shown or self.cursor_row < 0 or self.cursor_row >= len(self.shown):
            return None
        return self.shown[self.cursor_row]

    @property
    def rows_in_view(self) -> int:
        return max(self.scrollable_content_region.height - HEADER_LINES, 1)

    def move_cursor(self, *, row: int, animate: bool = False) -> None:
        """Put the cursor on ``row`` (clamped to the rows shown) and scroll it into view."""
        if not self.shown:
            self.cursor_row = 0
            return
        self.cursor_row = max(0, min(row, len(self.shown) - 1))
        self.scroll_to_cursor(animate=animate)
        self.refresh()

    def scroll_to_cursor(self, *, animate: bool = False) -> None:
        top = self.scroll_offset.y
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=animate)
        elif self.cursor_row >= top + self.rows_in_view:
            self.scroll_to(y=self.cursor_row - self.rows_in_view + 1, animate=animate)

    def action_cursor_up(self) -> None:
        self.move_cursor(row=self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(row=self.cursor_row + 1)

    def action_page_up(self) -> None:
        self.move_cursor(row=self.cursor_row - self.rows_in_view)

    def action_page_down(self) -> None:
        self.move_cursor(row=self.cursor_row + self.rows_in_view)

    def action_first_row(self) -> None:
        self.move_cursor(row=0)

    def action_last_row(self) -> None:
        self.move_cursor(row=len(self.shown) - 1)

    def action_select_cursor(self) -> None:
        entry = self.highlighted_entry
        if entry is not None:
            self.post_message(self.EntryChosen(self, entry))

    # -- the mouse -------------------------------------------------------------------------
    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        if offset.y < HEADER_LINES:
            x = offset.x + self.scroll_offset.x
            for column in self.columns:
                if x < column.render_width:
                    event.stop()
                    self.sort_by(column.key)
                    return
                x -= column.render_width
            return
        row = self.scroll_offset.y + offset.y - HEADER_LINES
        if row >= len(self.shown):
            return
        event.stop()
        if row == self.cursor_row:  # a click on the highlighted row chooses it
            self.action_select_cursor()
        self.move_cursor(row=row)

    # -- sorting keys ----------------------------------------------------------------------
    def action_cycle_sort(self) -> None:
        visible = self.column_keys
        index = visible.index(self.order.column) if self.order.column in visible else -1
        self.sort_by(visible[(index + 1) % len(visible)], reverse=False)

    def action_reverse_sort(self) -> None:
        self.sort_by(self.order.column, reverse=not self.order.reverse)
