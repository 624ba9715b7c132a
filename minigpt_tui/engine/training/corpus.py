"""Corpus records, their deterministic train/validation split, and the corpus identity.

A file or folder corpus in stream mode is first looked up in the source index
(:mod:`minigpt_tui.engine.training.source_index`) by the SHA-256 of its bytes: when an intact index
entry exists, the corpus's identity and record counts are known without decoding or
splitting anything, and the records are read only if something asks for them (a records-mode
trainer, merge training). A restart on a large text that the token cache already holds
therefore costs one hash of the file, not one Python object per record.

A corpus is text files (records are lines or paragraphs), JSON Lines files (``.jsonl``: one
record per object, its text field), Parquet files (``.parquet``: one record per row of its
text column; pyarrow reads them) or a folder of them. A record of a ``.jsonl`` or ``.parquet``
file without the text field but with ``messages`` is a chat record, rendered with the run's
chat template (:mod:`minigpt_tui.engine.training.chat_data`); a corpus holds text records or
chat records, not both.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.config import CorpusConfig
from minigpt_tui.engine.core.errors import CorpusError
from minigpt_tui.engine.core.files import (
    path_exists,
    require_file_or_folder,
    require_regular_file,
)
from minigpt_tui.engine.core.memory import require_memory
from minigpt_tui.engine.formats.bounded_json import JSONRefused, load_json
from minigpt_tui.engine.training.chat_data import (
    MESSAGES,
    ChatRenderer,
    ChatTurns,
    chat_reading_key,
    chat_renderer,
)
from minigpt_tui.engine.training.parquet_corpus import PARQUET_SUFFIX, ParquetRows, parquet_items
from minigpt_tui.engine.training.source_index import (
    CorpusCounts,
    SourceFingerprint,
    SourceIndex,
)

TRAIN = "train"
VALIDATION = "validation"
IDENTITY_SCHEME = b"minigpt-tui-corpus-v1\0"
CHAT_IDENTITY_SCHEME = b"minigpt-tui-chat-corpus-v1\0"
IDENTITY_CHUNK = 65_536  # records hashed per joined update: bounds the bytes held at once


@dataclass(frozen=True)
class Record:
    text: str
    split: str
    index: int  # position in source order, 0-based


@dataclass(frozen=True)
class Records:
    """A corpus's record texts in source order. ``chat`` (for chat records) is what decided
    their rendering (:func:`chat_reading_key`); ``turns``, with ``--train-on assistant``,
    each record's assistant turns."""

    texts: list[str]
    chat: bytes | None = None
    turns: list[ChatTurns] | None = None


@dataclass(frozen=True, eq=False)
class Corpus:
    """A corpus's records in source order, split by ``val_every``. The records come from
    ``read`` on first use; ``known`` (from the source index) answers identity and counts
    without them; ``fingerprint`` is set for file and folder corpora."""

    source: str
    val_every: int
    read: Callable[[], Records] = field(repr=False)
    known: CorpusCounts | None = None
    fingerprint: SourceFingerprint | None = None

    @staticmethod
    def of_texts(texts: Sequence[str], source: str, val_every: int) -> Corpus:
        held = Records(list(texts))
        return Corpus(source, val_every, lambda: held)

    @cached_property
    def _records(self) -> Records:
        return self.read()

    @property
    def texts(self) -> list[str]:
        return self._records.texts

    @property
    def chat(self) -> bool:
        """Whether the records are chat records (rendered with a template, encoded as rendered)."""
        return self._records.chat is not None

    @cached_property
    def records(self) -> tuple[Record, ...]:
        return split_records(self.texts, self.val_every)

    @cached_property
    def train(self) -> list[str]:
        return _training_part(self.texts, self.val_every)

    @cached_property
    def validation(self) -> list[str]:
        return self.texts[self.val_every - 1 :: self.val_every] if self.val_every else []

    @cached_property
    def turns(self) -> tuple[list[ChatTurns], list[ChatTurns]] | None:
        """With ``--train-on assistant``, the assistant turns of the training and the validation records."""
        turns = self._records.turns
        if turns is None:
            return None
        return _training_part(turns, self.val_every), turns[self.val_every - 1 :: self.val_every] if self.val_every else []

    @cached_property  # every checkpoint save and load asks
    def counts(self) -> CorpusCounts:
        if self.known is not None:
            return self.known
        validation = len(self.texts) // self.val_every if self.val_every else 0
        records = self._records
        identity = corpus_identity(self.texts, self.val_every, records.chat, records.turns)
        return CorpusCounts(identity, len(self.texts), len(self.texts) - validation, validation)

    @property
    def identity(self) -> str:
        return self.counts.identity

    @property
    def from_index(self) -> bool:
        return self.known is not None

    def summary(self) -> dict[str, object]:
        counts = self.counts
        return {
            "source": self.source,
            "records": counts.records,
            "train_records": counts.train_records,
            "validation_records": counts.validation_records,
            "split_rule": (
                f"record i (1-based) is validation when i % {self.val_every} == 0"
                if self.val_every
                else "no validation split"
            ),
            "identity": counts.identity,
        }


