"""``inspect`` without ``--json``: the inspection as rich tables, one printer per section,
each printing only when the result holds that section."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rich.table import Table
from rich.text import Text

from minigpt_tui.commands.common import output_console
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.display import shorten

WIDE_FROM = 110  # below this width the group and offset columns give their room to the name
MAX_TABLE_ENTRIES = 2_000  # rows of the entries tables; --json lists every entry
MAX_FILE_TABLES = 16  # more files than this share one entries table
STATISTICS = ("elements", "min", "max", "mean", "std", "zero_fraction", "nan", "inf", "bytes_read")


def _short(console: Any, value: Any, width: int = 72) -> Any:
    """A value cut to ``width`` on a terminal; piped or redirected output keeps all of it."""
    text = escape_controls(value if isinstance(value, str) else json.dumps(value))
    return _text(shorten(text, width) if console.is_terminal else text)


def _text(value: Any) -> Any:
    """A cell or line of untrusted text (rich Text): control characters escaped, no markup read."""
    return Text(escape_controls(value))


def _table(title: str, *columns: str) -> Any:
    table = Table(title=_text(title))
    for column in columns:
        table.add_column(column)
    return table


def _files(console: Any, result: dict[str, Any]) -> None:
    console.print(Text.assemble((escape_controls(result["path"]), "bold"), f"  ({result['kind']})"))
    files = _table("files", "file", "kind", "bytes", "header bytes", "tensors")
    for f in result["files"]:
        files.add_row(_text(f["name"]), f["kind"], str(f["size"]), str(f["header_bytes"]), str(f["tensors"]))
    console.print(files)


def _entries(console: Any, result: dict[str, Any]) -> None:
    """One table per file; the name folds rather than being cut."""
    wide = console.width >= WIDE_FROM
    columns = ("group", "dtype", "shape", "elements", "bytes", "offsets") if wide else (
        "dtype", "shape", "elements", "bytes")
    groups, file_count = _entry_groups(result["entries"])
    shown = 0
    for file_name, file_entries in groups:
        if shown >= MAX_TABLE_ENTRIES:
            break
        entries = _entries_table(file_name, file_count, columns)
        for e in file_entries[: MAX_TABLE_ENTRIES - shown]:
            entries.add_row(*_entry_cells(e, file_name, columns))
        shown += min(len(file_entries), MAX_TABLE_ENTRIES - shown)
        console.print(entries)
    total = len(result["entries"])
    if total > shown:
        console.print(_text(f"… and {total - shown:,} more entries, not shown (the first {shown:,} of {total:,}); "
                            "--json lists every one"))


def _entry_groups(entries: list[dict[str, Any]]) -> tuple[list[tuple[str, list[dict[str, Any]]]], int]:
    """The entries by file while there are a few files; past that, one group named "" (a
    table with a file column). With how many files there are."""
    by_file: dict[str, list[dict[str, Any]]] = {}
    for e in entries:  # one pass: a million entries over many shards stay linear
        by_file.setdefault(e["file"], []).append(e)
    groups = list(by_file.items()) if len(by_file) <= MAX_FILE_TABLES else [("", entries)]
    return groups, len(by_file)


def _entries_table(file_name: str, file_count: int, columns: tuple[str, ...]) -> Table:
    """An empty entries table for one file, or (``file_name`` "") for every file, with a file column."""
    title = f"{file_name}: tensor entries (header only)" if file_name else \
        f"tensor entries of {file_count:,} files (header only)"
    entries = Table(title=_text(title))
    if not file_name:
        entries.add_column("file", overflow="fold")
    entries.add_column("name", overflow="fold", ratio=1)
    for column in columns:
        entries.add_column(column, no_wrap=True)
    return entries


def _entry_cells(e: dict[str, Any], file_name: str, columns: tuple[str, ...]) -> list[Any]:
    values = {"group": e["group"], "dtype": e["dtype"], "shape": str(e["shape"]),
              "elements": str(e["elements"]), "bytes": str(e["bytes"]),
              "offsets": f"{e['begin']}..{e['end']}"}
    cells = [_text(e["name"]), *(_text(values[c]) for c in columns)]
    return [*([_text(e["file"])] if not file_name else []), *cells]


def _aliases(console: Any, result: dict[str, Any]) -> None:
    if not result["aliases"]:
        return
    aliases = _table("alias records", "name", "target", "transform", "use")
    for a in result["aliases"]:
        aliases.add_row(*(_text(a.get(key, "")) for key in ("name", "target", "transform", "use")))
    console.print(aliases)


def _state(console: Any, result: dict[str, Any]) -> None:
    for group, records in result["state"].items():
        if records:
            table = _table(f"state: {group}", "record", "value")
            for key, value in records.items():
                table.add_row(_text(key), _short(console, value))
            console.print(table)


def _metadata(console: Any, result: dict[str, Any]) -> None:
    if result["state"] or not result["metadata"]:
        return
    table = _table("metadata", "key", "value")
    for key, value in result["metadata"].items():
        table.add_row(_text(key), _short(console, value))
    console.print(table)


def _integrity(console: Any, result: dict[str, Any]) -> None:
    integrity = result.get("integrity")
    if integrity is None:
        return
    if integrity["scope"] == "index":  # a transformers folder: index against shards
        verdict = "ok" if integrity["ok"] else "PROBLEM: " + "; ".join(integrity["problems"])
        console.print(_text(f"integrity ({integrity['checked']}): {verdict}"))
        return
    status = "complete" if integrity["complete"] else "INCOMPLETE"
    checked = "hashes checked" if integrity["hashes_checked"] else "sizes checked (add --verify for hashes)"
    console.print(_text(f"integrity: {status}, {'ok' if integrity['ok'] else 'PROBLEM: ' + str(integrity['problem'])}; "
                        f"{checked}"))


_VERIFIED_LABELS = {"model_identity": "model identity", "step": "step", "tied_alias": "tied head",
                    "sha256": "SHA-256"}


def _verified(console: Any, result: dict[str, Any]) -> None:
    verified = result.get("verified")
    if verified is None:
        return
    parts = ["ok" if verified.get("ok") else "PROBLEM"]
    for key, label in _VERIFIED_LABELS.items():
        if key in verified:
            value = verified[key]
            parts.append(f"{label} {('yes' if value else 'no') if isinstance(value, bool) else value}")
    console.print(_text("verified: " + "; ".join(parts)))


def _statistics(console: Any, result: dict[str, Any]) -> None:
    stats = result.get("statistics")
    if stats is None:
        return
    of = "" if stats.get("of", "values") == "values" else f", of its {stats['of']}"
    table = _table(f"statistics: {stats['name']} ({stats['dtype']} {stats['shape']}{of})", "record", "value")
    for key in STATISTICS:
        table.add_row(key, str(stats[key]))
    console.print(table)
    counts, edges = stats["histogram"]["counts"], stats["histogram"]["edges"]
    peak = max(counts) if counts else 0
    if len(edges) == 2 and edges[0] == edges[1]:  # a constant tensor: one value, no interval
        console.print(f"  every finite value equals {edges[0]:.6g} ({counts[0]} values)", highlight=False)
        return
    for i, count in enumerate(counts):
        bar = "#" * (round(40 * count / peak) if peak else 0)
        console.print(f"  [{edges[i]: .4g}, {edges[i + 1]: .4g})  {count:6d} {bar}", highlight=False)


def _comparison(console: Any, result: dict[str, Any]) -> None:
    comparison = result.get("comparison")
    if comparison is None:
        return
    console.print(_text(f"comparison with {comparison['b']}: {len(comparison['changed'])} tensors differ, "
                        f"{comparison['unchanged']} equal"))
    table = _table("changed tensors", "file", "name", "status", "max |a-b|", "||a-b||/||a||", "||a||", "||b||")
    for t in comparison["tensors"]:
        if t["status"] != "same":
            figures = (t.get(key) for key in ("relative_change", "norm_a", "norm_b"))
            table.add_row(_text(t["file"]), _text(t["name"]), t["status"], str(t["max_abs_diff"]),
                          *("–" if f is None else f"{f:.6g}" for f in figures))
    console.print(table)
    table = _table("state records that differ", "group", "record", "a", "b")
    for d in comparison["state_differences"]:
        table.add_row(_text(d["group"]), _text(d["record"]), _short(console, d["a"], 36), _short(console, d["b"], 36))
    console.print(table)


SECTIONS: tuple[Callable[[Any, dict[str, Any]], None], ...] = (
    _files, _entries, _aliases, _state, _metadata, _integrity, _verified, _statistics, _comparison,
)


def print_inspection(result: dict[str, Any]) -> None:
    console = output_console(highlight=False)  # piped or redirected: room for every cell, nothing cut
    if "statistics" in result:  # --tensor NAME asks for that tensor's statistics (and a comparison) alone
        _statistics(console, result)
        _comparison(console, result)
        return
    for section in SECTIONS:
        section(console, result)
