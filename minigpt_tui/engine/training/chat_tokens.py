"""Chat records as tokens: each record as its template renders it, encoded with nothing
added (the template places the model's own markers), as transformers tokenizes a rendered
chat; with ``--train-on assistant`` a mask of the tokens the loss counts, one per token:
the assistant's turns (:mod:`minigpt_tui.engine.training.chat_data` finds them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minigpt_tui.engine.core.errors import CorpusError
from minigpt_tui.engine.training.chat_data import ChatTurns
from minigpt_tui.engine.training.stream import (
    ENCODE_CHUNK,
    Progress,
    TokenStream,
    token_dtype,
)


def chat_stream(train: Sequence[str], validation: Sequence[str], turns: tuple[list[ChatTurns], list[ChatTurns]] | None,
                tokenizer: Any, source: str, progress: Progress | None = None) -> TokenStream:
    """Both splits of a chat corpus as one token array each, every record as its template
    renders it (nothing added: the template places the model's own markers); with
    ``turns``, the masks of the tokens the loss counts."""
    train_tokens, train_mask = chat_tokens(train, turns[0] if turns else None, tokenizer, source, progress,
                                           "encoding train")
    validation_tokens, validation_mask = chat_tokens(validation, turns[1] if turns else None, tokenizer, source,
                                                     progress, "encoding validation")
    return TokenStream(train_tokens, validation_tokens, train_mask, validation_mask)


def chat_tokens(texts: Sequence[str], turns: Sequence[ChatTurns] | None, tokenizer: Any, source: str,
                progress: Progress | None, label: str) -> tuple[np.ndarray, np.ndarray | None]:
    """One split's token array and (with ``turns``) its mask: 1 where the token is a target the loss counts."""
    dtype = token_dtype(tokenizer.vocab_size)
    ids: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    for number, text in enumerate(texts):
        record = np.asarray(encode_plain(tokenizer, text), dtype=dtype)
        ids.append(record)
        if turns is not None:
            masks.append(assistant_mask(record, text, turns[number], tokenizer))
        if progress is not None and ((number + 1) % ENCODE_CHUNK == 0 or number + 1 == len(texts)):
            progress(label, number + 1, len(texts))
    tokens = np.concatenate(ids) if ids else np.zeros(0, dtype=dtype)
    if turns is None:
        return tokens, None
    return tokens, np.concatenate(masks) if masks else np.zeros(0, dtype=np.uint8)


def encode_plain(tokenizer: Any, text: str) -> list[int]:
    """``text`` as the tokenizer encodes it, no markers added (the special tokens the
    text spells are the tokenizer's own, as transformers tokenizes a rendered chat)."""
    return list(tokenizer.encode(text, bos=False, eos=False))


def assistant_mask(ids: np.ndarray, text: str, turns: ChatTurns, tokenizer: Any) -> np.ndarray:
    """1 for the tokens of each assistant turn: those that the conversation through the turn
    has beyond its prompt (both encoded on their own, and each the start of the whole)."""
    mask = np.zeros(ids.size, dtype=np.uint8)
    for start, end in turns.spans:
        before = encode_plain(tokenizer, text[:start])
        through = ids.tolist() if end == len(text) else encode_plain(tokenizer, text[:end])
        if not (_begins(ids, through) and through[: len(before)] == before):
            raise CorpusError(f"{turns.where}: the tokenizer joins an assistant turn's first or last token with the "
                              "text beside it, so --train-on assistant cannot count its tokens exactly; use "
                              "--train-on all")
        mask[len(before) : len(through)] = 1
    return mask


def _begins(ids: np.ndarray, prefix: list[int]) -> bool:
    return len(prefix) <= ids.size and ids[: len(prefix)].tolist() == prefix