def _training_part(items: list[Any], val_every: int) -> list[Any]:
    kept = list(items)
    if val_every:
        del kept[val_every - 1 :: val_every]
    return kept


def corpus_identity(texts: Sequence[str], val_every: int, chat: bytes | None = None,
                    turns: Sequence[ChatTurns] | None = None) -> str:
    """SHA-256 over each record's split and exact UTF-8 bytes, in order, length-prefixed;
    for chat records also over what decided their rendering (the template, the tokens the
    loss counts) and each record's assistant turns."""
    digest = hashlib.sha256(IDENTITY_SCHEME if chat is None else CHAT_IDENTITY_SCHEME + chat)
    tags = (TRAIN.encode() + b"\0", VALIDATION.encode() + b"\0")
    for start in range(0, len(texts), IDENTITY_CHUNK):
        parts: list[bytes] = []
        for number, data in enumerate(map(str.encode, texts[start : start + IDENTITY_CHUNK]), start + 1):
            parts += (tags[bool(val_every) and number % val_every == 0], len(data).to_bytes(8, "little"), data)
            if turns is not None:
                spans = turns[number - 1].spans
                parts += (len(spans).to_bytes(8, "little"),
                          b"".join(a.to_bytes(8, "little") + b.to_bytes(8, "little") for a, b in spans))
        digest.update(b"".join(parts))
    return digest.hexdigest()


def split_records(texts: Sequence[str], val_every: int) -> tuple[Record, ...]:
    return tuple(
        Record(text, VALIDATION if val_every and (i + 1) % val_every == 0 else TRAIN, i)
        for i, text in enumerate(texts)
    )


