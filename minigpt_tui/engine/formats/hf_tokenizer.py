"""Our byte-level BPE as a Hugging Face ``tokenizer.json``, and such a file read back.

The layout that holds exactly our ids: a BPE model whose vocabulary maps ByteLevel-mapped
strings to ids (``<bos>`` 0, ``<eos>`` 1, byte b at b + 2, merge r at 258 + r), the merges
in rank order, a ``ByteLevel(add_prefix_space=False, use_regex=False)`` pre-tokenizer (the
whole text is one word, as in our tokenizer, which never pre-splits), a ``<bos> $A``
template post-processor (a prompt encodes as our ``encode_prompt`` does: BOS, then the text,
no EOS, so transformers' ``generate`` and ``pipeline`` continue it; the EOS that closes each
training document is added by our trainer, not by this file), and no normalizer. BPE applies the lowest-ranked merge present
first; a merge of rank r only involves ids below 258 + r, so every occurrence of one rank
is merged before any later rank can apply, exactly as our encoder does.

A vocabulary maps each string to one id, so two merges that produce the same bytes cannot
be written in this format: such a tokenizer is refused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.errors import InputRefused, TokenizerError
from minigpt_tui.engine.core.tokenizer import (
    BOS,
    BYTE_OFFSET,
    EOS,
    FIRST_MERGE_ID,
    ByteBPETokenizer,
)
from minigpt_tui.engine.formats.bounded_json import JSONRefused, read_json_input

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
SENTENCEPIECE_FILE = "tokenizer.model"
BOS_TOKEN = "<bos>"
EOS_TOKEN = "<eos>"


def byte_to_unicode() -> dict[int, str]:
    """ByteLevel's printable stand-in for each byte: printable Latin-1 bytes stand for
    themselves; the others take code points 256, 257, ... in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table: dict[int, str] = {}
    extra = 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def _mapped(data: bytes, table: dict[int, str]) -> str:
    return "".join(table[b] for b in data)


def vocabulary_strings(tokenizer: ByteBPETokenizer) -> list[str]:
    """The string of every id, in id order; refuses pieces the format cannot hold apart."""
    table = byte_to_unicode()
    strings = [BOS_TOKEN, EOS_TOKEN]
    seen: dict[str, int] = {BOS_TOKEN: BOS, EOS_TOKEN: EOS}
    for token_id in range(BYTE_OFFSET, tokenizer.vocab_size):
        text = _mapped(tokenizer.piece(token_id), table)
        if text in seen:
            earlier = seen[text]
            if earlier in (BOS, EOS):
                raise TokenizerError(
                    f"merge {token_id - FIRST_MERGE_ID} produces the text of the special token {text!r}: "
                    "a tokenizer.json vocabulary cannot hold both"
                )
            raise TokenizerError(
                f"merges {earlier - FIRST_MERGE_ID} and {token_id - FIRST_MERGE_ID} both produce the bytes "
                f"{tokenizer.piece(token_id)!r}: a tokenizer.json vocabulary maps one string to one id, "
                "so this tokenizer cannot be exported"
            )
        seen[text] = token_id
        strings.append(text)
    return strings


def _added_token(token_id: int, content: str) -> dict[str, Any]:
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": True,
    }


def _special(name: str, type_id: int = 0) -> dict[str, Any]:
    return {"SpecialToken": {"id": name, "type_id": type_id}}


def _sequence(name: str, type_id: int) -> dict[str, Any]:
    return {"Sequence": {"id": name, "type_id": type_id}}


def tokenizer_json(tokenizer: ByteBPETokenizer) -> dict[str, Any]:
    """The ``tokenizer.json`` document that encodes text to exactly our ids."""
    strings = vocabulary_strings(tokenizer)
    merges = [[strings[left], strings[right]] for left, right in tokenizer.merges]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [_added_token(BOS, BOS_TOKEN), _added_token(EOS, EOS_TOKEN)],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [_special(BOS_TOKEN), _sequence("A", 0)],
            "pair": [_special(BOS_TOKEN), _sequence("A", 0), _sequence("B", 1)],
            "special_tokens": {
                BOS_TOKEN: {"id": BOS_TOKEN, "ids": [BOS], "tokens": [BOS_TOKEN]},
                EOS_TOKEN: {"id": EOS_TOKEN, "ids": [EOS], "tokens": [EOS_TOKEN]},
            },
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {text: token_id for token_id, text in enumerate(strings)},
            "merges": merges,
        },
    }


