"""Bounds on what a ``tokenizer.json`` from elsewhere may make the ``tokenizers`` library do.

The library is Rust: when an allocation fails it aborts the whole process, and when it
panics (a regex past its backtracking limit, a replacement of the empty text) it prints a
backtrace over the terminal before Python sees the error. So a document is checked, as
parsed JSON, before it is handed over:

- its vocabulary is no larger than the model's rows and :data:`MAX_VOCABULARY` (counted from
  the document, not from a built tokenizer);
- every regex it holds is at most :data:`MAX_PATTERN` characters and repeats no group that
  itself repeats a variable amount (``(x+x+)+``: the shape whose matching time explodes);
- its normalizer cannot make a text more than :data:`MAX_GROWTH` times longer at worst
  (40 chained ``"a" -> "aa"`` replacements would make one letter a trillion), and never
  replaces the empty text (the library panics on it).

Padding and truncation are not checked here: the tokenizer turns them off after loading
(see :mod:`minigpt_tui.engine.core.library_tokenizer`).
"""

from __future__ import annotations

import base64
import re
import re._constants as sre
import re._parser as sre_parse
import struct
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from minigpt_tui.engine.core.errors import TokenizerError

MAX_VOCABULARY = 1 << 21  # ids in one tokenizer (the largest real vocabularies have about 262k)
MAX_GROWTH = 256  # times longer a normalizer may make a text, at worst
MAX_PREPENDED = 65_536  # characters a normalizer may add to a text, at worst
MAX_PATTERN = 65_536  # characters in one regex
UNKNOWN_GROWTH = 4  # a normalizer type this module does not know (the library refuses most)
# Worst-case growth in characters of the library's fixed normalizers (Unicode's bounds:
# NFC at most 3 code points per code point, NFD 4, the compatibility forms 18; lowercase 2;
# the byte-level map one character per UTF-8 byte).
FIXED_GROWTH = {"NFC": 3, "NFD": 4, "NFKC": 18, "NFKD": 18, "Lowercase": 2, "ByteLevel": 4, "Strip": 1,
                "StripAccents": 1, "Nmt": 1}

_UNICODE_CLASS = re.compile(r"\\[pP](?:\{[^}]*\}|[A-Za-z])|\\x\{[0-9A-Fa-f]+\}|\\[hH]")
_NAMED_GROUP = re.compile(r"\(\?<(?=[A-Za-z_])")
_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT)


def check_document(data: dict[str, Any], vocab_size: int | None, source: str) -> None:
    """Refuse a tokenizer.json document that could exhaust, panic or wedge the library
    (module doc); ``vocab_size`` is the model's rows (None: the tokenizer's own)."""
    own = declared_size(data)
    if vocab_size is not None and own > vocab_size:
        raise TokenizerError(f"{source}: the tokenizer has {own} ids, more than the model's {vocab_size} rows")
    if own > MAX_VOCABULARY:
        raise TokenizerError(f"{source}: the tokenizer has {own:,} ids (at most {MAX_VOCABULARY:,} are accepted)")
    for where, pattern in _regexes(data):
        check_regex(pattern, f"{source}: the {where} regex")
    growth, added = normalizer_growth(data.get("normalizer"), source)
    if growth > MAX_GROWTH:
        raise TokenizerError(f"{source}: the normalizer can make a text up to {growth:,.0f} times longer "
                             f"(at most {MAX_GROWTH} is accepted)")
    if added > MAX_PREPENDED:
        raise TokenizerError(f"{source}: the normalizer can add {added:,} characters to a text "
                             f"(at most {MAX_PREPENDED:,} are accepted)")


def declared_size(data: dict[str, Any]) -> int:
    """The number of ids the document declares: its vocabulary's entries or its highest id
    plus one, whichever is larger."""
    model = data.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    count = len(vocab) if isinstance(vocab, (dict, list)) else 0
    ids = [v for v in vocab.values() if isinstance(v, int)] if isinstance(vocab, dict) else []
    added = data.get("added_tokens")
    if isinstance(added, list):
        ids += [t["id"] for t in added if isinstance(t, dict) and isinstance(t.get("id"), int)]
    return max(count, max(ids, default=-1) + 1)


