"""The Metadata tab: a file's raw metadata records (per file in a folder), as stored."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from minigpt_tui.engine.core.printable import escape_controls


def metadata_text(metadata: dict[str, Any]) -> Text:
    per_file = bool(metadata) and all(isinstance(v, dict) for v in metadata.values())
    files = metadata if per_file else {"": metadata}
    out = Text()
    for file_name, records in files.items():
        if file_name:
            out.append(f"{escape_controls(file_name)}\n", style="bold underline")
        if not records:
            out.append("(no metadata)\n", style="dim")
        for key, value in records.items():
            out.append(escape_controls(key), style="bold")
            out.append(" = ")
            out.append(f"{escape_controls(value)}\n")
        out.append("\n")
    return out
