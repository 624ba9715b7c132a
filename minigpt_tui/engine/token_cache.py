"""Encoded token arrays kept between runs, one entry per (corpus, tokenizer) identity.

An entry is a folder named after the two identities holding ``train.npy``,
``validation.npy`` and ``entry.json`` (identities, source, sizes, the SHA-256 of every
16 MiB block of each array file). It is written in a temporary folder and renamed into
place, so an interrupted write leaves no entry. A read checks every block's hash first, on
parallel threads (hashlib releases the GIL), then maps the arrays from disk: a damaged entry
is removed and rebuilt, never used. The default place is platformdirs' user cache dir; the
``MINIGPT_TUI_CACHE_DIR`` environment variable overrides it. The cache root also holds the
source index (``sources/``, see :mod:`minigpt_tui.engine.source_index`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from minigpt_tui.engine.errors import CacheError
from minigpt_tui.engine.source_index import CACHE_ENV, SOURCES, default_cache_dir, resolve_cache_dir
from minigpt_tui.engine.stream import READING_CACHE, Progress, TokenStream

__all__ = ["CACHE_ENV", "TokenCache", "cached_stream", "default_cache_dir", "entry_key", "resolve_cache_dir"]

ENTRY_FORMAT = "minigpt-tui-token-cache-v2"
ENTRY_FILE = "entry.json"
SPLIT_FILES = {"train": "train.npy", "validation": "validation.npy"}
HASH_BLOCK = 1 << 24
WRITING = "writing the token cache"


def entry_key(corpus_identity: str, tokenizer_identity: str) -> str:
    text = f"{ENTRY_FORMAT}\0{corpus_identity}\0{tokenizer_identity}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


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


def _mapped(folder: Path, dtype: str) -> TokenStream:
    arrays = {split: np.load(folder / name, mmap_mode="r", allow_pickle=False) for split, name in SPLIT_FILES.items()}
    if any(a.ndim != 1 or a.dtype.name != dtype for a in arrays.values()):
        raise ValueError("array layout differs")
    return TokenStream(arrays["train"], arrays["validation"])


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
            record = json.loads((folder / ENTRY_FILE).read_text("utf-8"))
            if record.get("format") != ENTRY_FORMAT or record.get("corpus_identity") != corpus_identity or (
                record.get("tokenizer_identity") != tokenizer_identity
            ):
                raise ValueError("identities differ")
            files = [folder / name for name in SPLIT_FILES.values()]
            if _block_hashes(files) != record["sha256_blocks"]:
                raise ValueError("an array file's hash differs")
            return _mapped(folder, record["dtype"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            shutil.rmtree(folder, ignore_errors=True)  # damaged: rebuilt by the caller
            return None

    def store(
        self, corpus_identity: str, tokenizer_identity: str, source: str, stream: TokenStream,
        progress: Progress | None = None,
    ) -> TokenStream:
        """Write an entry atomically and return its arrays mapped from disk."""
        key = entry_key(corpus_identity, tokenizer_identity)
        folder = self._entry_dir(key)
        temporary = self.root / f".partial-{key}-{os.getpid()}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(temporary, ignore_errors=True)
            temporary.mkdir()
            steps = len(SPLIT_FILES) + 1
            for done, (split, name) in enumerate(SPLIT_FILES.items()):
                if progress is not None:
                    progress(WRITING, done, steps)
                np.save(temporary / name, np.ascontiguousarray(getattr(stream, split)), allow_pickle=False)
            if progress is not None:
                progress(WRITING, len(SPLIT_FILES), steps)
            hashes = _block_hashes([temporary / name for name in SPLIT_FILES.values()])
            record = {
                "format": ENTRY_FORMAT,
                "corpus_identity": corpus_identity,
                "tokenizer_identity": tokenizer_identity,
                "source": source,
                "train_tokens": int(stream.train.size),
                "validation_tokens": int(stream.validation.size),
                "dtype": stream.train.dtype.name,
                "hash_block": HASH_BLOCK,
                "sha256_blocks": hashes,
                "created": time.time(),
            }
            (temporary / ENTRY_FILE).write_text(json.dumps(record, indent=2), "utf-8")
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(temporary, folder)
            if progress is not None:
                progress(WRITING, steps, steps)
        except OSError as err:
            raise CacheError(f"cannot write the token cache in {self.root}: {err.strerror or err}") from None
        finally:
            shutil.rmtree(temporary, ignore_errors=True)
        try:  # the hashes were just taken from these files: map them without reading them again
            return _mapped(folder, stream.train.dtype.name)
        except (OSError, ValueError) as err:
            raise CacheError(f"the token cache entry {folder} could not be read back after writing: {err}") from None

    def entries(self) -> list[CacheEntry]:
        if not self.root.is_dir():
            return []
        found = []
        for folder in sorted(p for p in self.root.iterdir()
                             if p.is_dir() and not p.name.startswith(".") and p.name != SOURCES):
            size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
            try:
                record = json.loads((folder / ENTRY_FILE).read_text("utf-8"))
                intact = all((folder / name).is_file() for name in SPLIT_FILES.values())
                found.append(
                    CacheEntry(
                        folder.name, folder, str(record["source"]), str(record["corpus_identity"]),
                        str(record["tokenizer_identity"]), int(record["train_tokens"]),
                        int(record["validation_tokens"]), str(record["dtype"]), size,
                        float(record["created"]), intact,
                    )
                )
            except (OSError, ValueError, KeyError, TypeError):
                found.append(CacheEntry(folder.name, folder, "?", "?", "?", 0, 0, "?", size, 0.0, False))
        return found

    def clear(self) -> tuple[int, int]:
        """Remove every entry (and leftovers of interrupted writes); (entries, bytes) freed."""
        if not self.root.is_dir():
            return 0, 0
        count, freed = 0, 0
        for folder in self.root.iterdir():
            if not folder.is_dir():
                continue
            freed += sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
            try:
                shutil.rmtree(folder)
            except OSError as err:
                raise CacheError(f"cannot remove {folder}: {err.strerror or err}") from None
            count += 0 if folder.name.startswith(".") or folder.name == SOURCES else 1
        return count, freed


def cached_stream(
    corpus_identity: str,
    tokenizer_identity: str,
    source: str,
    build: Callable[[], TokenStream],
    check: Callable[[TokenStream], None],
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
) -> TokenStream:
    """The cached stream if intact, else ``build()``, checked, then written to the cache.
    A stream that fails ``check`` is never written."""
    cache = TokenCache(resolve_cache_dir(cache_dir))
    if progress is not None:
        progress(READING_CACHE, 0, 1)
    hit = cache.load(corpus_identity, tokenizer_identity)
    if progress is not None:
        progress(READING_CACHE, 1, 1)
    if hit is not None:
        return hit
    stream = build()
    check(stream)
    return cache.store(corpus_identity, tokenizer_identity, source, stream, progress)
