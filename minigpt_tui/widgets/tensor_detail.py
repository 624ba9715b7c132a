"""One tensor in detail: its header record at once, its statistics and histogram once the
worker that reads its bytes (the only read of tensor bytes, on demand) has finished."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static
from textual.worker import get_current_worker

from minigpt_tui.engine.session.checkpoint_views import statistics_for_view
from minigpt_tui.engine.session.display import counted, human_bytes
from minigpt_tui.engine.session.worker_failures import WorkFailed
from minigpt_tui.messages import StatisticsProgress, StatisticsReady
from minigpt_tui.widgets.pieces import bar, plain_cell
from minigpt_tui.widgets.tensor_table import shape_text

HISTOGRAM_WIDTH = 30
HISTOGRAM_BINS = 20
PROGRESS_INTERVAL_S = 0.2  # how often a large tensor's reading shows how far it has got


def number(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.6g}"
    return str(value)


def entry_table(entry: Any, path: str) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    # Plain strings (rendered as before), with control characters and markup escaped.
    table.add_row("name", plain_cell(entry.name))
    table.add_row("file", plain_cell(f"{entry.file}  ({path})"))
    table.add_row("dtype", entry.dtype)
    table.add_row("shape", shape_text(entry.shape))
    table.add_row("elements", f"{entry.elements:,}")
    table.add_row("bytes", f"{entry.bytes:,} ({human_bytes(entry.bytes)})")
    table.add_row("offsets", f"{entry.begin:,} – {entry.end:,} within the data section")
    table.add_row("group", entry.group)
    return table


def statistics_table(stats: dict[str, Any]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    if stats.get("of", "values") != "values":  # complex: the figures are of |z|
        table.add_row("of", f"the {stats['of']}")
    for key, label in (("min", "min"), ("max", "max"), ("mean", "mean"), ("std", "std (population)"),
                       ("zero_fraction", "zero fraction"), ("nan", "NaN count"), ("inf", "±inf count"),
                       ("bytes_read", "bytes read")):
        table.add_row(label, number(stats.get(key)))
    return table


def histogram_table(stats: dict[str, Any], width: int = HISTOGRAM_WIDTH) -> Table | Text:
    histogram = stats.get("histogram") or {}
    edges, counts = histogram.get("edges") or [], histogram.get("counts") or []
    if not counts:
        return Text("no finite values: no histogram", style="dim")
    if len(edges) == 2 and edges[0] == edges[1]:  # a constant tensor: one value, no interval
        return Text(f"every finite value equals {number(edges[0])} ({counts[0]:,} values)")
    top = max(counts) or 1
    table = Table.grid(padding=(0, 1))
    table.add_column(justify="right", no_wrap=True, style="dim")
    table.add_column(no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    for index, count in enumerate(counts):
        table.add_row(_bin_span(edges, index), Text(bar(count / top, width), style="bold"), f"{count:,}")
    return table


def _bin_span(edges: list[Any], index: int) -> str:
    """Bin ``index``'s interval, low … high (– for an edge the histogram lacks)."""
    low = edges[index] if index < len(edges) else None
    high = edges[index + 1] if index + 1 < len(edges) else None
    return f"{number(low)} … {number(high)}"


