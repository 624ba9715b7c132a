"""Parquet corpora: one record per row of a file's text column (``--text-field``), or of its
``messages`` column (chat records) when it has no text column. pyarrow reads them; it is an
optional extra (``pip install 'minigpt-tui[parquet]'``), imported only when a ``.parquet``
file is read, so a corpus without one never waits for it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from minigpt_tui.engine.core.errors import CorpusError
from minigpt_tui.engine.core.memory import require_memory
from minigpt_tui.engine.training.chat_data import MESSAGES

PARQUET_SUFFIX = ".parquet"
INSTALL = "pip install 'minigpt-tui[parquet]'"
SHOWN_COLUMNS = 8
SLICE_ROWS = 65_536  # rows turned into Python values at once
# Memory per row held as a record (a Python str and its place in the lists), and per byte
# of decoded text (the text as Arrow and as Python holds it, and its tokens later): an
# estimate from what the rows decode to, never from the file's (compressed) size.
ROW_BYTES = 120
DECODED_FACTOR = 8


def _pyarrow(path: Path) -> tuple[ModuleType, ModuleType]:
    """pyarrow and its Parquet module, or a one-line refusal saying how to install them."""
    try:
        # By name, at first use: the optional library is loaded only for a Parquet corpus.
        return importlib.import_module("pyarrow"), importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise CorpusError(f"{path}: reading Parquet files needs pyarrow, which is not installed: {INSTALL}") from None


@dataclass(frozen=True)
class ParquetRows:
    """Consecutive rows of one file's column: text values (``chat`` False) or chat records'
    messages; ``first`` is the 1-based number of the first row."""

    path: Path
    first: int
    chat: bool
    values: list[Any]

    def where(self, offset: int = 0) -> str:
        return f"{self.path} row {self.first + offset}"


def parquet_items(path: Path, data: bytes, field: str, *, slice_rows: int = SLICE_ROWS) -> Iterator[ParquetRows]:
    """The rows of the file's ``field`` column (text; an empty one is skipped by the
    caller), else of its ``messages`` column (chat records, as lists and objects), in
    pieces of at most ``slice_rows`` rows. The memory the rows take is checked first from
    the file's metadata (row counts, uncompressed sizes), then from each row group as it
    is decoded, before any of its rows becomes Python values. A file pyarrow cannot read,
    a missing column, a column that is not text and a row without a value are refused in
    one line naming the file (and the row)."""
    pa, pq = _pyarrow(path)
    with _readable(pa, path):
        file = pq.ParquetFile(pa.BufferReader(data))
        names = file.schema_arrow.names
        column = field if field in names else MESSAGES if MESSAGES in names else None
        if column is None:
            raise CorpusError(f"{path}: no column '{field}' (--text-field names another; its columns: "
                              f"{_shown(names)})")
        kind = file.schema_arrow.field(column).type
        if column == field and not _is_text(pa, kind):
            raise CorpusError(f"{path}: the column '{field}' holds {kind}, not text")
        metadata = file.metadata
        require_memory(_row_bytes(metadata.num_rows) + DECODED_FACTOR * _stored_bytes(metadata, column),
                       f"reading the {metadata.num_rows:,} rows of {path}")
    first = 1
    for group in range(metadata.num_row_groups):
        with _readable(pa, path):
            values = file.read_row_group(group, columns=[column]).column(0)
        require_memory(_row_bytes(len(values)) + DECODED_FACTOR * _decoded_bytes(pa, values),
                       f"reading row group {group + 1} of {path} ({len(values):,} rows)")
        _refuse_null(values, path, column, first)
        for start in range(0, len(values), slice_rows):
            piece = values.slice(start, slice_rows)
            yield ParquetRows(path, first + start, column != field, piece.to_pylist())
        first += len(values)


@contextmanager
def _readable(pa: ModuleType, path: Path) -> Iterator[None]:
    """What pyarrow cannot read, as one line naming the file."""
    try:
        yield
    except (pa.ArrowException, OSError, ValueError) as err:  # ArrowInvalid is a ValueError too
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise CorpusError(f"{path}: not a readable Parquet file ({first})") from None


def _row_bytes(rows: int) -> int:
    return rows * ROW_BYTES


def _stored_bytes(metadata: Any, column: str) -> int:
    """The uncompressed bytes the file's metadata gives for ``column`` (all its leaves)."""
    total = 0
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in range(row_group.num_columns):
            chunk = row_group.column(index)
            if chunk.path_in_schema.split(".")[0] == column:
                total += max(0, chunk.total_uncompressed_size)
    return total


def _decoded_bytes(pa: ModuleType, values: Any) -> int:
    """The bytes ``values`` hold decoded: a dictionary column counts each row's own text."""
    if pa.types.is_dictionary(values.type):
        import pyarrow.compute as pc  # deferred: off the first frame (with pyarrow itself)

        lengths = pc.binary_length(values.combine_chunks().dictionary)
        total = 0
        for chunk in values.chunks:
            total += int(pc.sum(pc.take(lengths, chunk.indices)).as_py() or 0)
        return total
    return int(values.nbytes)


def _refuse_null(values: Any, path: Path, column: str, first: int) -> None:
    if not values.null_count:
        return
    offset = 0
    for chunk in values.chunks:
        if chunk.null_count:
            row = next(i for i, valid in enumerate(chunk.is_valid().to_pylist()) if not valid)
            raise CorpusError(f"{path} row {first + offset + row}: the column '{column}' has no value (null)")
        offset += len(chunk)


def _is_text(pa: ModuleType, kind: Any) -> bool:
    """Text, also as a dictionary of texts (a categorical column, read back as its texts)."""
    types = pa.types
    if types.is_dictionary(kind):
        kind = kind.value_type
    return bool(types.is_string(kind) or types.is_large_string(kind)
                or (hasattr(types, "is_string_view") and types.is_string_view(kind)))


def _shown(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN_COLUMNS]) or "none"
    return shown + (f" and {len(names) - SHOWN_COLUMNS} more" if len(names) > SHOWN_COLUMNS else "")
