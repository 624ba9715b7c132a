"""``cache list`` and ``cache clear``: the encoded token arrays kept between runs."""

from __future__ import annotations

import argparse
import time
from typing import Any

from minigpt_tui.commands.common import emit_json
from minigpt_tui.engine.core.printable import escape_controls as printable
from minigpt_tui.engine.session.display import counted, human_bytes
from minigpt_tui.engine.session.token_cache_store import clear_token_cache, list_token_cache


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cache", help="show or free the token cache of stream-mode corpora")
    parser.add_argument("--cache-dir", help="cache directory (default: the user cache dir)")
    actions = parser.add_subparsers(dest="cache_action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="list the cached corpora")
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(handler=run_cache_list)
    clearing = actions.add_parser("clear", help="remove every cached corpus (refused when the folder holds anything the cache did not make)")
    clearing.add_argument("--json", action="store_true", help="print one JSON object")
    clearing.set_defaults(handler=run_cache_clear)


def run_cache_list(args: argparse.Namespace) -> int:
    listing = list_token_cache(args.cache_dir)
    if args.json:
        emit_json(listing.to_json())
        return 0
    print(f"token cache {printable(str(listing.root))}: {counted(len(listing.entries), 'entry', 'entries')}, "
          f"{human_bytes(listing.bytes)}")
    for e in listing.entries:
        print(_entry_line(e))
    for p in listing.partials:
        print(_partial_line(p))
    return 0


def _entry_line(e: Any) -> str:
    """A cached corpus: key, size, tokens, when it was made, its source (and if incomplete)."""
    created = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.created)) if e.created else "?"
    state = "" if e.intact else "  (incomplete)"
    return (f"  {e.key}  {human_bytes(e.bytes):>9}  {e.train_tokens + e.validation_tokens:>12,} tokens  "
            f"{created}  {printable(e.source)}{state}")


def _partial_line(p: Any) -> str:
    """A write in progress, or one an interrupted write left."""
    state = ("being written now" if p.writer_alive
             else "left by an interrupted write; cache clear or the next write removes it")
    return f"  {p.path.name}  {human_bytes(p.bytes):>9}  {state}"


def run_cache_clear(args: argparse.Namespace) -> int:
    clearing = clear_token_cache(args.cache_dir)  # refused, removing nothing, when the folder holds other things
    if args.json:
        emit_json(clearing.to_json())
        return 0
    plan = clearing.plan
    for e in plan.entries:
        print(f"  removed {e.key}  {human_bytes(e.bytes):>9}  {printable(e.source)}")
    for p in plan.partials:
        print(f"  removed {p.path.name} (an interrupted write)")
    print(f"token cache {printable(str(clearing.root))}: removed {counted(len(plan.entries), 'entry', 'entries')}, "
          f"freed {human_bytes(plan.freed)}")
    return 0
