"""Encoded token arrays kept between runs, one entry per (corpus, tokenizer) identity.

An entry is a folder named after the two identities holding ``train.npy``,
``validation.npy`` (with ``--train-on assistant`` also ``train_mask.npy`` and
``validation_mask.npy``, the targets the loss counts) and ``entry.json`` (identities, source,
sizes, the SHA-256 of every 16 MiB block of each array file). It is written in a temporary folder and renamed into
place, so an interrupted write leaves no entry. A read checks every block's hash first, on
parallel threads (hashlib releases the GIL), then maps the arrays from disk: a damaged entry
is removed and rebuilt, never used. The default place is platformdirs' user cache dir; the
``MINIGPT_TUI_CACHE_DIR`` environment variable overrides it. The cache root also holds the
source index (``sources/``, see :mod:`minigpt_tui.engine.training.source_index`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from minigpt_tui.engine.core.errors import CacheError, InputRefused
from minigpt_tui.engine.core.files import process_alive, read_small_file, shorten_middle
from minigpt_tui.engine.formats.bounded_json import load_json
from minigpt_tui.engine.training.source_index import (
    CACHE_ENV,
    SOURCES,
    default_cache_dir,
    resolve_cache_dir,
)
from minigpt_tui.engine.training.stream import READING_CACHE, Progress, TokenStream

__all__ = ["CACHE_ENV", "TokenCache", "cached_stream", "default_cache_dir", "entry_key", "resolve_cache_dir"]

ENTRY_FORMAT = "minigpt-tui-token-cache-v2"
KNOWN_FORMATS = ("minigpt-tui-token-cache-v1", ENTRY_FORMAT)  # v1 entries are rebuilt on use
ENTRY_FILE = "entry.json"
SPLIT_FILES = {"train": "train.npy", "validation": "validation.npy"}
MASK_FILES = {"train_mask": "train_mask.npy", "validation_mask": "validation_mask.npy"}
ENTRY_FILES = frozenset({ENTRY_FILE, *SPLIT_FILES.values(), *MASK_FILES.values()})
ENTRY_RECORD_LIMIT = 1 << 20  # an entry record is a few kilobytes even for a 100 GB corpus
TAG_FILE = "CACHEDIR.TAG"
TAG_TEXT = ("Signature: 8a477f597d28d172789f06886806bc55\n"
            "# This file is a cache directory tag created by minigpt-tui (its token cache).\n"
            "# For information about cache directory tags see https://bford.info/cachedir/\n")
_KEY = re.compile(r"[0-9a-f]{32}")
_PARTIAL = re.compile(r"\.partial-([0-9a-f]{32})-(\d+)(?:-[0-9a-f]{8})?")
HASH_BLOCK = 1 << 24
WRITING = "writing the token cache"


def entry_key(corpus_identity: str, tokenizer_identity: str, entry_format: str = ENTRY_FORMAT) -> str:
    text = f"{entry_format}\0{corpus_identity}\0{tokenizer_identity}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def read_entry_record(folder: Path) -> dict[str, object]:
    """An entry's record, read as untrusted input: a regular file of bounded size, bounded
    JSON, an object of our format whose identities give the folder's own name. ValueError
    (or :class:`InputRefused`, a ValueError too) names what is wrong."""
    raw = read_small_file(folder / ENTRY_FILE, ENTRY_RECORD_LIMIT, "token cache record")
    record = load_json(raw.decode("utf-8", errors="strict"), 8)
    if not isinstance(record, dict) or record.get("format") not in KNOWN_FORMATS:
        raise ValueError("not a token cache record")
    corpus, tokenizer = record.get("corpus_identity"), record.get("tokenizer_identity")
    if not (isinstance(corpus, str) and isinstance(tokenizer, str)):
        raise ValueError("the record names no identities")
    if entry_key(corpus, tokenizer, str(record["format"])) != folder.name:
        raise ValueError("the record's identities are not the folder's")
    return record


def _only_entry_files(folder: Path) -> bool:
    """Whether ``folder`` (not a link) holds nothing but regular files an entry writes."""
    try:
        if folder.is_symlink() or not folder.is_dir():
            return False
        return all(child.name in ENTRY_FILES and child.is_file() and not child.is_symlink()
                   for child in folder.iterdir())
    except OSError:
        return False


def _size_of(folder: Path) -> int:
    try:
        return sum(child.lstat().st_size for child in folder.iterdir())
    except OSError:
        return 0


def _remove_entry_folder(folder: Path) -> bool:
    """Remove an entry or partial folder file by file (only the names an entry writes),
    then the folder itself; whatever else is in it stays, and the folder with it."""
    try:
        for name in ENTRY_FILES:
            (folder / name).unlink(missing_ok=True)
        folder.rmdir()
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class CacheEntry:
    key: str
    path: Path
    source: str
    corpus_identity: str
    tokenizer_identity: str
    train_tokens: int
    validation_tokens: int
    dtype: str
    bytes: int
    created: float
    intact: bool  # every file present and its record readable (hashes are checked on use)

    def to_json(self) -> dict[str, object]:
        return {
            "key": self.key,
            "path": str(self.path),
            "source": self.source,
            "corpus_identity": self.corpus_identity,
            "tokenizer_identity": self.tokenizer_identity,
            "train_tokens": self.train_tokens,
            "validation_tokens": self.validation_tokens,
            "dtype": self.dtype,
            "bytes": self.bytes,
            "created": self.created,
            "intact": self.intact,
        }


def _hash_threads() -> int:
    try:
        return max(1, min(4, len(os.sched_getaffinity(0))))
    except AttributeError:  # not on every platform
        return max(1, min(4, os.cpu_count() or 1))


def _block_hashes(paths: list[Path]) -> dict[str, list[str]]:
    """The SHA-256 of every HASH_BLOCK bytes of each file, by file name; the blocks of all
    files are hashed on parallel threads."""
    sizes = {path: path.stat().st_size for path in paths}
    jobs = [(path, offset) for path in paths for offset in range(0, max(sizes[path], 1), HASH_BLOCK)]
    handles = {path: os.open(path, os.O_RDONLY) for path in paths}
    try:
        def block(job: tuple[Path, int]) -> str:
            path, offset = job
            return hashlib.sha256(os.pread(handles[path], HASH_BLOCK, offset)).hexdigest()

        with ThreadPoolExecutor(max_workers=min(_hash_threads(), len(jobs))) as pool:
            digests = list(pool.map(block, jobs))
    finally:
        for handle in handles.values():
            os.close(handle)
    found: dict[str, list[str]] = {path.name: [] for path in paths}
    for (path, _), digest in zip(jobs, digests):
        found[path.name].append(digest)
    return found


def _array_files(masked: bool) -> dict[str, str]:
    """The array files of an entry by the stream's field: the splits, and their masks."""
    return {**SPLIT_FILES, **(MASK_FILES if masked else {})}


