"""The live loss table: one row per update and per evaluation, newest at the bottom.

The table keeps at most ``max_rows`` rows. When it grows past that it is rebuilt from the
newest ``keep_rows`` in one pass, which costs far less than removing rows one by one
(each removal re-indexes every row).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

# Two-line headers keep the table narrow enough for an 80-column terminal.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("\nupdate", "step"),
    ("batch\nloss", "batch_loss"),
    ("train\nloss", "train_loss"),
    ("val\nloss", "val_loss"),
    ("\nmark", "mark"),
    ("\nlr", "lr"),
    ("grad\nnorm", "grad_norm"),
    ("loss\nscale", "loss_scale"),
    ("tokens\n/s", "tokens_per_second"),
)
BEST_MARK = "★ best"
EXTRA_MARK = "extra"
SKIPPED_MARK = "skipped"


@dataclass(frozen=True)
class LossRow:
    """One displayed row; ``key`` is unique per row, ``evaluation_step`` marks eval rows."""

    key: str
    cells: tuple[Text, ...]
    evaluation_step: int | None = None


def _number(value: float | None, spec: str, style: str = "") -> Text:
    if value is None:
        return Text("–", style="dim", justify="right")
    return Text(format(value, spec), style=style, justify="right")


def update_row(serial: int, record: Any) -> LossRow:
    return LossRow(
        key=f"row-{serial}",
        cells=(
            Text(str(record.step), justify="right"),
            _number(record.loss, ".4f"),
            Text(""),
            Text(""),
            Text(SKIPPED_MARK if not record.applied else "", style="bold red"),
            _number(record.lr, ".2e"),
            _number(record.grad_norm, ".4f"),
            _number(record.loss_scale, "g"),
            _number(record.tokens_per_second, ",.0f"),
        ),
    )


def evaluation_row(serial: int, record: Any, best_step: int | None) -> LossRow:
    return LossRow(
        key=f"row-{serial}",
        cells=(
            Text(f"eval {record.step}", style="bold", justify="right"),
            Text(""),
            _number(record.train_loss, ".4f", "bold"),
            _number(record.validation_loss, ".4f", "bold"),
            evaluation_mark(record, best_step),
            Text(""),
            Text(""),
            Text(""),
            Text(""),
        ),
        evaluation_step=None if record.extra else record.step,
    )


def evaluation_mark(record: Any, best_step: int | None) -> Text:
    if record.extra:
        return Text(EXTRA_MARK, style="italic")
    if best_step is not None and record.step == best_step and record.validation_loss is not None:
        return Text(BEST_MARK, style="bold green")
    return Text("")


class LossTable(DataTable):
    """Updates and evaluations of the current run, bounded in size."""

    DEFAULT_CSS = """
    LossTable { height: 1fr; }
    """

    def __init__(self, *, max_rows: int = 600, keep_rows: int = 400, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, header_height=2, **kwargs)
        if not 0 < keep_rows <= max_rows:
            raise ValueError("keep_rows must be in (0, max_rows]")
        self.max_rows = max_rows
        self.keep_rows = keep_rows
        self._rows: deque[LossRow] = deque(maxlen=max_rows)
        self._serial = 0
        self._best_row_key: str | None = None
        self._best_step: int | None = None
        self._follow = True

    def on_mount(self) -> None:
        for label, key in COLUMNS:
            self.add_column(label, key=key)

    # -- content -------------------------------------------------------------------------
    def reset(self) -> None:
        self._rows.clear()
        self._best_row_key = None
        self._best_step = None
        self._follow = True
        self.clear()

    def add_records(self, items: list[tuple[Any, int | None]]) -> None:
        """Append rows for ``(record, best_step)`` pairs: an UpdateRecord's best_step is None."""
        if not items:
            return
        follow = self._follow_tail()
        new_rows: list[LossRow] = []
        for record, best_step in items:
            self._serial += 1
            if hasattr(record, "train_loss"):
                row = evaluation_row(self._serial, record, best_step)
                if best_step is not None and best_step != self._best_step:
                    self._move_best(best_step)
                if row.evaluation_step is not None and row.evaluation_step == best_step:
                    self._best_row_key = row.key
                    self._best_step = best_step
            else:
                row = update_row(self._serial, record)
            new_rows.append(row)
        self._rows.extend(new_rows)
        if self.row_count + len(new_rows) > self.max_rows:
            self._rebuild(list(self._rows)[-self.keep_rows:])
        else:
            for row in new_rows:
                self.add_row(*row.cells, key=row.key)
        if follow:
            self.move_cursor(row=self.row_count - 1, animate=False, scroll=True)

    def _follow_tail(self) -> bool:
        """Keep following new rows unless the user moved the cursor up."""
        return self.row_count == 0 or self.cursor_row >= self.row_count - 1

    def _move_best(self, best_step: int) -> None:
        previous = self._best_row_key
        self._best_row_key = None
        self._best_step = best_step
        if previous is None:
            return
        for index, row in enumerate(self._rows):
            if row.key == previous:
                cells = list(row.cells)
                cells[4] = Text("")
                self._rows[index] = LossRow(row.key, tuple(cells), row.evaluation_step)
                break
        if previous in self.rows:
            self.update_cell(previous, "mark", Text(""))

    def _rebuild(self, rows: list[LossRow]) -> None:
        self._rows = deque(rows, maxlen=self.max_rows)
        self.clear()
        for row in rows:
            self.add_row(*row.cells, key=row.key)

    @property
    def best_row_key(self) -> str | None:
        return self._best_row_key

    def marks(self) -> dict[str, str]:
        """Row key to mark text (for tests and the help view)."""
        return {row.key: row.cells[4].plain for row in self._rows if row.cells[4].plain}
