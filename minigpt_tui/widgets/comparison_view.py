"""The Compare tab: the tensors and state records that differ between two checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from minigpt_tui.engine.printable import escape_controls
from minigpt_tui.widgets.pieces import plain_cell
from minigpt_tui.widgets.state_view import short_value


def comparison_renderable(result: dict[str, Any], display: Callable[[Path], str]) -> Group:
    heading = Text()
    heading.append("a ", style="bold")
    heading.append(escape_controls(display(Path(result["a"]))))
    heading.append("\nb ", style="bold")
    heading.append(escape_controls(display(Path(result["b"]))))
    differing = [t for t in result["tensors"] if t["status"] != "same"]
    heading.append(f"\n\n{len(differing)} tensors differ, {result['unchanged']} are byte-identical; "
                   f"{len(result['state_differences'])} state records differ\n", style="bold")
    tensors = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    # The long names go last, so that wrapping them leaves the short columns aligned.
    tensors.add_column("status", no_wrap=True)
    tensors.add_column("max |a−b|", justify="right", no_wrap=True)
    tensors.add_column("file", style="dim", no_wrap=True)
    tensors.add_column("tensor", overflow="fold")
    for row in differing:
        diff = row.get("max_abs_diff")
        tensors.add_row(row["status"], "–" if diff is None else f"{diff:.3g}",
                        plain_cell(row["file"].removesuffix(".safetensors")), plain_cell(row["name"]))
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
        parts += [tensors, Text("")]
    if result["state_differences"]:
        parts += [Text("state records that differ", style="bold underline"), states]
    return Group(*parts)