def _mapped(folder: Path, dtype: str, masked: bool = False) -> TokenStream:
    arrays = {split: np.load(folder / name, mmap_mode="r", allow_pickle=False)
              for split, name in _array_files(masked).items()}
    if any(arrays[split].ndim != 1 or arrays[split].dtype.name != dtype for split in SPLIT_FILES):
        raise ValueError("array layout differs")
    if masked and any(arrays[f"{split}_mask"].shape != arrays[split].shape or arrays[f"{split}_mask"].dtype != np.uint8
                      for split in SPLIT_FILES):
        raise ValueError("a mask does not fit its tokens")
    return TokenStream(**arrays)


class TokenCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _entry_dir(self, key: str) -> Path:
        return self.root / key

    def load(self, corpus_identity: str, tokenizer_identity: str) -> TokenStream | None:
        """The cached stream, memory-mapped; None when absent or damaged (then removed)."""
        folder = self._entry_dir(entry_key(corpus_identity, tokenizer_identity))
        if not folder.is_dir():
            return None
        try:
            if not _only_entry_files(folder):
                raise ValueError("the entry folder holds other files")
            record = read_entry_record(folder)
            if record.get("format") != ENTRY_FORMAT:
                raise ValueError("an older entry format")
            masked = record.get("masks", False) is True
            files = [folder / name for name in _array_files(masked).values()]
            if not all(f.is_file() and not f.is_symlink() for f in files):
                raise ValueError("an array file is missing")
            if _block_hashes(files) != record["sha256_blocks"]:
                raise ValueError("an array file's hash differs")
            return _mapped(folder, str(record["dtype"]), masked)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, InputRefused):
            _remove_entry_folder(folder)  # damaged: rebuilt by the caller (only our files go)
            return None

    def store(
        self, corpus_identity: str, tokenizer_identity: str, source: str, stream: TokenStream,
        progress: Progress | None = None,
    ) -> TokenStream:
        """Write an entry atomically and return its arrays mapped from disk."""
        key = entry_key(corpus_identity, tokenizer_identity)
        folder = self._entry_dir(key)
        temporary = self.root / f".partial-{key}-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self.reclaim_partials()
            _remove_entry_folder(temporary)
            temporary.mkdir()
            masked = stream.train_mask is not None
            files = _array_files(masked)
            steps = len(files) + 1
            _write_arrays(temporary, stream, files, progress)
            hashes = _block_hashes([temporary / name for name in files.values()])
            record = {
                "format": ENTRY_FORMAT,
                "corpus_identity": corpus_identity,
                "tokenizer_identity": tokenizer_identity,
                "source": source,
                "train_tokens": int(stream.train.size),
                "validation_tokens": int(stream.validation.size),
                "dtype": stream.train.dtype.name,
                **({"masks": True} if masked else {}),
                "hash_block": HASH_BLOCK,
                "sha256_blocks": hashes,
                "created": time.time(),
            }
            (temporary / ENTRY_FILE).write_text(json.dumps(record, indent=2), "utf-8")
            _move_into_place(temporary, folder)
            self._tag()
            if progress is not None:
                progress(WRITING, steps, steps)
        except OSError as err:
            raise CacheError(f"cannot write the token cache in {self.root}: {err.strerror or err}") from None
        finally:
            _remove_entry_folder(temporary)
        try:  # the hashes were just taken from these files: map them without reading them again
            return _mapped(folder, stream.train.dtype.name, masked)
        except (OSError, ValueError) as err:
            raise CacheError(f"the token cache entry {folder} could not be read back after writing: {err}") from None

    def _tag(self) -> None:
        """Mark the root as this program's cache (best effort: the tag only informs)."""
        tag = self.root / TAG_FILE
        if not tag.exists():
            try:
                tag.write_text(TAG_TEXT, "ascii")
            except OSError:
                pass

    def _entry(self, folder: Path) -> CacheEntry:
        size = _size_of(folder)
        try:
            record = read_entry_record(folder)
            intact = _only_entry_files(folder) and all(
                (folder / name).is_file() for name in SPLIT_FILES.values())
            return CacheEntry(
                folder.name, folder, str(record["source"]), str(record["corpus_identity"]),
                str(record["tokenizer_identity"]), int(record["train_tokens"]),  # type: ignore[call-overload]
                int(record["validation_tokens"]), str(record["dtype"]), size,  # type: ignore[call-overload]
                float(record["created"]), intact,  # type: ignore[arg-type]
            )
        except (OSError, ValueError, KeyError, TypeError, InputRefused):
            return CacheEntry(folder.name, folder, "?", "?", "?", 0, 0, "?", size, 0.0, False)

    def entries(self) -> list[CacheEntry]:
        """The entries (folders named as keys), damaged ones marked not intact."""
        if not self.root.is_dir():
            return []
        return [self._entry(folder) for folder in sorted(self.root.iterdir())
                if _KEY.fullmatch(folder.name) and folder.is_dir() and not folder.is_symlink()]

    def partials(self) -> list[Partial]:
        """Work folders of writes in progress or interrupted, with whether their writer lives."""
        if not self.root.is_dir():
            return []
        found = []
        for folder in sorted(self.root.iterdir()):
            match = _PARTIAL.fullmatch(folder.name)
            if match and folder.is_dir() and not folder.is_symlink():
                found.append(Partial(folder, process_alive(int(match.group(2))), _size_of(folder)))
        return found

    def _stale_partials(self) -> list[Partial]:
        """The partials a dead writer left that hold only an entry's files: safe to remove."""
        return [p for p in self.partials() if not p.writer_alive and _only_entry_files(p.path)]

    def reclaim_partials(self) -> int:
        """Remove the work folders of writers that died (a kill -9 mid-write); bytes freed."""
        return sum(p.bytes for p in self._stale_partials() if _remove_entry_folder(p.path))

    def clearing_plan(self) -> ClearingPlan:
        """What :meth:`clear` would remove, and what in the directory the cache did not make."""
        plan = ClearingPlan(self.root)
        if not self.root.is_dir():
            return plan
        for child in sorted(self.root.iterdir()):
            self._plan_child(plan, child)
        plan.partials.extend(self._stale_partials())
        return plan

    def _plan_child(self, plan: ClearingPlan, child: Path) -> None:
        """Sort one name in the cache directory into ``plan``: ours to remove, left alone,
        or foreign."""
        name = child.name
        if child.is_symlink():
            plan.foreign.append(name)
        elif not (name == TAG_FILE and child.is_file()):
            self._plan_named(plan, child)

    def _plan_named(self, plan: ClearingPlan, child: Path) -> None:
        """A name neither a link nor the tag: the source index, an entry, a partial, or foreign."""
        name = child.name
        if name == SOURCES and child.is_dir():
            _plan_sources(plan, child)
        elif _KEY.fullmatch(name) and _only_entry_files(child):
            self._plan_entry(plan, child)
        elif _PARTIAL.fullmatch(name) and _only_entry_files(child):
            return  # a write in progress is left alone; a dead writer's is listed below
        else:
            plan.foreign.append(f"{name}/" if child.is_dir() else name)

    def _plan_entry(self, plan: ClearingPlan, child: Path) -> None:
        """An entry folder: ours to remove, unless it has no record of ours and the
        directory no tag of ours."""
        entry = self._entry(child)
        if entry.source == "?" and not (self.root / TAG_FILE).is_file():
            plan.foreign.append(f"{child.name}/")  # no record of ours, in a folder with no tag of ours
        else:
            plan.entries.append(entry)

    def clear(self) -> ClearingPlan:
        """Remove every entry, the source index and the partials of dead writers, once the
        directory is shown to hold nothing else; otherwise refuse, removing nothing."""
        plan = self.clearing_plan()
        if plan.foreign:
            self._refuse_foreign(plan.foreign)
        for entry in plan.entries:
            if not _remove_entry_folder(entry.path):
                raise CacheError(f"cannot remove the cache entry {shorten_middle(str(entry.path))}")
            plan.freed += entry.bytes
        plan.freed += sum(p.bytes for p in plan.partials if _remove_entry_folder(p.path))
        self._remove_index(plan)
        return plan

    def _refuse_foreign(self, foreign: list[str]) -> None:
        """Refuse to clear a directory holding what the cache did not make, naming some of it."""
        shown = ", ".join(shorten_middle(name, 40) for name in foreign[:4])
        more = f" and {len(foreign) - 4} more" if len(foreign) > 4 else ""
        raise CacheError(
            f"{shorten_middle(str(self.root))} is not only a token cache: it holds {shown}{more}, which the cache "
            "did not make; nothing was removed (give the token cache's own folder as --cache-dir)"
        )

    def _remove_index(self, plan: ClearingPlan) -> None:
        """Remove the source index's files (best effort), then its folder once emptied."""
        for file in plan.index_files:
            try:
                size = file.stat().st_size
                file.unlink()
                plan.freed += size
            except OSError:
                pass
        if plan.index_files:
            try:
                (self.root / SOURCES).rmdir()
            except OSError:
                pass


