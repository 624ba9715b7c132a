"""A model's own ``tokenizer.json``, run by the ``tokenizers`` library.

Models from elsewhere bring their tokenizer: byte-level BPE with its regex (GPT-2, Pythia,
SmolLM, Qwen), Metaspace with byte fallback (Llama 2, TinyLlama), any normalizer the
library knows. A prompt is encoded exactly as that tokenizer encodes it, special tokens
and all (BOS only where its post-processor adds one). Every id is shown as its bytes:
byte-level pieces through the byte table, ``<0xNN>`` byte-fallback pieces as that byte,
``▁`` as a space; a piece that is not valid UTF-8 on its own shows its bytes as ``\\xNN``.

It offers what generation reads of our own tokenizer (``vocab_size``, ``identity``,
``encode_prompt``, ``piece``, ``piece_text``, ``decode``, ``bos_id``, ``eos_ids``).

A document is checked before the library builds it (:mod:`tokenizer_limits`), and a text is
always encoded whole: a ``padding`` or ``truncation`` setting in the file is turned off, as
transformers turns them off unless a call asks for them (a prompt is never silently cut or
padded). A Rust panic inside the library is one :class:`TokenizerError` line.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from minigpt_tui.engine.core.errors import TokenizerError
from minigpt_tui.engine.core.files import read_small_file
from minigpt_tui.engine.core.tokenizer import Decoded
from minigpt_tui.engine.core.tokenizer_limits import check_document

TOKENIZER_FILE = "tokenizer.json"
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def byte_table() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the printable character that stands for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


def _uses(component: Any, kind: str) -> bool:
    """Whether a tokenizer.json component (or a Sequence of them) is of ``kind``."""
    if not isinstance(component, dict):
        return False
    if component.get("type") == kind:
        return True
    parts = component.get("decoders") or component.get("pretokenizers") or []
    return any(_uses(part, kind) for part in parts if isinstance(part, dict))


def _check_marker_ids(size: int, bos_id: int | None, eos_ids: tuple[int, ...], source: str) -> None:
    """Refuse a bos or eos id outside a vocabulary of ``size``."""
    for name, value in (("bos", bos_id), *(("eos", e) for e in eos_ids)):
        if value is not None and not 0 <= value < size:
            raise TokenizerError(f"{source}: the {name} id {value} is outside the vocabulary of {size}")


def _special_ids(data: dict[str, Any]) -> frozenset[int]:
    """The ids of the added tokens a tokenizer.json marks special."""
    return frozenset(t["id"] for t in data.get("added_tokens") or []
                     if isinstance(t, dict) and t.get("special") and isinstance(t.get("id"), int))


@dataclass(frozen=True, eq=False)
class LibraryTokenizer:
    """One tokenizer.json; ``vocab_size`` is the model's (rows past the tokenizer's own
    ids are shown as empty pieces)."""

    text: str  # the tokenizer.json as read
    vocab_size: int
    bos_id: int | None
    eos_ids: tuple[int, ...]
    source: str = ""
    specials: frozenset[int] = field(default_factory=frozenset)
    merges: tuple[()] = ()  # ours are byte-pair merges; this one's rules live in its file
    kind: str = "tokenizers"

    @staticmethod
    def from_text(text: str, vocab_size: int | None, *, bos_id: int | None, eos_ids: tuple[int, ...],
                  source: str) -> "LibraryTokenizer":
        data = _document(text, source)
        try:
            check_document(data, vocab_size, source)
        except RecursionError:
            raise TokenizerError(f"{source}: the tokenizer.json nests its parts too deep") from None
        library = _load(text, source)
        own = _guarded(source, "counting its ids", library.get_vocab_size, with_added_tokens=True)
        size = own if vocab_size is None else vocab_size
        if size < own:
            raise TokenizerError(f"{source}: the tokenizer has {own} ids, more than the model's {size} rows")
        _check_marker_ids(size, bos_id, eos_ids, source)
        specials = _special_ids(data)
        made = LibraryTokenizer(text, size, bos_id, eos_ids, source, specials)
        made.__dict__.update(_library=library, _data=data)  # what was just parsed, not parsed again
        return made

    @cached_property
    def _library(self) -> Any:
        return _load(self.text, self.source)

    @cached_property
    def _data(self) -> dict[str, Any]:
        return _document(self.text, self.source)

    @cached_property
    def identity(self) -> str:
        payload = {"tokenizer": hashlib.sha256(self.text.encode()).hexdigest(), "bos": self.bos_id,
                   "eos": list(self.eos_ids), "vocab_size": self.vocab_size}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    @cached_property
    def _byte_level(self) -> bool:
        data = self._data
        return _uses(data.get("decoder"), "ByteLevel") or _uses(data.get("pre_tokenizer"), "ByteLevel")

    @cached_property
    def _byte_fallback(self) -> bool:
        model = self._data.get("model")
        return isinstance(model, dict) and bool(model.get("byte_fallback"))

    @cached_property
    def _tokens(self) -> list[str | None]:
        table: list[str | None] = [None] * self.vocab_size
        vocab = _guarded(self.source, "listing its vocabulary", self._library.get_vocab, with_added_tokens=True)
        for token, token_id in vocab.items():
            if 0 <= token_id < self.vocab_size:
                table[token_id] = token
        return table

    # -- encoding ---------------------------------------------------------------------------
    def encode_prompt(self, text: str) -> list[int]:
        """The prompt as this tokenizer encodes it, with the special tokens it adds."""
        return list(_guarded(self.source, "encoding a text", self._library.encode, text).ids)

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        ids = list(_guarded(self.source, "encoding a text", self._library.encode, text, add_special_tokens=False).ids)
        head = [self.bos_id] if bos and self.bos_id is not None else []
        tail = [self.eos_ids[0]] if eos and self.eos_ids else []
        return head + ids + tail

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """Training records, each between the document markers this model was trained with:
        its BOS (where it has one other than its end of text) before, its EOS after."""
        head = [self.bos_id] if self.bos_id is not None and self.bos_id not in self.eos_ids else []
        tail = [self.eos_ids[0]] if self.eos_ids else []
        encoded = _guarded(self.source, "encoding texts", self._library.encode_batch, list(texts),
                           add_special_tokens=False)
        return [head + list(e.ids) + tail for e in encoded]

    # -- decoding ---------------------------------------------------------------------------
    def piece(self, token_id: int) -> bytes:
        if not 0 <= token_id < self.vocab_size:
            raise TokenizerError(f"token id {token_id} is outside the vocabulary of {self.vocab_size}")
        token = self._tokens[token_id]
        if token is None:
            return b""
        match = _BYTE_PIECE.fullmatch(token) if self._byte_fallback else None
        if match:
            return bytes([int(match.group(1), 16)])
        if token_id in self.specials:
            return token.encode("utf-8")
        if self._byte_level and all(ch in _BYTES for ch in token):
            return bytes(_BYTES[ch] for ch in token)
        return token.replace("▁", " ").encode("utf-8")

    def piece_text(self, token_id: int) -> str:
        if token_id in self.specials and not self._is_byte(token_id):
            return self._tokens[token_id] or ""
        return self.piece(token_id).decode("utf-8", errors="backslashreplace")

    def decode(self, ids: list[int]) -> Decoded:
        return Decoded.of(b"".join(self.piece(i) for i in ids if i not in self.specials or self._is_byte(i)))

    def _is_byte(self, token_id: int) -> bool:
        return self._byte_fallback and bool(_BYTE_PIECE.fullmatch(self._tokens[token_id] or ""))

    def describe(self) -> dict[str, Any]:
        model = self._data.get("model") or {}
        return {"kind": f"tokenizers:{model.get('type', '?')}", "source": self.source,
                "vocab_size": self.vocab_size, "bos_id": self.bos_id, "eos_ids": list(self.eos_ids)}


_BYTES = byte_table()


def _document(text: str, source: str) -> dict[str, Any]:
    """The tokenizer.json as parsed JSON: an object."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise TokenizerError(f"{source}: the tokenizer.json nests its parts too deep") from None
    except ValueError as err:  # malformed JSON, or an integer of more digits than Python converts
        raise TokenizerError(f"{source}: not a usable tokenizer.json ({_first_line(err)})") from None
    if not isinstance(data, dict):
        raise TokenizerError(f"{source}: not a tokenizer.json document (not a JSON object)")
    return data


