"""``cache list`` and ``cache clear``: the encoded token arrays kept between runs."""

from __future__ import annotations

import argparse
import time

from minigpt_tui.commands.common import emit_json
from minigpt_tui.engine.session.display import human_bytes


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cache", help="show or free the token cache of stream-mode corpora")
    parser.add_argument("--cache-dir", help="cache directory (default: the user cache dir)")
    actions = parser.add_subparsers(dest="cache_action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="list the cached corpora")
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(handler=run_cache_list)
    clearing = actions.add_parser("clear", help="remove every cached corpus")
    clearing.add_argument("--json", action="store_true", help="print one JSON object")
    clearing.set_defaults(handler=run_cache_clear)


def run_cache_list(args: argparse.Namespace) -> int:
    from minigpt_tui.engine.token_cache import TokenCache, resolve_cache_dir

    root = resolve_cache_dir(args.cache_dir)
    entries = TokenCache(root).entries()
    if args.json:
        emit_json({"cache_dir": str(root), "entries": [e.to_json() for e in entries],
                   "bytes": sum(e.bytes for e in entries)})
        return 0
    print(f"token cache {root}: {len(entries)} entries, {human_bytes(sum(e.bytes for e in entries))}")
    for e in entries:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.created)) if e.created else "?"
        state = "" if e.intact else "  (incomplete)"
        print(f"  {e.key}  {human_bytes(e.bytes):>9}  {e.train_tokens + e.validation_tokens:>12,} tokens  "
              f"{created}  {e.source}{state}")
    return 0


def run_cache_clear(args: argparse.Namespace) -> int:
    from minigpt_tui.engine.token_cache import TokenCache, resolve_cache_dir

    root = resolve_cache_dir(args.cache_dir)
    count, freed = TokenCache(root).clear()
    if args.json:
        emit_json({"cache_dir": str(root), "removed": count, "bytes_freed": freed})
    else:
        print(f"token cache {root}: removed {count} entries, freed {human_bytes(freed)}")
    return 0
