"""The source index: what a corpus file's bytes were found to hold, so a restart needs no parse.

One small JSON file per (corpus bytes, split rule) in the token cache's ``sources/`` folder
maps the SHA-256 of a file or folder corpus (see :func:`corpus.source_fingerprint`) to the
corpus identity and record counts computed from its records the first time. It is written
only once that corpus's token arrays are in the cache (a refused corpus leaves nothing), to
a temporary name renamed into place. Each file carries the SHA-256 of its own content: a
file that fails that check, or names other bytes or another rule, is removed and ignored
(the corpus is then read and split again, and the file rewritten), never trusted.

Torch-free: the corpus loader consults it before anything heavy is imported.
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs

from minigpt_tui.engine.core.errors import InputRefused
from minigpt_tui.engine.core.files import read_small_file
from minigpt_tui.engine.formats.bounded_json import load_json

if TYPE_CHECKING:
    from minigpt_tui.engine.training.corpus import Corpus


@dataclass(frozen=True)
class CorpusCounts:
    """What the rest of the product needs to know about a corpus without its records."""

    identity: str
    records: int
    train_records: int
    validation_records: int


@dataclass(frozen=True)
class SourceFingerprint:
    """The SHA-256 of a file or folder corpus's bytes (each file length-prefixed, in
    reading order) and the split rule applied to it: together they decide every record."""

    digest: str
    size: int
    val_every: int


CACHE_ENV = "MINIGPT_TUI_CACHE_DIR"
SOURCES = "sources"  # the index's folder inside the cache root
INDEX_FORMAT = "minigpt-tui-source-index-v1"
INDEX_FILE_LIMIT = 64 << 10  # an index file is a few hundred bytes
# Names how parse_records turns bytes into records: a change to that rule must change it.
RECORD_RULE = "utf8; blank-line paragraphs if any inner blank line, else non-blank lines; rstrip"


def default_cache_dir() -> Path:
    return platformdirs.user_cache_path("minigpt-tui", appauthor=False) / "tokens"


def resolve_cache_dir(cache_dir: str | Path | None = None) -> Path:
    if cache_dir:
        return Path(cache_dir).expanduser()
    from_env = os.environ.get(CACHE_ENV)
    return Path(from_env).expanduser() if from_env else default_cache_dir()


def _read_stored(path: Path) -> dict[str, Any] | None:
    """The index file's JSON object; None when it is not one (then removed)."""
    try:  # input like any other: a regular file of bounded size, bounded JSON
        stored = load_json(read_small_file(path, INDEX_FILE_LIMIT, "source index file").decode("utf-8"), 8)
    except (InputRefused, ValueError):
        _discard(path)
        return None
    if not isinstance(stored, dict):
        _discard(path)
        return None
    return stored


def _counts_in_range(counts: CorpusCounts) -> bool:
    """A 64-digit identity, counts that are natural numbers, some training records, and
    the two splits adding up to the whole."""
    return (isinstance(counts.identity, str) and len(counts.identity) == 64
            and all(isinstance(n, int) and n >= 0 for n in
                    (counts.records, counts.train_records, counts.validation_records))
            and counts.train_records > 0
            and counts.train_records + counts.validation_records == counts.records)


def _discard(path: Path) -> None:
    with suppress(OSError):
        path.unlink(missing_ok=True)


def _self_check(fields: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


class SourceIndex:
    def __init__(self, root: Path) -> None:
        self.folder = root / SOURCES

    @staticmethod
    def at(cache_dir: str | Path | None = None) -> SourceIndex:
        return SourceIndex(resolve_cache_dir(cache_dir))

    def _file(self, fingerprint: SourceFingerprint) -> Path:
        key = f"{INDEX_FORMAT}\0{RECORD_RULE}\0{fingerprint.val_every}\0{fingerprint.digest}"
        return self.folder / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"

    def _fields(self, fingerprint: SourceFingerprint) -> dict[str, object]:
        return {"format": INDEX_FORMAT, "record_rule": RECORD_RULE, "source_sha256": fingerprint.digest,
                "source_bytes": fingerprint.size, "val_every": fingerprint.val_every}

    def lookup(self, fingerprint: SourceFingerprint) -> CorpusCounts | None:
        """The counts recorded for these bytes; None when absent or damaged (then removed)."""
        path = self._file(fingerprint)
        if not os.path.lexists(path):
            return None
        stored = _read_stored(path)
        if stored is None:
            return None
        try:
            return self._checked_counts(stored, fingerprint)
        except (KeyError, TypeError, ValueError, AttributeError):
            _discard(path)
            return None

    def _checked_counts(self, stored: dict[str, Any], fingerprint: SourceFingerprint) -> CorpusCounts:
        """The counts of a stored record, refused (ValueError) when it is damaged, about
        other bytes, or its counts are out of range."""
        check = stored.pop("check")
        counts = CorpusCounts(**stored.pop("corpus"))
        fields = {**self._fields(fingerprint), "source": stored.get("source")}
        if check != _self_check({**stored, "corpus": asdict(counts)}) or stored != fields:
            raise ValueError("damaged or about other bytes")
        if not _counts_in_range(counts):
            raise ValueError("counts out of range")
        return counts

    def remember(self, corpus: Corpus) -> None:
        """Record a corpus read from its records (best effort: the index only saves time)."""
        if corpus.fingerprint is None or corpus.from_index:
            return
        counts = corpus.counts
        stored: dict[str, object] = {**self._fields(corpus.fingerprint), "source": corpus.source,
                                     "corpus": asdict(counts)}
        stored["check"] = _self_check(stored)
        path = self._file(corpus.fingerprint)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps(stored, indent=2), "utf-8")
            os.replace(temporary, path)
        except OSError:
            _discard(temporary)

    def files(self) -> list[Path]:
        return sorted(self.folder.glob("*.json")) if self.folder.is_dir() else []