def tokenizer_config(context: int) -> dict[str, Any]:
    """``tokenizer_config.json``: the fast tokenizer class, special tokens, and
    ``split_special_tokens`` so that the text "<bos>" in a prompt is bytes, as it is here."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "add_bos_token": True,
        "add_eos_token": False,
        "split_special_tokens": True,
        "clean_up_tokenization_spaces": False,
        "model_max_length": context,
        "added_tokens_decoder": {
            str(BOS): {k: v for k, v in _added_token(BOS, BOS_TOKEN).items() if k != "id"},
            str(EOS): {k: v for k, v in _added_token(EOS, EOS_TOKEN).items() if k != "id"},
        },
    }


def special_tokens_map() -> dict[str, Any]:
    return {"bos_token": BOS_TOKEN, "eos_token": EOS_TOKEN}


# -- reading back ---------------------------------------------------------------------------
def _pre_tokenizer_problem(pre: Any) -> str | None:
    """None when the pre-tokenizer treats the whole text as one ByteLevel word."""
    if isinstance(pre, dict) and pre.get("type") == "Sequence":
        inner = pre.get("pretokenizers") or []
        if len(inner) == 1:
            return _pre_tokenizer_problem(inner[0])
        return f"a sequence of {len(inner)} pre-tokenizers"
    if not isinstance(pre, dict):
        return "no ByteLevel pre-tokenizer"
    kind = pre.get("type")
    if kind == "Metaspace":
        return "SentencePiece-style Metaspace pre-tokenizer"
    if kind != "ByteLevel":
        return f"pre-tokenizer {kind!r}"
    if pre.get("use_regex", True):
        return "ByteLevel pre-tokenizer that splits text with a regex (use_regex=true)"
    if pre.get("add_prefix_space", False):
        return "ByteLevel pre-tokenizer that adds a prefix space"
    return None


def tokenizer_from_json(data: Any, source: Path | str) -> ByteBPETokenizer:
    """Our tokenizer from a ``tokenizer.json`` of the layout above; anything else is
    refused with one line naming what is unsupported."""
    where = str(source)
    model = _bpe_model(data, where)
    _require_whole_text_byte_level(data, model, where)
    vocab = model.get("vocab")
    merges = model.get("merges")
    if not isinstance(vocab, dict) or not isinstance(merges, list):
        raise TokenizerError(f"{where}: the BPE model has no vocab map or merges list")
    by_id = _vocabulary_by_id(vocab, where)
    _require_special_ids(data, where)
    _require_byte_ids(by_id, where)
    pairs = _merge_pairs(merges, by_id, where)
    if len(by_id) != FIRST_MERGE_ID + len(pairs) or max(by_id) != len(by_id) - 1:
        raise TokenizerError(
            f"{where}: unsupported vocabulary layout: {len(by_id)} entries for 2 special ids, 256 bytes "
            f"and {len(pairs)} merges"
        )
    try:
        return ByteBPETokenizer(tuple(pairs))
    except TokenizerError as err:
        raise TokenizerError(f"{where}: {err}") from None


def _bpe_model(data: Any, where: str) -> dict[str, Any]:
    """The document's model section, when it is a byte-level BPE model."""
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise TokenizerError(f"{where}: not a tokenizer.json document (no model section)")
    model = data["model"]
    kind = model.get("type")
    if kind == "Unigram":
        raise TokenizerError(f"{where}: SentencePiece (Unigram) tokenizers are not supported; only byte-level BPE")
    if kind != "BPE":
        raise TokenizerError(f"{where}: {kind} tokenizers are not supported; only byte-level BPE")
    if model.get("byte_fallback"):
        raise TokenizerError(f"{where}: SentencePiece-style BPE (byte_fallback) is not supported; only byte-level BPE")
    return model


