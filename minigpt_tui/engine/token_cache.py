"""Encoded token arrays kept between runs, one entry per (corpus, tokenizer) identity.

An entry is a folder named after the two identities holding ``train.npy``,
``validation.npy`` and ``entry.json`` (identities, source, sizes, the SHA-256 of each array
file). It is written in a temporary folder and renamed into place, so an interrupted write
leaves no entry. A read maps the arrays from disk and checks both hashes first: a damaged
entry is removed and rebuilt, never used. The default place is platformdirs' user cache
dir; the ``MINIGPT_TUI_CACHE_DIR`` environment variable overrides it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from minigpt_tui.engine.errors import CacheError
from minigpt_tui.engine.stream import TokenStream

CACHE_ENV = "MINIGPT_TUI_CACHE_DIR"
ENTRY_FORMAT = "minigpt-tui-token-cache-v1"
ENTRY_FILE = "entry.json"
SPLIT_FILES = {"train": "train.npy", "validation": "validation.npy"}
HASH_BLOCK = 1 << 24


def default_cache_dir() -> Path:
    import platformdirs

    return platformdirs.user_cache_path("minigpt-tui", appauthor=False) / "tokens"


def resolve_cache_dir(cache_dir: str | Path | None = None) -> Path:
    if cache_dir:
        return Path(cache_dir).expanduser()
    from_env = os.environ.get(CACHE_ENV)
    return Path(from_env).expanduser() if from_env else default_cache_dir()


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


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


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
            arrays = {}
            for split, name in SPLIT_FILES.items():
                if _file_sha256(folder / name) != record["sha256"][name]:
                    raise ValueError(f"{name} hash differs")
                arrays[split] = np.load(folder / name, mmap_mode="r", allow_pickle=False)
            if any(a.ndim != 1 or a.dtype.name != record["dtype"] for a in arrays.values()):
                raise ValueError("array layout differs")
            return TokenStream(arrays["train"], arrays["validation"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            shutil.rmtree(folder, ignore_errors=True)  # damaged: rebuilt by the caller
            return None

    def store(
        self, corpus_identity: str, tokenizer_identity: str, source: str, stream: TokenStream
    ) -> TokenStream:
        """Write an entry atomically and return its arrays mapped from disk."""
        key = entry_key(corpus_identity, tokenizer_identity)
        folder = self._entry_dir(key)
        temporary = self.root / f".partial-{key}-{os.getpid()}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(temporary, ignore_errors=True)
            temporary.mkdir()
            hashes = {}
            for split, name in SPLIT_FILES.items():
                np.save(temporary / name, np.ascontiguousarray(getattr(stream, split)), allow_pickle=False)
                hashes[name] = _file_sha256(temporary / name)
            record = {
                "format": ENTRY_FORMAT,
                "corpus_identity": corpus_identity,
                "tokenizer_identity": tokenizer_identity,
                "source": source,
                "train_tokens": int(stream.train.size),
                "validation_tokens": int(stream.validation.size),
                "dtype": stream.train.dtype.name,
                "sha256": hashes,
                "created": time.time(),
            }
            (temporary / ENTRY_FILE).write_text(json.dumps(record, indent=2), "utf-8")
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(temporary, folder)
        except OSError as err:
            raise CacheError(f"cannot write the token cache in {self.root}: {err.strerror or err}") from None
        finally:
            shutil.rmtree(temporary, ignore_errors=True)
        loaded = self.load(corpus_identity, tokenizer_identity)
        if loaded is None:
            raise CacheError(f"the token cache entry {folder} could not be read back after writing")
        return loaded

    def entries(self) -> list[CacheEntry]:
        if not self.root.is_dir():
            return []
        found = []
        for folder in sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")):
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
            count += 0 if folder.name.startswith(".") else 1
        return count, freed


def cached_stream(
    corpus_identity: str,
    tokenizer_identity: str,
    source: str,
    build: Callable[[], TokenStream],
    check: Callable[[TokenStream], None],
    cache_dir: str | Path | None = None,
) -> TokenStream:
    """The cached stream if intact, else ``build()``, checked, then written to the cache.
    A stream that fails ``check`` is never written."""
    cache = TokenCache(resolve_cache_dir(cache_dir))
    hit = cache.load(corpus_identity, tokenizer_identity)
    if hit is not None:
        return hit
    stream = build()
    check(stream)
    return cache.store(corpus_identity, tokenizer_identity, source, stream)
