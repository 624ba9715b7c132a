"""The tensor entries of an inspected file or checkpoint: one row per entry of a header.

Rows come from header records alone (name, dtype, shape, elements, bytes, data offsets),
so a file of any size fills the table at once. The table sorts by any column (click a
header, or ``s`` cycles the column and ``S`` reverses) and filters by a substring of the
name, dtype, group or file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable

from minigpt_tui.engine.printable import escape_controls
from minigpt_tui.widgets.pieces import plain_cell

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
# The columns kept in view beside the name when not every column fits; the others are
# scrolled to (and Detail shows them all).
KEY_COLUMNS = ("dtype", "shape", "elements", "bytes")
# Optimizer entry names run past 50 characters: the name column takes the width the other
# columns leave (never under MIN_NAME_WIDTH), cut from the left so that the end that tells
# rows apart (the layer number, the moment) stays; Detail shows the whole name.
MIN_NAME_WIDTH = 30  # every model parameter name of ours fits
CELL_PADDING = 2
SCROLLBAR_WIDTH = 2
SORT_ARROW_WIDTH = 2


def human_bytes(count: int) -> str:
    """1234 -> '1.2 kB'; exact below 1000."""
    if count < 1000:
        return f"{count} B"
    value = float(count)
    for unit in ("kB", "MB", "GB", "TB"):
        value /= 1000
        if value < 1000 or unit == "TB":
            return f"{value:.1f} {unit}"
    return f"{count} B"


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


@dataclass(frozen=True)
class TensorOrder:
    column: str = "begin"
    reverse: bool = False


class TensorTable(DataTable):
    """Entry records (``EntryRecord`` duck type) with sorting and a substring filter."""

    DEFAULT_CSS = """
    TensorTable { height: 1fr; }
    """

    BINDINGS = [
        Binding("s", "cycle_sort", "Sort", show=False),
        Binding("S", "reverse_sort", "Reverse", show=False),
    ]

    class EntryChosen(Message):
        """An entry was chosen (enter or double click): show its detail."""

        def __init__(self, table: "TensorTable", entry: Any) -> None:
            super().__init__()
            self.table = table
            self.entry = entry

        @property
        def control(self) -> "TensorTable":
            return self.table

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.entries: tuple[Any, ...] = ()
        self.filter_text = ""
        self.order = TensorOrder()
        self.shown: list[Any] = []
        self._show_file = False
        self._name_width: int | None = None

    def on_mount(self) -> None:
        self._columns_for(False)

    def _cells_of(self, entry: Any) -> list[str]:
        """The plain text of an entry's cells other than the name (for measuring)."""
        cells = [entry.dtype, shape_text(entry.shape), f"{entry.elements:,}", f"{entry.bytes:,}",
                 f"{entry.begin:,}–{entry.end:,}", entry.group]
        if self._show_file:
            cells.append(file_label(entry.file))
        return cells

    def _fitted_name_width(self) -> int | None:
        """None when every name fits beside all the other columns; else the name width that
        keeps all of them in view, or failing that the key columns (never under MIN_NAME_WIDTH)."""
        longest = max((len(e.name) for e in self.entries), default=4)
        keys = [key for _label, key in COLUMNS if key != "name" and (key != "file" or self._show_file)]
        widths = {key: len(label) for label, key in COLUMNS}
        for entry in self.entries:
            for key, cell in zip(keys, self._cells_of(entry)):
                widths[key] = max(widths[key], len(cell))

        def room_beside(columns: list[str]) -> int:
            taken = sum(widths[key] + CELL_PADDING for key in columns)
            return self.size.width - taken - CELL_PADDING - SORT_ARROW_WIDTH - SCROLLBAR_WIDTH

        every = room_beside(keys)
        if longest <= every:
            return None
        if every >= MIN_NAME_WIDTH:
            return every
        return max(MIN_NAME_WIDTH, room_beside([key for key in keys if key in KEY_COLUMNS]))

    def _columns_for(self, show_file: bool) -> None:
        self.clear(columns=True)
        self._show_file = show_file
        self._name_width = self._fitted_name_width()
        for label, key in COLUMNS:
            if key == "file" and not show_file:
                continue
            self.add_column(label, key=key, width=self._name_width if key == "name" else None)

    def on_resize(self) -> None:
        if self._fitted_name_width() != self._name_width:
            self._columns_for(self._show_file)
            self._rebuild()

    # -- content -------------------------------------------------------------------------
    def show_entries(self, entries: Sequence[Any]) -> None:
        """Replace the entries (a new file or checkpoint); the filter and order stay."""
        self.entries = tuple(entries)
        files = {e.file for e in self.entries}
        self._show_file = len(files) > 1
        self._columns_for(self._show_file)
        self._rebuild()

    def set_filter(self, text: str) -> None:
        self.filter_text = text.strip()
        self._rebuild()

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
        shown = [e for e in self.entries if self.matches(e)]
        shown.sort(key=self._sort_key, reverse=self.order.reverse)
        self.shown = shown
        self.clear()
        for index, entry in enumerate(shown):
            cells: list[Any] = [
                plain_cell(left_truncate(escape_controls(entry.name), self._name_width)),
                entry.dtype,
                shape_text(entry.shape),
                Text(f"{entry.elements:,}", justify="right"),
                Text(f"{entry.bytes:,}", justify="right"),
                Text(f"{entry.begin:,}–{entry.end:,}", justify="right"),
                Text(entry.group, style="dim"),
            ]
            if self._show_file:
                cells.append(Text(file_label(entry.file), style="dim"))
            self.add_row(*cells, key=f"{index}")
        self._label_columns()

    def _label_columns(self) -> None:
        arrow = " ▼" if self.order.reverse else " ▲"
        for label, key in COLUMNS:
            column = self.columns.get(key)  # type: ignore[call-overload]
            if column is not None:
                column.label = Text(label + (arrow if key == self.order.column else ""))
        self.refresh()

    # -- reading the cursor ----------------------------------------------------------------
    @property
    def highlighted_entry(self) -> Any | None:
        if not self.shown or self.cursor_row < 0 or self.cursor_row >= len(self.shown):
            return None
        return self.shown[self.cursor_row]

    # -- interaction -----------------------------------------------------------------------
    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        entry = self.highlighted_entry
        if entry is not None:
            self.post_message(self.EntryChosen(self, entry))

    def action_cycle_sort(self) -> None:
        visible = [key for _label, key in COLUMNS if key != "file" or self._show_file]
        index = visible.index(self.order.column) if self.order.column in visible else -1
        self.sort_by(visible[(index + 1) % len(visible)], reverse=False)

    def action_reverse_sort(self) -> None:
        self.sort_by(self.order.column, reverse=not self.order.reverse)
