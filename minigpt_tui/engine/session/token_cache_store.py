"""The token cache as the command line lists and clears it: the encoded corpora kept between
runs, the writes in progress or left by an interrupted one, and what a clear removed. The
records serialize to the JSON ``cache list --json`` and ``cache clear --json`` print.
Torch-free at import (the cache module brings torch through the stream reader)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from minigpt_tui.engine.training.token_cache import CacheEntry, ClearingPlan, Partial


@dataclass(frozen=True)
class CacheListing:
    """What the cache folder holds: its cached corpora and the partial writes beside them."""

    root: Path
    entries: tuple[CacheEntry, ...]
    partials: tuple[Partial, ...]

    @property
    def bytes(self) -> int:
        return sum(e.bytes for e in self.entries) + sum(p.bytes for p in self.partials)

    def to_json(self) -> dict[str, Any]:
        return {"cache_dir": str(self.root), "entries": [e.to_json() for e in self.entries], "bytes": self.bytes,
                "partials": [{"path": str(p.path), "writer_alive": p.writer_alive, "bytes": p.bytes}
                             for p in self.partials]}


@dataclass(frozen=True)
class CacheClearing:
    """What a clear removed from the cache folder."""

    root: Path
    plan: ClearingPlan

    def to_json(self) -> dict[str, Any]:
        plan = self.plan
        return {"cache_dir": str(self.root), "removed": len(plan.entries), "bytes_freed": plan.freed,
                "removed_entries": [e.to_json() for e in plan.entries],
                "removed_partials": [str(p.path) for p in plan.partials],
                "removed_index_files": len(plan.index_files)}


def list_token_cache(cache_dir: str | None) -> CacheListing:
    """The cache in ``cache_dir`` (None: the environment's or the user cache dir)."""
    from minigpt_tui.engine.training.token_cache import (  # deferred: imports torch
        TokenCache,
        resolve_cache_dir,
    )

    root = resolve_cache_dir(cache_dir)
    cache = TokenCache(root)
    return CacheListing(root, tuple(cache.entries()), tuple(cache.partials()))


def clear_token_cache(cache_dir: str | None) -> CacheClearing:
    """Remove every cached corpus; refused, removing nothing, when the folder holds anything
    the cache did not make."""
    from minigpt_tui.engine.training.token_cache import (  # deferred: imports torch
        TokenCache,
        resolve_cache_dir,
    )

    root = resolve_cache_dir(cache_dir)
    return CacheClearing(root, TokenCache(root).clear())