_SOURCE_FILE = re.compile(r"\.?[0-9a-f]{32}\.json(\.\d+)?")


def _plan_sources(plan: ClearingPlan, child: Path) -> None:
    """The source index folder: its files to remove when every one is an index file."""
    files = sorted(child.iterdir())
    if all(f.is_file() and not f.is_symlink() and _SOURCE_FILE.fullmatch(f.name) for f in files):
        plan.index_files.extend(files)
    else:
        plan.foreign.append(f"{child.name}/")


def _write_arrays(folder: Path, stream: TokenStream, files: dict[str, str], progress: Progress | None) -> None:
    """Each of the stream's ``files`` (field: file name) as a ``.npy`` file in ``folder``,
    progress told before each."""
    steps = len(files) + 1
    for done, (split, name) in enumerate(files.items()):
        if progress is not None:
            progress(WRITING, done, steps)
        np.save(folder / name, np.ascontiguousarray(getattr(stream, split)), allow_pickle=False)
    if progress is not None:
        progress(WRITING, len(files), steps)


def _move_into_place(temporary: Path, folder: Path) -> None:
    """The written entry renamed to its key's folder.

    A key names its content: an entry already there was written by another writer of the
    same corpus and tokenizer that finished first, and is used as it is."""
    if not folder.is_dir():
        try:
            os.replace(temporary, folder)
        except OSError:
            if not folder.is_dir():
                raise