def _require_whole_text_byte_level(data: dict[str, Any], model: dict[str, Any], where: str) -> None:
    """The text reaches the merges as it is: one ByteLevel word, no normalizer, no BPE options."""
    problem = _pre_tokenizer_problem(data.get("pre_tokenizer"))
    if problem:
        raise TokenizerError(f"{where}: unsupported tokenizer: {problem}; only whole-text ByteLevel BPE is supported")
    if data.get("normalizer") is not None:
        raise TokenizerError(f"{where}: unsupported tokenizer: it normalizes text before encoding")
    for option in ("continuing_subword_prefix", "end_of_word_suffix", "dropout", "ignore_merges"):
        if model.get(option):
            raise TokenizerError(f"{where}: unsupported tokenizer: BPE {option} is set")


def _vocabulary_by_id(vocab: dict[str, Any], where: str) -> dict[int, str]:
    by_id: dict[int, str] = {}
    for text, token_id in vocab.items():
        if not isinstance(token_id, int) or token_id in by_id:
            raise TokenizerError(f"{where}: vocabulary id {token_id!r} is not a distinct integer")
        by_id[token_id] = text
    return by_id


def _require_special_ids(data: dict[str, Any], where: str) -> None:
    """BOS and EOS are added special tokens at their ids, and there is no other added token."""
    specials = {t["id"]: t for t in _added_tokens(data, where)}
    for token_id, label in ((BOS, "BOS"), (EOS, "EOS")):
        added = specials.get(token_id)
        if added is None or not added.get("special"):
            raise TokenizerError(f"{where}: id {token_id} is not a special token; this layout needs {label} at {token_id}")
    extra_specials = sorted(i for i in specials if i not in (BOS, EOS))
    if extra_specials:
        raise TokenizerError(f"{where}: unsupported tokenizer: extra added token at id {extra_specials[0]}")


def _added_tokens(data: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """``added_tokens``: a list of token objects, each with a whole-number id."""
    added_tokens = data.get("added_tokens") or []
    if not isinstance(added_tokens, list) or not all(
            isinstance(t, dict) and isinstance(t.get("id"), int) and not isinstance(t.get("id"), bool)
            for t in added_tokens):
        raise TokenizerError(f"{where}: added_tokens is not a list of tokens with whole-number ids")
    return added_tokens


def _require_byte_ids(by_id: dict[int, str], where: str) -> None:
    table = byte_to_unicode()
    for byte in range(256):
        if by_id.get(byte + BYTE_OFFSET) != table[byte]:
            raise TokenizerError(
                f"{where}: unsupported vocabulary layout: id {byte + BYTE_OFFSET} is not byte {byte} "
                "(bytes must hold ids 2..257 in byte order)"
            )


def _merge_parts(merge: Any) -> list[Any]:
    """A merge as its two strings: ``"a b"`` (older files) or ``["a", "b"]``."""
    if isinstance(merge, str):
        return merge.split(" ")
    return list(merge) if isinstance(merge, list) else []


def _merge_pairs(merges: list[Any], by_id: dict[int, str], where: str) -> list[tuple[int, int]]:
    """The merges as id pairs, each producing the next id in rank order."""
    ids = {text: token_id for token_id, text in by_id.items()}
    pairs: list[tuple[int, int]] = []
    for rank, merge in enumerate(merges):
        parts = _merge_parts(merge)
        if len(parts) != 2 or not all(isinstance(p, str) for p in parts):
            raise TokenizerError(f"{where}: merge {rank} is not a pair of strings")
        left, right = parts
        if left not in ids or right not in ids:
            raise TokenizerError(f"{where}: merge {rank} names a string that is not in the vocabulary")
        produced = ids.get(left + right)
        if produced != FIRST_MERGE_ID + rank:
            raise TokenizerError(
                f"{where}: unsupported vocabulary layout: merge {rank} produces id {produced}, "
                f"not {FIRST_MERGE_ID + rank} (merges must take ids 258, 259, ... in rank order)"
            )
        pairs.append((ids[left], ids[right]))
    return pairs


def read_tokenizer_json(path: Path) -> ByteBPETokenizer:
    if not os.path.lexists(path):
        raise TokenizerError(f"tokenizer file not found: {path}")
    try:
        data = read_json_input(path, "tokenizer file")
    except (InputRefused, JSONRefused) as err:
        raise TokenizerError(str(err)) from None
    return tokenizer_from_json(data, path)