class TensorDetail(VerticalScroll):
    """The Detail panel: nothing chosen, an entry with statistics pending, done, or failed."""

    DEFAULT_CSS = """
    TensorDetail { height: 1fr; padding: 0 1; }
    TensorDetail > Static { height: auto; }
    """
    BINDINGS = [Binding("escape", "stop_reading", "Stop reading")]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._serial = 0  # of the latest statistics request: an older result is dropped
        self._where = ""
        self._reading: Any = None  # the entry whose statistics are being read, if any

    def compose(self) -> Any:
        yield Static(Text("Choose a tensor in Tensors (enter) to see its statistics and histogram.",
                          style="dim"), id="detail-record")
        yield Static("", id="detail-stats")

    def show_tensor(self, source: Path, entry: Any, where: str) -> None:
        """Show ``entry`` of the file or folder ``source`` now and its statistics when the
        worker has read it; ``where`` is how ``source`` is shown."""
        self._serial += 1
        self._where = where
        self._reading = entry
        self.refresh_bindings()
        self.show_pending(entry, where)
        self._statistics(self._serial, source, entry)

    @property
    def reading(self) -> bool:
        """Statistics are being read for the entry shown."""
        return self._reading is not None

    @work(thread=True, exclusive=True, exit_on_error=False, group="checkpoints-statistics")
    def _statistics(self, serial: int, source: Path, entry: Any) -> None:
        stats = statistics_for_view(source, entry, HISTOGRAM_BINS, self._going(serial))
        if stats is None:
            return  # another tensor was chosen, or escape: nothing to show
        if isinstance(stats, WorkFailed):
            self.post_message(StatisticsReady(serial, entry, None, stats.line))
            return
        self.post_message(StatisticsReady(serial, entry, stats, None))

    def _going(self, serial: int) -> Any:
        """On the worker: show the progress now and then; stop once this request is not the
        latest (another tensor, another file, escape) or the worker was cancelled."""
        worker = get_current_worker()
        shown = [time.monotonic()]

        def going(fraction: float) -> bool:
            if worker.is_cancelled or serial != self._serial:
                return False
            if time.monotonic() - shown[0] >= PROGRESS_INTERVAL_S:
                shown[0] = time.monotonic()
                self.post_message(StatisticsProgress(serial, fraction))
            return True

        return going

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop_reading":  # escape goes on to the screen when nothing is being read
            return self.reading
        return True

    def action_stop_reading(self) -> None:
        entry, self._reading = self._reading, None
        self._serial += 1  # the worker stops at its next piece; what it would post is dropped
        if entry is not None:
            self.show_failure(entry, self._where, "stopped (escape); enter on the tensor reads it again")
        self.refresh_bindings()

    @on(StatisticsProgress)
    def _statistics_progress(self, message: StatisticsProgress) -> None:
        message.stop()
        if message.serial == self._serial and self._reading is not None:
            self.query_one("#detail-stats", Static).update(
                Text(f"\nreading {human_bytes(self._reading.bytes)} on a worker thread… "
                     f"{message.fraction:.0%} (escape stops)", style="dim italic"))

    @on(StatisticsReady)
    def _statistics_ready(self, message: StatisticsReady) -> None:
        message.stop()
        if message.serial != self._serial:
            return
        self._reading = None
        self.refresh_bindings()
        if message.stats is None:
            reason = message.reason or "unknown error"
            self.show_failure(message.entry, self._where, reason)
            self.notify(reason, title="statistics", severity="error", markup=False)
        else:
            self.show_statistics(message.entry, self._where, message.stats)

    def show_pending(self, entry: Any, path: str) -> None:
        self.query_one("#detail-record", Static).update(entry_table(entry, path))
        self.query_one("#detail-stats", Static).update(
            Text(f"\nreading {human_bytes(entry.bytes)} on a worker thread…", style="dim italic"))

    def show_statistics(self, entry: Any, path: str, stats: dict[str, Any]) -> None:
        self.query_one("#detail-record", Static).update(entry_table(entry, path))
        heading = Text("\nstatistics", style="bold underline")
        bins = len((stats.get('histogram') or {}).get('counts') or [])
        histogram = Text(f"\nhistogram ({counted(bins, 'bin')} of equal width between min and max)",
                         style="bold underline")
        self.query_one("#detail-stats", Static).update(
            Group(heading, statistics_table(stats), histogram, histogram_table(stats)))

    def show_failure(self, entry: Any, path: str, reason: str) -> None:
        self.query_one("#detail-record", Static).update(entry_table(entry, path))
        self.query_one("#detail-stats", Static).update(Text(f"\nstatistics unavailable: {reason}", style="red"))

    def clear_detail(self) -> None:
        """Back to nothing chosen; statistics still being read stop at their next piece."""
        self._serial += 1
        self._reading = None
        self.query_one("#detail-record", Static).update(
            Text("Choose a tensor in Tensors (enter) to see its statistics and histogram.", style="dim"))
        self.query_one("#detail-stats", Static).update("")
