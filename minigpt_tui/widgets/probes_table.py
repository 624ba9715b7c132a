"""The run's probes as scored at each scheduled evaluation: one row per probe with its latest
match, the expected answer's first-token probability and rank, and a sparkline of that
probability over the evaluations so far. The highlighted probe's probability is what the
loss plot draws along the loss curve."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from minigpt_tui.widgets.numbers import short_probability

LEVELS = "▁▂▃▄▅▆▇█"
NAME_CELLS = 28
HISTORY_CELLS = 16


@dataclass(frozen=True)
class ProbePoint:
    step: int
    match: bool
    probability: float
    rank: int


def probability_sparkline(points: Sequence[ProbePoint], cells: int = HISTORY_CELLS) -> str:
    """The last ``cells`` probabilities, each as a glyph from 0 (lowest) to 1 (full cell)."""
    return "".join(LEVELS[min(int(p.probability * len(LEVELS)), len(LEVELS) - 1)] for p in points[-cells:])


class SeriesHighlighted(Message):
    """A panel's highlighted row: the 0-to-1 series the plot should draw (None: none)."""

    def __init__(self, name: str | None, points: tuple[tuple[int, float], ...]) -> None:
        super().__init__()
        self.name = name
        self.points = points


class ProbesTable(DataTable):
    DEFAULT_CSS = """
    ProbesTable { height: 1fr; scrollbar-size-vertical: 1; }
    """

    class ProbeHighlighted(SeriesHighlighted):
        """The probe whose probability the plot should draw (None: no probe)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.history: dict[str, list[ProbePoint]] = {}
        self.last_step: int | None = None

    def on_mount(self) -> None:
        self.add_column("probe", key="probe", width=NAME_CELLS)
        for label, key in (("match", "match"), ("p", "p"), ("rank", "rank"), ("p by evaluation", "history")):
            self.add_column(label, key=key)

    def reset(self) -> None:
        self.history.clear()
        self.last_step = None
        self.clear()

    def add_scores(self, step: int, scores: Sequence[Any]) -> None:
        """One evaluation's scores (records with ``name``, ``match``, ``expected_probability``,
        ``expected_rank``); a step seen before replaces its points (a resumed run)."""
        for score in scores:
            points = self.history.setdefault(score.name, [])
            while points and points[-1].step >= step:
                points.pop()
            points.append(ProbePoint(step, score.match, score.expected_probability, score.expected_rank))
        self.last_step = step
        self._show()

    def prepend_history(self, scored: Sequence[tuple[int, Sequence[Any]]]) -> None:
        """Scores from before a resume, (step, scores) in step order, ahead of the live ones."""
        earlier: dict[str, list[ProbePoint]] = {}
        for step, scores in scored:
            for score in scores:
                live = self.history.get(score.name)
                if live and live[0].step <= step:
                    continue  # the live run scored this step again
                earlier.setdefault(score.name, []).append(
                    ProbePoint(step, score.match, score.expected_probability, score.expected_rank))
        for name, points in self.history.items():
            earlier.setdefault(name, []).extend(points)
        self.history = earlier
        if self.last_step is None and scored:
            self.last_step = scored[-1][0]
        self._show()

    def _show(self) -> None:
        row = self.cursor_row
        self.clear()
        for name, points in self.history.items():
            last = points[-1]
            self.add_row(Text(name, overflow="ellipsis", no_wrap=True),
                         Text("✓" if last.match else "✗", justify="center", style="bold" if last.match else "dim"),
                         Text(short_probability(last.probability), justify="right"),
                         Text(str(last.rank), justify="right"),
                         Text(probability_sparkline(points)), key=name)
        if self.row_count:
            self.move_cursor(row=min(max(row, 0), self.row_count - 1), animate=False)
            self._announce()

    @property
    def highlighted_probe(self) -> str | None:
        names = list(self.history)
        return names[self.cursor_row] if 0 <= self.cursor_row < len(names) else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._announce()

    def _announce(self) -> None:
        name = self.highlighted_probe
        points = tuple((p.step, p.probability) for p in self.history.get(name, ())) if name else ()
        self.post_message(self.ProbeHighlighted(name, points))