def _regexes(data: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """Every ``{"Regex": ...}`` pattern in the document, with where it is ("pre_tokenizer's
    Split"); the added tokens and the model's vocabulary and merges (no patterns, and
    large) are not walked."""
    stack = [(value, key, key) for key, value in _walked_parts(data).items()]
    while stack:
        item, top, kind = stack.pop()
        if isinstance(item, dict):
            kind = item["type"] if isinstance(item.get("type"), str) else kind
            if isinstance(item.get("Regex"), str):
                yield (f"{top}'s {kind}" if kind != top else top), item["Regex"]
        stack.extend((value, top, kind) for value in _walked_values(item))


def _walked_parts(data: dict[str, Any]) -> dict[str, Any]:
    """The document's parts the regex walk visits: all but the added tokens, and the model
    without its vocabulary and merges."""
    model = data.get("model")
    if isinstance(model, dict):
        model = {k: v for k, v in model.items() if k not in ("vocab", "merges")}
    return {key: value for key, value in {**data, "model": model}.items() if key != "added_tokens"}


def _walked_values(item: Any) -> list[Any]:
    """What the regex walk looks inside: a dict's values, a list of dicts or lists."""
    if isinstance(item, dict):
        return list(item.values())
    if isinstance(item, list) and item and isinstance(item[0], (dict, list)):
        return item
    return []


def check_regex(pattern: str, where: str) -> None:
    """Refuse a regex the library could spend unbounded time on (module doc)."""
    if len(pattern) > MAX_PATTERN:
        raise TokenizerError(f"{where} has {len(pattern):,} characters (at most {MAX_PATTERN:,} are accepted)")
    tree = _parsed(pattern)
    if tree is not None and _nested_repeat(tree):
        raise TokenizerError(f"{where} {_short(pattern)} repeats a group that itself repeats "
                             "(matching it can take unbounded time)")


def regex_min_width(pattern: str) -> int | None:
    """The fewest characters the regex can match (None: Python's parser cannot read it)."""
    tree = _parsed(pattern)
    return None if tree is None else tree.getwidth()[0]


def _parsed(pattern: str) -> Any:
    """The regex as Python's parser reads it, after Oniguruma's ``\\p{..}`` classes and
    ``(?<name>`` groups are spelled in Python's terms (a class stands for one character:
    only the shape is looked at). None when it cannot be read that way."""
    spelled = _NAMED_GROUP.sub("(?P<", _UNICODE_CLASS.sub("x", pattern)).replace(r"\z", r"\Z")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "possible nested set" and the like
        try:
            return sre_parse.parse(spelled)
        except (re.error, RecursionError, OverflowError, ValueError):
            return None


def _nested_repeat(tree: Any) -> bool:
    """Whether a repeat of more than one time holds a repeat of a variable count."""
    for op, av in tree:
        if op in _REPEATS:
            low, high, body = av
            if high > 1 and _variable_repeat(body):
                return True
        if any(_nested_repeat(child) for child in _children(op, av)):
            return True
    return False


def _variable_repeat(tree: Any) -> bool:
    for op, av in tree:
        if op in _REPEATS and av[0] != av[1]:
            return True
        if any(_variable_repeat(child) for child in _children(op, av)):
            return True
    return False


def _children(op: Any, av: Any) -> list[Any]:
    """The sub-patterns under one node of Python's regex parse tree."""
    if op in _REPEATS or op == sre.POSSESSIVE_REPEAT:
        return [av[2]]
    if op == sre.SUBPATTERN:
        return [av[3]]
    if op == sre.BRANCH:
        return list(av[1])
    if op in (sre.ASSERT, sre.ASSERT_NOT):
        return [av[1]]
    if op == sre.ATOMIC_GROUP:
        return [av]
    if op == sre.GROUPREF_EXISTS:
        return [part for part in av[1:] if part is not None]
    return []


def normalizer_growth(normalizer: Any, source: str) -> tuple[float, int]:
    """How a normalizer lengthens a text of n characters at worst: (a, b) for a·n + b."""
    if normalizer is None:
        return 1.0, 0
    if not isinstance(normalizer, dict):
        return float(UNKNOWN_GROWTH), 0  # the library refuses it when it loads the document
    kind = normalizer.get("type")
    if kind == "Sequence":
        return _sequence_growth(normalizer, source)
    if kind == "Prepend":
        prepend = normalizer.get("prepend")
        return 1.0, len(prepend) if isinstance(prepend, str) else 0
    measured = _MEASURED_GROWTH.get(kind)
    if measured is not None:
        return float(measured(normalizer, source)), 0
    return float(FIXED_GROWTH.get(kind, UNKNOWN_GROWTH)), 0


def _sequence_growth(normalizer: dict[str, Any], source: str) -> tuple[float, int]:
    """A Sequence's growth: its parts' growths composed in order."""
    scale, added = 1.0, 0
    for part in normalizer.get("normalizers") or []:
        factor, extra = normalizer_growth(part, source)
        scale, added = min(scale * factor, 1e30), int(min(added * factor + extra, 2 * MAX_PREPENDED))
    return scale, added


def _replace_growth(normalizer: dict[str, Any], source: str) -> int:
    """A Replace's growth; replacing the empty text is refused (the library panics on it)."""
    pattern, content = normalizer.get("pattern"), normalizer.get("content")
    size = len(content) if isinstance(content, str) else 0
    if not isinstance(pattern, dict):
        return max(size, 1)
    if isinstance(pattern.get("String"), str):
        if pattern["String"] == "":
            raise TokenizerError(f"{source}: a Replace normalizer replaces the empty text")
        return max(1, -(-size // len(pattern["String"])))
    regex = pattern.get("Regex")
    if not isinstance(regex, str):
        return max(size, 1)
    width = regex_min_width(regex)
    if width == 0:
        raise TokenizerError(f"{source}: a Replace normalizer's regex {_short(regex)} can match the empty text")
    return max(1, -(-size // (width or 1)))


def _bert_growth(normalizer: dict[str, Any]) -> int:
    """BERT's normalizer: spaces around CJK characters (3), accents stripped after NFD (4),
    lowercase (2); each only where it is set (the library's defaults are on)."""
    growth = 3 if normalizer.get("handle_chinese_chars", True) else 1
    lowercase = normalizer.get("lowercase", True)
    if normalizer.get("strip_accents", lowercase):
        growth *= FIXED_GROWTH["NFD"]
    return growth * (FIXED_GROWTH["Lowercase"] if lowercase else 1)


def _precompiled_growth(charsmap: Any) -> int:
    """A SentencePiece character map's growth: its longest replacement, in characters (one
    matched character at the least becomes it). The map is a u32 trie size, the trie, then
    the replacements separated by NUL bytes."""
    if not isinstance(charsmap, str):
        return UNKNOWN_GROWTH
    try:
        blob = base64.b64decode(charsmap, validate=False)
        (trie_size,) = struct.unpack_from("<I", blob, 0)
    except (ValueError, struct.error):
        return UNKNOWN_GROWTH  # the library refuses a map it cannot read
    pieces = blob[4 + trie_size:].split(b"\0")
    return max((len(p.decode("utf-8", errors="replace")) for p in pieces), default=1) or 1


def _short(pattern: str) -> str:
    return repr(pattern if len(pattern) <= 60 else pattern[:57] + "...")


# Normalizers whose growth is read from their settings (the rest have a fixed growth).
_MEASURED_GROWTH: dict[str, Callable[[dict[str, Any], str], int]] = {
    "Replace": _replace_growth,
    "BertNormalizer": lambda normalizer, _source: _bert_growth(normalizer),
    "Precompiled": lambda normalizer, _source: _precompiled_growth(normalizer.get("precompiled_charsmap")),
}
