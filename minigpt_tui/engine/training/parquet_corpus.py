"""Parquet corpora: one record per row of a file's text column (``--text-field``), or of its
``messages`` column (chat records) when it has no text column. pyarrow reads them; it is an
optional extra (``pip install 'minigpt-tui[parquet]'``), imported only when a ``.parquet``
file is read, so a corpus without one never waits for it.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

from minigpt_tui.engine.core.errors import CorpusError
from minigpt_tui.engine.training.chat_data import MESSAGES

PARQUET_SUFFIX = ".parquet"
INSTALL = "pip install 'minigpt-tui[parquet]'"
SHOWN_COLUMNS = 8


def _pyarrow(path: Path) -> tuple[ModuleType, ModuleType]:
    """pyarrow and its Parquet module, or a one-line refusal saying how to install them."""
    try:
        # By name, at first use: the optional library is loaded only for a Parquet corpus.
        return importlib.import_module("pyarrow"), importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise CorpusError(f"{path}: reading Parquet files needs pyarrow, which is not installed: {INSTALL}") from None


def parquet_items(path: Path, data: bytes, field: str) -> list[tuple[str, bool, Any]]:
    """(where, chat, value) of each row: its ``field`` (text; an empty one is skipped by the
    caller), else its ``messages`` (a chat record, as lists and objects). A file pyarrow
    cannot read, a missing column, a column that is not text and a row without a value
    are refused in one line naming the file (and the row)."""
    pa, pq = _pyarrow(path)
    try:
        table = pq.ParquetFile(pa.BufferReader(data))
        names = table.schema_arrow.names
        column = field if field in names else MESSAGES if MESSAGES in names else None
        if column is None:
            raise CorpusError(f"{path}: no column '{field}' (--text-field names another; its columns: "
                              f"{_shown(names)})")
        values = table.read(columns=[column]).column(0)
    except (pa.ArrowException, OSError, ValueError) as err:  # ArrowInvalid is a ValueError too
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise CorpusError(f"{path}: not a readable Parquet file ({first})") from None
    if column == field and not _is_text(pa, values.type):
        raise CorpusError(f"{path}: the column '{field}' holds {values.type}, not text")
    items = []
    for number, value in enumerate(values.to_pylist(), start=1):
        if value is None:
            raise CorpusError(f"{path} row {number}: the column '{column}' has no value (null)")
        items.append((f"{path} row {number}", column != field, value))
    return items


def _is_text(pa: ModuleType, kind: Any) -> bool:
    types = pa.types
    return bool(types.is_string(kind) or types.is_large_string(kind)
                or (hasattr(types, "is_string_view") and types.is_string_view(kind)))


def _shown(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN_COLUMNS]) or "none"
    return shown + (f" and {len(names) - SHOWN_COLUMNS} more" if len(names) > SHOWN_COLUMNS else "")