def parse_records(text: str) -> list[str]:
    """Blank-line separated paragraphs when the text has a blank line, else one per line."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if _has_inner_blank(lines):
        records, current = [], []
        for line in lines:
            if line.strip():
                current.append(line.rstrip())
            elif current:
                records.append("\n".join(current))
                current = []
        if current:
            records.append("\n".join(current))
        return records
    return [line.rstrip() for line in lines if line.strip()]


def _has_inner_blank(lines: list[str]) -> bool:
    seen_text = False
    blank_after_text = False
    for line in lines:
        if line.strip():
            if blank_after_text:
                return True
            seen_text = True
        elif seen_text:
            blank_after_text = True
    return False


READING_FACTOR = 8  # peak memory of reading and encoding a text, in multiples of its bytes (measured)


def _read_bytes(path: Path) -> bytes:
    require_regular_file(path, "a corpus file")  # a FIFO or /dev/zero would never end
    try:
        # Without blocking: a kernel file that looks regular but waits for data (/proc/kmsg)
        # is refused instead of hanging the run.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            size = os.fstat(fd).st_size
            chunks, total = [], 0
            while True:
                chunk = os.read(fd, max(1 << 20, size - total))
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
                total += len(chunk)
        finally:
            os.close(fd)
    except BlockingIOError:
        raise CorpusError(f"corpus file {path} waits for data that may never come (a device or kernel file); "
                          "refused") from None
    except OSError as err:
        raise CorpusError(f"cannot read corpus file {path}: {err.strerror or err}") from None


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorpusError(f"corpus file {path} is not UTF-8 text (byte {err.start})") from None


def _source_files(source: str, follow_links: bool = False) -> list[Path]:
    """The files a path corpus reads, in order (a folder: its visible files by name). A link
    in a folder that leads out of it (to ``/etc/passwd``, say) is refused unless
    ``follow_links``: a corpus is what was named, not what its links reach."""
    path = Path(source).expanduser()
    if not path_exists(path):
        raise CorpusError(f"corpus not found: {path}")
    require_file_or_folder(path, "a corpus file or folder")
    if not path.is_dir():
        return [path]
    files = _folder_files(path, follow_links)
    if not files:
        raise CorpusError(f"corpus folder {path} has no text files")
    return files


def _folder_files(path: Path, follow_links: bool) -> list[Path]:
    """A corpus folder's visible files by name, a link out of it refused unless ``follow_links``."""
    try:
        entries = sorted(p for p in path.iterdir() if not p.name.startswith("."))
        inside = path.resolve()
        files = []
        for entry in entries:
            if entry.is_symlink() and not follow_links:
                _refuse_outside_link(path, entry, inside)
            if entry.is_file():
                files.append(entry)
    except OSError as err:
        raise CorpusError(f"cannot read the corpus folder {path}: {err.strerror or err}") from None
    return files


def _refuse_outside_link(path: Path, entry: Path, inside: Path) -> None:
    """Refuse a link in the corpus folder that leads out of it."""
    target = entry.resolve()
    if not target.is_relative_to(inside):
        raise CorpusError(f"corpus folder {path}: {entry.name} is a link to {target}, outside the folder; "
                          "refused (--follow-links reads it)")


def source_fingerprint(contents: Sequence[bytes], val_every: int, text_field: str | None = None,
                       chat: bytes | None = None) -> SourceFingerprint:
    """The bytes' SHA-256 (with the field read, for a corpus with JSON Lines or Parquet
    files, and what renders its chat records, where that is not the default)."""
    digest = hashlib.sha256(b"minigpt-tui-source-v1\0")
    if text_field is not None:
        digest.update(b"jsonl-field\0" + text_field.encode("utf-8") + b"\0")
    if chat is not None:
        digest.update(chat + b"\0")
    for data in contents:
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)  # hashlib releases the GIL on large buffers
    return SourceFingerprint(digest.hexdigest(), sum(map(len, contents)), val_every)


JSONL_SUFFIX = ".jsonl"
STRUCTURED_SUFFIXES = (JSONL_SUFFIX, PARQUET_SUFFIX)  # files of records with fields


