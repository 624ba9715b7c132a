"""JSON read as untrusted input: bounded nesting and number sizes, optionally no key twice,
and every failure one :class:`JSONRefused` naming the problem. The safetensors reader parses
its headers and metadata records with it; ``config.json``, shard indexes and
``tokenizer.json`` files other tools wrote are read with :func:`read_json_input`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.files import read_small_file, shorten_middle


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKey(key)
        seen[key] = value
    return seen


class DuplicateKey(Exception):
    """A JSON object that names one key twice (``args[0]`` is the key)."""


class JSONRefused(ValueError):
    """JSON text that is malformed, nested too deep or holds a number too large."""


# A JSON string (escapes included), to be ignored when brackets are counted.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _nested_deeper_than(text: str, limit: int) -> bool:
    """Whether ``text`` nests arrays or objects more than ``limit`` deep (without
    recursion: innermost empty pairs are removed ``limit`` times; what is left is deeper,
    or unbalanced, which the parser then names)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    skeleton = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    for _ in range(limit):
        reduced = skeleton.replace("[]", "").replace("{}", "")
        if reduced == skeleton:
            return False
        skeleton = reduced
    return bool(skeleton) and skeleton != skeleton.replace("[]", "").replace("{}", "")


def load_json(text: str, max_depth: int, *, unique_keys: bool = False) -> Any:
    """Parse JSON text with bounded nesting and number sizes; every failure is a
    :class:`JSONRefused` whose message names the problem."""
    if _nested_deeper_than(text, max_depth):
        raise JSONRefused(f"nested deeper than {max_depth} levels")
    try:
        return json.loads(text, object_pairs_hook=_unique_object if unique_keys else None)
    except json.JSONDecodeError as err:
        raise JSONRefused(f"{err.msg.removesuffix(' at')} at {err.pos}") from None
    except RecursionError:
        raise JSONRefused("nested too deep") from None
    except ValueError as err:  # an integer of more digits than Python converts
        if isinstance(err, DuplicateKey):
            raise
        raise JSONRefused("a number too large") from None


OTHER_TOOLS_JSON_LIMIT = 512 << 20  # a tokenizer.json or shard index of a very large vocabulary fits
OTHER_TOOLS_JSON_DEPTH = 64


def read_json_input(path: Path | str, what: str, *, limit: int = OTHER_TOOLS_JSON_LIMIT,
                    max_depth: int = OTHER_TOOLS_JSON_DEPTH) -> Any:
    """A JSON file another tool wrote (``config.json``, a shard index, ``tokenizer.json``),
    read as untrusted input: a regular file (a FIFO or a device is refused before it could
    block), at most ``limit`` bytes, UTF-8, bounded nesting and numbers. Every failure is an
    :class:`InputRefused` or :class:`JSONRefused` naming the file."""
    raw = read_small_file(path, limit, what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise JSONRefused(f"{shorten_middle(str(path))} is not UTF-8 (byte {err.start})") from None
    try:
        return load_json(text, max_depth)
    except JSONRefused as err:
        raise JSONRefused(f"{shorten_middle(str(path))} is not usable JSON ({err})") from None