@dataclass(frozen=True)
class Partial:
    """A work folder of a cache write: its writer alive, and its size on disk."""

    path: Path
    writer_alive: bool
    bytes: int


@dataclass
class ClearingPlan:
    """What ``cache clear`` finds in a cache directory."""

    root: Path
    entries: list[CacheEntry] = field(default_factory=list)
    partials: list[Partial] = field(default_factory=list)
    index_files: list[Path] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)  # names the cache did not make
    freed: int = 0


def cached_stream(
    corpus_identity: str,
    tokenizer_identity: str,
    source: str,
    build: Callable[[], TokenStream],
    check: Callable[[TokenStream], None],
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
    vocab_size: int | None = None,
    warn: Callable[[str], None] | None = None,
) -> TokenStream:
    """The cached stream if intact, else ``build()``, checked, then written to the cache.
    A stream that fails ``check`` is never written. A cached stream holding an id outside
    ``vocab_size`` is damage: removed and rebuilt. A cache that cannot be written (read-only,
    full) only costs time: the stream is used from memory and ``warn`` is told once."""
    cache = TokenCache(resolve_cache_dir(cache_dir))
    if progress is not None:
        progress(READING_CACHE, 0, 1)
    hit = cache.load(corpus_identity, tokenizer_identity)
    if progress is not None:
        progress(READING_CACHE, 1, 1)
    if hit is not None:
        if vocab_size is None or _ids_within(hit, vocab_size):
            return hit
        _remove_entry_folder(cache._entry_dir(entry_key(corpus_identity, tokenizer_identity)))
    stream = build()
    check(stream)
    try:
        return cache.store(corpus_identity, tokenizer_identity, source, stream, progress)
    except CacheError as err:
        if warn is not None:
            warn(f"{err}; training without a cache (the next run encodes the text again)")
        return stream


def _ids_within(stream: TokenStream, vocab_size: int) -> bool:
    return all(int(part.max(initial=0)) < vocab_size for part in (stream.train, stream.validation))
