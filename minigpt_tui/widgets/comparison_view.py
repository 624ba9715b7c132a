"""The Compare tab: the tensors and state records that differ between two checkpoints,
compared on a worker thread (it reads both)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.containers import VerticalScroll
from textual.widgets import Static

from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.checkpoint_views import compare_for_view
from minigpt_tui.engine.session.worker_failures import WorkFailed
from minigpt_tui.messages import ComparisonReady
from minigpt_tui.widgets.pieces import plain_cell
from minigpt_tui.widgets.state_view import short_value

# The figures of a tensor row, by its key in the comparison: how far b is from a at most,
# relative to a's size, and both sizes (a dash where one side has no such tensor).
FIGURE_COLUMNS = {"max_abs_diff": "max |a−b|", "relative_change": "‖a−b‖/‖a‖", "norm_a": "‖a‖", "norm_b": "‖b‖"}
FIGURE_WIDTH = 10  # "‖a−b‖/‖a‖" and "-1.23e-05" with a cell between: four fit beside the runs tree
# From this width one row per tensor leaves its name room enough; below it (beside the runs
# tree, or at 80 columns) each tensor's name has a line of its own above its figures.
TABLE_FROM = 96


def figure(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def _tensor_table(differing: list[dict[str, Any]]) -> Table:
    tensors = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    # The long names go last, so that wrapping them leaves the short columns aligned.
    tensors.add_column("status", no_wrap=True)
    for label in FIGURE_COLUMNS.values():
        tensors.add_column(label, justify="right", no_wrap=True)
    tensors.add_column("file", style="dim", no_wrap=True)
    tensors.add_column("tensor", overflow="fold")
    for row in differing:
        tensors.add_row(row["status"], *(figure(row.get(key)) for key in FIGURE_COLUMNS),
                        plain_cell(row["file"].removesuffix(".safetensors")), plain_cell(row["name"]))
    return tensors


def _tensor_lines(differing: list[dict[str, Any]]) -> Text:
    """Narrow: each tensor's name (its file, and its status unless changed) on a line, its
    figures on the next, aligned under one header."""
    out = Text(" " + "".join(label.rjust(FIGURE_WIDTH) for label in FIGURE_COLUMNS.values()), style="bold")
    for row in differing:
        out.append(f"\n{escape_controls(row['name'])}")
        out.append(f"  {escape_controls(row['file'].removesuffix('.safetensors'))}", style="dim")
        if row["status"] != "changed":
            out.append(f"  {row['status']}", style="italic")
        out.append("\n " + "".join(figure(row.get(key)).rjust(FIGURE_WIDTH) for key in FIGURE_COLUMNS))
    return out


def comparison_renderable(result: dict[str, Any], display: Callable[[Path], str], width: int = TABLE_FROM) -> Group:
    """``width``: the cells the panel has, which choose between a table and name lines."""
    heading = Text()
    heading.append("a ", style="bold")
    heading.append(escape_controls(display(Path(result["a"]))))
    heading.append("\nb ", style="bold")
    heading.append(escape_controls(display(Path(result["b"]))))
    differing = [t for t in result["tensors"] if t["status"] != "same"]
    heading.append(f"\n\n{len(differing)} tensors differ, {result['unchanged']} are byte-identical; "
                   f"{len(result['state_differences'])} state records differ\n", style="bold")
    states = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    states.add_column("group", no_wrap=True)
    states.add_column("record", overflow="fold")
    states.add_column("a", overflow="fold")
    states.add_column("b", overflow="fold")
    for row in result["state_differences"]:
        states.add_row(plain_cell(row["group"]), plain_cell(row["record"]),
                       plain_cell(short_value(row["a"])), plain_cell(short_value(row["b"])))
    parts: list[Any] = [heading]
    if differing:
        parts += [_tensor_table(differing) if width >= TABLE_FROM else _tensor_lines(differing), Text("")]
    if result["state_differences"]:
        parts += [Text("state records that differ", style="bold underline"), states]
    return Group(*parts)


def _compare_prompt() -> Text:
    return Text("Press m to compare this checkpoint with another.", style="dim")


class ComparisonView(VerticalScroll):
    """The Compare panel: a prompt, a comparison under way, its result or why it failed."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._serial = 0  # of the checkpoint compared now: a comparison of an older one is dropped
        self._display: Callable[[Path], str] = str
        self._result: dict[str, Any] | None = None  # shown now, laid out again when the width changes

    def compose(self) -> Any:
        yield Static(_compare_prompt(), id="compare-text")

    def reset(self) -> None:
        """Back to the prompt, for a newly opened checkpoint."""
        self.drop_pending()
        self._show(_compare_prompt())

    def drop_pending(self) -> None:
        """Forget the comparison under way: its result is not shown when it comes."""
        self._serial += 1

    def compare(self, first: Path, other: Path, display: Callable[[Path], str]) -> None:
        """Compare ``first`` with ``other`` on a worker; ``display`` shows a path to the user."""
        self._display = display
        self._show(Text("comparing (reads both checkpoints)…", style="dim italic"))
        self._compare(self._serial, first, other)

    @work(thread=True, exclusive=True, exit_on_error=False, group="checkpoints-compare")
    def _compare(self, serial: int, first: Path, other: Path) -> None:
        result = compare_for_view(first, other)
        if isinstance(result, WorkFailed):
            self.app.call_from_thread(self._failed, serial, result.line)
            return
        self.post_message(ComparisonReady(serial, other, result))

    def _failed(self, serial: int, reason: str) -> None:
        self.notify(reason, title="cannot compare", severity="error", markup=False)
        if serial == self._serial:
            self._show(Text(f"comparison failed: {reason}", style="red"))

    @on(ComparisonReady)
    def _compared(self, message: ComparisonReady) -> None:
        message.stop()
        if message.serial == self._serial:
            self._show(None, message.result)

    def _show(self, text: Text | None, result: dict[str, Any] | None = None) -> None:
        """Show ``text``, or the comparison ``result`` laid out for the panel's width."""
        self._result = result
        shown = text if result is None else comparison_renderable(result, self._display,
                                                                    self.scrollable_content_region.width)
        self.query_one("#compare-text", Static).update(shown)

    def on_resize(self) -> None:
        if self._result is not None:
            self._show(None, self._result)