def _load(text: str, source: str) -> Any:
    """The library's tokenizer, with the file's padding and truncation turned off (module doc)."""
    try:
        library = _guarded(source, "reading the tokenizer.json", Tokenizer.from_str, text)
    except Exception as err:  # the library raises its own Exception type for every refusal
        if isinstance(err, TokenizerError):
            raise
        raise TokenizerError(f"{source}: the tokenizers library refuses this tokenizer.json ({_first_line(err)})") from None
    library.no_padding()
    library.no_truncation()
    return library


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:200]


def _is_panic(err: BaseException) -> bool:
    """pyo3's PanicException: a Rust panic inside the library. It derives from
    BaseException (not Exception) and cannot be imported by name."""
    kind = type(err)
    return kind.__name__ == "PanicException" and kind.__module__ == "pyo3_runtime"


def _guarded(source: str, action: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, a panic inside the library turned into one line."""
    try:
        return call(*args, **kwargs)
    except BaseException as err:
        if not _is_panic(err):
            raise
        raise TokenizerError(f"{source}: the tokenizers library failed while {action} ({_first_line(err)})") from None


def read_library_tokenizer(path: Path, vocab_size: int | None, *, bos_id: int | None,
                           eos_ids: tuple[int, ...]) -> LibraryTokenizer:
    data = read_small_file(path, 256 * 1024 * 1024, "a tokenizer.json")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TokenizerError(f"{path}: not UTF-8 text") from None
    return LibraryTokenizer.from_text(text, vocab_size, bos_id=bos_id, eos_ids=eos_ids, source=str(path))