class _Gathering:
    """The records of a corpus's files in order: text records, or chat records rendered as
    they come (a corpus mixing both is refused, naming the first record of the other kind)."""

    def __init__(self, config: CorpusConfig) -> None:
        self.config = config
        self.texts: list[str] = []
        self.turns: list[ChatTurns] = []
        self.renderer: ChatRenderer | None = None
        self.first_text: str | None = None  # where the first text record is
        self.first_chat: str | None = None

    def add_texts(self, where: str, texts: list[str], first_number: int | None = None) -> None:
        """``texts`` from ``where``; with ``first_number``, ``where`` holds several records,
        the first of them numbered so (an error names the one it is about)."""
        _refuse_long_records(where, texts, first_number)
        if texts and self.first_text is None:
            self.first_text = where
            self._refuse_mixing(where)
        self.texts += texts

    def add_items(self, items: list[tuple[str, bool, Any]]) -> None:
        """Items from a structured file: (where, False, text) or (where, True, messages)."""
        for where, chat, value in items:
            if chat:
                self._add_chat(where, value)
            else:
                self.add_texts(where, [value] if value.strip() else [])

    def add_rows(self, rows: ParquetRows) -> None:
        """Rows of a Parquet file: texts (blank ones skipped) or chat records."""
        if rows.chat:
            for offset, messages in enumerate(rows.values):
                self._add_chat(rows.where(offset), messages)
            return
        _refuse_long_records(str(rows.path), rows.values, rows.first, "row")
        kept = [value for value in rows.values if value.strip()]
        if kept:
            first = next(offset for offset, value in enumerate(rows.values) if value.strip())
            self.add_texts(rows.where(first), kept)

    def _add_chat(self, where: str, messages: Any) -> None:
        if self.renderer is None:
            self.first_chat = where
            self._refuse_mixing(where)
            self.renderer = chat_renderer(self.config, where)
        text, turns = self.renderer.record(where, messages)
        _refuse_long_records(where, [text])
        self.texts.append(text)
        if turns is not None:
            self.turns.append(turns)

    def _refuse_mixing(self, where: str) -> None:
        if self.first_text is not None and self.first_chat is not None:
            first = self.first_chat if where == self.first_text else self.first_text
            raise CorpusError(f"{where}: the corpus mixes chat records ('{MESSAGES}') and text records (the first "
                              f"of the other kind: {first}); give each kind as its own corpus")

    def records(self, source: str) -> Records:
        if self.renderer is None:
            if self.config.train_on != "all" and self.texts:
                raise CorpusError(f"corpus {source} has no chat records ('{MESSAGES}'): --train-on assistant "
                                  "counts the assistant's turns of chat records; use --train-on all")
            return Records(self.texts)
        turns = self.turns if self.config.train_on != "all" else None
        return Records(self.texts, chat_reading_key(self.config) or b"", turns)


# Characters one record may hold: a tokenizer takes about 90 bytes per character of a record
# at its peak (measured: learning merges, and the tokenizers library encoding one record as
# one word), so a longer record would exhaust memory or abort inside the library.
RECORD_CHARS_LIMIT = 1 << 23


def _refuse_long_records(where: str, texts: Sequence[str], first_number: int | None = None,
                         unit: str = "record") -> None:
    if not texts or max(map(len, texts)) <= RECORD_CHARS_LIMIT:
        return
    index = next(i for i, text in enumerate(texts) if len(text) > RECORD_CHARS_LIMIT)
    named = f"{where} {unit} {first_number + index}" if first_number is not None else where
    raise CorpusError(f"{named}: a record of {len(texts[index]):,} characters, more than one record may hold "
                      f"({RECORD_CHARS_LIMIT:,}); split it into shorter records (lines, paragraphs or JSON Lines "
                      "objects)")


def _records_of(files: Sequence[Path], contents: Sequence[bytes], config: CorpusConfig) -> Records:
    gathering = _Gathering(config)
    for path, data in zip(files, contents):
        if path.suffix == PARQUET_SUFFIX:
            for rows in parquet_items(path, data, config.text_field):
                gathering.add_rows(rows)
        elif path.suffix == JSONL_SUFFIX:
            gathering.add_items(jsonl_items(path, _decode(path, data), config.text_field))
        else:
            gathering.add_texts(str(path), parse_records(_decode(path, data)), 1)
    return gathering.records(config.source)


JSONL_DEPTH = 128  # nesting a record may have: deeper is refused before the parser recurses


