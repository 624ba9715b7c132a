"""The Aliases tab: each alias record of a model file (a name stored once under another)."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from minigpt_tui.widgets.pieces import plain_cell
from minigpt_tui.widgets.state_view import short_value

KNOWN_FIELDS = ("name", "target", "transform", "use")


def aliases_renderable(aliases: tuple[dict[str, Any], ...]) -> RenderableType:
    if not aliases:
        return Text("No alias records: every entry is stored under its own name.", style="dim")
    renderables: list[Any] = []
    for alias in aliases:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for key in KNOWN_FIELDS:
            table.add_row(key, plain_cell(alias.get(key, "–")))
        for key, value in alias.items():
            if key not in KNOWN_FIELDS:
                table.add_row(plain_cell(key), plain_cell(short_value(value)))
        renderables += [table, Text("")]
    return Group(*renderables)
