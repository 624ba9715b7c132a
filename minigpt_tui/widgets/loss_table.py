"""The live loss table: one row per update and per evaluation, newest at the bottom.

A Line-API widget rather than a DataTable: each row is rendered once, to a strip that is
kept, and a refresh draws only the visible rows from those strips. (A DataTable re-renders
every visible cell whenever a row is added; at a few hundred updates a second that alone
took more of the GIL than training could spare.) The table keeps the newest ``max_rows``
rows; older ones are dropped.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from minigpt_tui.widgets.throttle import Throttle

BEST_MARK = "★ best"
EXTRA_MARK = "extra"
SKIPPED_MARK = "skip"
GAP = 1
HEADER_LINES = 2


@dataclass(frozen=True)
class Column:
    key: str
    header: tuple[str, str]
    width: int
    numeric: bool = True


COLUMNS: tuple[Column, ...] = (
    Column("step", ("", "update"), 9),
    Column("batch_loss", ("batch", "loss"), 7),
    Column("train_loss", ("train", "loss"), 7),
    Column("val_loss", ("val", "loss"), 7),
    Column("mark", ("", "mark"), 6, numeric=False),
    Column("lr", ("", "lr"), 8),
    Column("grad_norm", ("grad", "norm"), 7),
    Column("loss_scale", ("loss", "scale"), 7),
    Column("tokens_per_second", ("tokens", "/s"), 7),
)
MARK_COLUMN = 4
# The two columns a newcomer asks about, explained where they are (the help says it all).
COLUMN_NOTES = (f"mark: {BEST_MARK} = lowest validation loss so far (RUN:best), {EXTRA_MARK} = an evaluation asked "
                f"for with e, {SKIPPED_MARK} = an update skipped (non-finite gradient)\n"
                "loss scale: what the loss is multiplied by before the backward pass so small gradients survive "
                "float16 (1: scaling off)")


@dataclass(frozen=True)
class LossRow:
    """One displayed row: its cells as text, and what kind of row it is."""

    key: int
    cells: tuple[str, ...]
    evaluation: bool = False
    evaluation_step: int | None = None  # on-schedule evaluations only (extras never become best)

    @property
    def mark(self) -> str:
        return self.cells[MARK_COLUMN]

    def with_mark(self, mark: str) -> "LossRow":
        cells = list(self.cells)
        cells[MARK_COLUMN] = mark
        return LossRow(self.key, tuple(cells), self.evaluation, self.evaluation_step)


def _number(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _scale(value: float) -> str:
    """Loss scales are powers of two: whole numbers in full while they fit the column."""
    return str(int(value)) if value == int(value) and abs(value) < 1e7 else format(value, ".1e")


def _evaluation_label(step: int) -> str:
    label = f"eval {step}"
    return label if len(label) <= COLUMNS[0].width else f"e {step}"


def update_row(key: int, record: Any) -> LossRow:
    return LossRow(key, (
        str(record.step),
        _number(record.loss, ".4f"),
        "",
        "",
        "" if record.applied else SKIPPED_MARK,
        _number(record.lr, ".2e"),
        _number(record.grad_norm, ".4f"),
        _scale(record.loss_scale),
        _number(record.tokens_per_second, ",.0f"),
    ))


def evaluation_row(key: int, record: Any, best_step: int | None) -> LossRow:
    if record.extra:
        mark = EXTRA_MARK
    elif best_step is not None and record.step == best_step and record.validation_loss is not None:
        mark = BEST_MARK
    else:
        mark = ""
    return LossRow(
        key,
        (_evaluation_label(record.step), "", _number(record.train_loss, ".4f"), _number(record.validation_loss, ".4f"),
         mark, "", "", "", ""),
        evaluation=True,
        evaluation_step=None if record.extra else record.step,
    )


class LossTable(ScrollView, can_focus=True):
    """Updates and evaluations of the current run, bounded in size, following the newest
    row unless the user has scrolled up."""

    COMPONENT_CLASSES = {
        "loss-table--header",
        "loss-table--evaluation",
        "loss-table--best",
        "loss-table--extra",
        "loss-table--skipped",
    }
    DEFAULT_CSS = """
    LossTable { height: 1fr; background: $surface; overflow-y: scroll; }
    LossTable > .loss-table--header { text-style: bold; color: $text-accent; }
    LossTable > .loss-table--evaluation { text-style: bold; background: $boost; }
    LossTable > .loss-table--best { color: $text-success; text-style: bold; }
    LossTable > .loss-table--extra { color: $text-muted; text-style: italic; }
    LossTable > .loss-table--skipped { color: $text-error; }
    """

    def __init__(self, *, max_rows: int = 500, max_refreshes_per_second: float = 4.0,
                 clock: Callable[[], float] = time.monotonic, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tooltip = COLUMN_NOTES  # on hover; ? shows the same and more
        self.max_rows = max_rows
        self._queued: list[tuple[Any, int | None]] = []
        self._throttle = Throttle(self._add_queued, clock=clock, per_second=max_refreshes_per_second,
                                  set_timer=lambda wait, then: self.set_timer(wait, then))
        self.rows: deque[LossRow] = deque()
        self._serial = 0
        self._best_step: int | None = None
        self._strips: dict[int, Strip] = {}
        self._header: list[Strip] | None = None
        self.row_width = sum(c.width for c in COLUMNS) + GAP * len(COLUMNS)
        # Whether the view stays on the newest row. Read from the scroll position only once
        # the table has a size: rows that arrive before the first layout (an attached run's
        # history) must not leave it at the top.
        self._following = True

    def on_resize(self) -> None:
        if self._following:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)

    def on_mount(self) -> None:
        self._set_rows_height()
        self.watch(self.app, "theme", lambda _: self._forget_strips(), init=False)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._forget_strips()

    def _forget_strips(self) -> None:
        self._strips.clear()
        self._header = None
        self.refresh()

    # -- content -------------------------------------------------------------------------
    def reset(self) -> None:
        self._queued.clear()
        self.rows.clear()
        self._strips.clear()
        self._best_step = None
        self._set_rows_height()
        self.scroll_to(0, 0, animate=False, immediate=True)
        self._following = True
        self.refresh()

    def queue_records(self, items: list[tuple[Any, int | None]]) -> None:
        """Add rows at most ``max_refreshes_per_second`` times a second: redrawing a
        scrolled table touches every visible line, the costliest refresh of a live run."""
        self._queued.extend(items)
        if self._queued:
            self._throttle.request()

    def flush(self) -> None:
        """Add the queued rows now."""
        self._throttle.run_now()

    def _add_queued(self) -> None:
        items, self._queued = self._queued, []
        self.add_records(items)

    def add_records(self, items: list[tuple[Any, int | None]]) -> None:
        """Append rows for ``(record, best_step)`` pairs (``best_step`` is None for updates)."""
        if not items:
            return
        if self.size.height:
            self._following = self.scroll_y >= self.max_scroll_y - 0.5
        following = self._following
        for record, best_step in items:
            self._serial += 1
            if hasattr(record, "train_loss"):
                if best_step is not None and best_step != self._best_step:
                    self._clear_best_mark()
                    self._best_step = best_step
                self.rows.append(evaluation_row(self._serial, record, best_step))
            else:
                self.rows.append(update_row(self._serial, record))
        dropped = 0
        while len(self.rows) > self.max_rows:
            self._strips.pop(self.rows.popleft().key, None)
            dropped += 1
        self._set_rows_height()
        if following:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)
        elif dropped:
            self.scroll_to(y=max(0, self.scroll_y - dropped), animate=False, immediate=True)
        self.refresh()

    def prepend_records(self, items: list[tuple[Any, int | None]]) -> None:
        """Put earlier records (a resumed run's history) before the rows shown so far. The
        best mark follows the live run's best step once it has one (it knows the history)."""
        if not items:
            return
        current = list(self.rows)
        live_best = self._best_step
        self.rows.clear()
        self._strips.clear()
        self._best_step = None
        self.add_records(items)
        self.rows.extend(current)
        while len(self.rows) > self.max_rows:
            self.rows.popleft()
        self._mark_best(live_best if live_best is not None else self._best_step)
        self._set_rows_height()
        self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)
        self.refresh()

    def _mark_best(self, best_step: int | None) -> None:
        self._best_step = best_step
        for index, row in enumerate(self.rows):
            wanted = BEST_MARK if best_step is not None and row.evaluation_step == best_step else row.mark
            if row.mark == BEST_MARK and wanted != BEST_MARK:
                wanted = ""
            if wanted != row.mark:
                self.rows[index] = row.with_mark(wanted)
                self._strips.pop(row.key, None)

    def _set_rows_height(self) -> None:
        """Grow the scrollable height without a layout of the whole screen.

        Assigning ``virtual_size`` lays out the screen (it is a layout reactive), which cost
        more than everything else a refresh does. The vertical scrollbar is always shown
        (``overflow-y: scroll``) and the width never changes, so nothing outside this widget
        depends on its height: set it quietly and update the scrollbars.
        """
        size = Size(self.row_width, len(self.rows) + HEADER_LINES)
        if size != self.virtual_size:
            self.set_reactive(ScrollView.virtual_size, size)
            self._scroll_update(size)

    def _clear_best_mark(self) -> None:
        for index in range(len(self.rows) - 1, -1, -1):
            row = self.rows[index]
            if row.mark == BEST_MARK:
                self.rows[index] = row.with_mark("")
                self._strips.pop(row.key, None)
                return

    def marks(self) -> dict[int, str]:
        """Row key to mark, for rows that have one."""
        return {row.key: row.mark for row in self.rows if row.mark}

    def row_texts(self) -> list[tuple[str, ...]]:
        return [row.cells for row in self.rows]

    # -- drawing -------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        base = self.rich_style
        if y < HEADER_LINES:
            strip = self._header_strips()[y]
        else:
            index = scroll_y + y - HEADER_LINES
            if index >= len(self.rows):
                return Strip.blank(width, base)
            strip = self._row_strip(self.rows[index])
        return strip.crop_extend(scroll_x, scroll_x + width, base)

    def _header_strips(self) -> list[Strip]:
        if self._header is None:
            style = self.rich_style + self.get_component_rich_style("loss-table--header")
            self._header = [
                Strip([Segment(self._cells(tuple(c.header[line] for c in COLUMNS)), style)], self.row_width)
                for line in range(HEADER_LINES)
            ]
        return self._header

    def _row_strip(self, row: LossRow) -> Strip:
        strip = self._strips.get(row.key)
        if strip is None:
            strip = self._strips[row.key] = self._render_row(row)
        return strip

    def _render_row(self, row: LossRow) -> Strip:
        style = self.rich_style
        if row.evaluation:
            style += self.get_component_rich_style("loss-table--evaluation")
        before = self._cells(row.cells[:MARK_COLUMN], COLUMNS[:MARK_COLUMN])
        mark = self._cells((row.mark,), (COLUMNS[MARK_COLUMN],))
        after = self._cells(row.cells[MARK_COLUMN + 1:], COLUMNS[MARK_COLUMN + 1:])
        mark_style = style + self._mark_style(row.mark) if row.mark else style
        return Strip([Segment(before, style), Segment(mark, mark_style), Segment(after, style)], self.row_width)

    def _mark_style(self, mark: str) -> Style:
        component = {BEST_MARK: "loss-table--best", EXTRA_MARK: "loss-table--extra",
                     SKIPPED_MARK: "loss-table--skipped"}[mark]
        return self.get_component_rich_style(component)

    @staticmethod
    def _cells(texts: tuple[str, ...], columns: tuple[Column, ...] = COLUMNS) -> str:
        parts = []
        for text, column in zip(texts, columns):
            text = text[: column.width]
            parts.append(" " * GAP + (text.rjust(column.width) if column.numeric else text.ljust(column.width)))
        return "".join(parts)