def jsonl_items(path: Path, text: str, field: str) -> list[tuple[str, bool, Any]]:
    """(where, chat, value) of each JSON Lines object: its ``field`` (a string), else its
    ``messages`` (a chat record); blank lines are skipped. A line that is neither names its
    file and line number. Lines end at "\n" only, as JSON Lines defines them: a U+2028 or
    U+0085 inside a string is text, not a line end."""
    items: list[tuple[str, bool, Any]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            item = load_json(line, JSONL_DEPTH)
        except JSONRefused as err:
            raise CorpusError(f"{where}: not JSON ({err})") from None
        if isinstance(item, dict) and field not in item and MESSAGES in item:
            items.append((where, True, item[MESSAGES]))
            continue
        if not isinstance(item, dict) or field not in item:
            raise CorpusError(f"{where}: no field '{field}' (--text-field names another)")
        value = item[field]
        if not isinstance(value, str):
            raise CorpusError(f"{where}: the field '{field}' is {type(value).__name__}, not text")
        items.append((where, False, value))
    return items


def _structured_field(files: Sequence[Path], field: str) -> str | None:
    return field if any(path.suffix in STRUCTURED_SUFFIXES for path in files) else None


def _checked(corpus: Corpus) -> Corpus:
    if not corpus.texts:
        raise CorpusError(f"corpus {corpus.source} has no records")
    if not corpus.train:
        raise CorpusError(f"corpus {corpus.source} has no training records")
    return corpus


def load_corpus(config: CorpusConfig, cache_dir: str | Path | None = None) -> Corpus:
    """The corpus ``config`` names, checked. In stream mode a file or folder corpus whose
    bytes the source index knows is returned without reading its records."""
    source = config.source
    if source.startswith("bundled:"):
        name = source.removeprefix("bundled:")
        asset = resources.files("minigpt_tui").joinpath(f"assets/corpus/{name}")
        if not asset.is_file():
            raise CorpusError(f"no bundled corpus named '{name}'")
        texts = parse_records(asset.read_text("utf-8"))
        if config.train_on != "all":
            raise CorpusError(f"corpus {source} has no chat records ('{MESSAGES}'): --train-on assistant counts the "
                              "assistant's turns of chat records; use --train-on all")
        return _checked(Corpus.of_texts(texts, source, config.val_every))
    files = _source_files(source, config.follow_links)
    contents = [_read_bytes(path) for path in files]
    fingerprint = None
    if config.mode == "stream":  # records mode reads every record anyway: no index
        structured = _structured_field(files, config.text_field)
        chat = chat_reading_key(config) if structured is not None else None
        fingerprint = source_fingerprint(contents, config.val_every, structured, chat)
        known = SourceIndex.at(cache_dir).lookup(fingerprint)
        if known is not None:
            del contents  # the records are read again only if something asks for them

            def read_again() -> Records:
                again = [_read_bytes(path) for path in files]
                if source_fingerprint(again, config.val_every, structured, chat) != fingerprint:
                    raise CorpusError(f"corpus {source} changed while it was in use; start again")
                return _records_of(files, again, config)

            return Corpus(source, config.val_every, read_again, known, fingerprint)

    # Records, their token arrays and the passes between take about this many times the
    # text's bytes at their peak: a text too large for memory is refused before, not killed in.
    require_memory(READING_FACTOR * sum(map(len, contents)), f"reading the corpus {source}")
    records = _records_of(files, contents, config)
    del contents
    return _checked(Corpus(source, config.val_every, lambda: records, fingerprint=fingerprint))


class CorpusLoading:
    """:func:`load_corpus` on a background thread, so reading and hashing a large file
    overlap other start-up work (hashlib and file reads release the GIL). :meth:`result`
    waits and returns the corpus or raises its error. The thread is a daemon: Ctrl+C in
    the meantime never waits for it, and it writes nothing."""

    def __init__(self, config: CorpusConfig) -> None:
        self._outcome: list[Corpus | BaseException] = []
        self._thread = threading.Thread(target=self._load, args=(config,), name="corpus-loading", daemon=True)
        self._thread.start()

    def _load(self, config: CorpusConfig) -> None:
        try:
            self._outcome.append(load_corpus(config))
        except BaseException as err:  # handed to the caller of result()
            self._outcome.append(err)

    def result(self) -> Corpus:
        self._thread.join()
        outcome = self._outcome[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome
