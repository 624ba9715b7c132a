"""Token-stream corpora: each split's records joined into one flat token array, and windows.

Every record of a split is encoded once as ``BOS text EOS`` and the records are joined in
source order into one array (uint16 when the vocabulary fits, else uint32). A training
example is a window of ``context + 1`` consecutive tokens starting at any offset from 0 to
``len - context - 1``: every window is full, nothing is padded, and a window may cross a
record boundary (the model sees EOS then BOS there). Batches are cut from the array with
one indexing operation, never through Python lists of ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, overload

import numpy as np
import torch

from minigpt_tui.engine.core.errors import CorpusError
from minigpt_tui.engine.core.tokenizer import BOS, BYTE_OFFSET, EOS, ByteBPETokenizer
from minigpt_tui.engine.training.batches import Batch, Example
from minigpt_tui.engine.training.fast_encoder import fast_encoder

# (what is being done, units done, units in all): records while encoding, steps otherwise.
Progress = Callable[[str, int, int], None]
TRAINING_TOKENIZER = "training the tokenizer"
READING_CACHE = "reading the token cache"
ENCODE_CHUNK = 4096  # records per fast-encoder call: bounds the Python ints alive at once


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)


@dataclass(frozen=True)
class TokenStream:
    """The train and validation token arrays of one (corpus, tokenizer)."""

    train: np.ndarray
    validation: np.ndarray

    @property
    def tokens(self) -> int:
        return int(self.train.size + self.validation.size)


def encode_records(
    texts: Sequence[str], tokenizer: ByteBPETokenizer, *, progress: Progress | None = None, label: str = "encoding"
) -> np.ndarray:
    """``BOS text EOS`` of every text, joined in order, as one array."""
    dtype = token_dtype(tokenizer.vocab_size)
    if not texts:
        return np.zeros(0, dtype=dtype)
    if getattr(tokenizer, "kind", "") == "tokenizers":  # a model's own tokenizer.json
        return _encode_with_library(texts, tokenizer, dtype, progress, label)
    if not tokenizer.merges:
        return _encode_bytes_only(texts, dtype, progress, label)

    encoder = fast_encoder(tokenizer)
    encode_many = encoder.encode_many if encoder is not None else tokenizer.encode_many
    parts: list[np.ndarray] = []
    for start in range(0, len(texts), ENCODE_CHUNK):
        chunk = list(texts[start : start + ENCODE_CHUNK])
        ids = encode_many(chunk)
        parts.append(np.fromiter(chain.from_iterable(ids), dtype=dtype, count=sum(map(len, ids))))
        if progress is not None:
            progress(label, min(start + ENCODE_CHUNK, len(texts)), len(texts))
    return np.concatenate(parts)


def _encode_with_library(texts: Sequence[str], tokenizer: Any, dtype: np.dtype, progress: Progress | None,
                         label: str) -> np.ndarray:
    """Each record as the model's own tokenizer encodes it, between its document markers."""
    parts: list[np.ndarray] = []
    for start in range(0, len(texts), ENCODE_CHUNK):
        ids = tokenizer.encode_many(list(texts[start : start + ENCODE_CHUNK]))
        parts.append(np.fromiter(chain.from_iterable(ids), dtype=dtype, count=sum(map(len, ids))))
        if progress is not None:
            progress(label, min(start + ENCODE_CHUNK, len(texts)), len(texts))
    return np.concatenate(parts)


def _encode_bytes_only(texts: Sequence[str], dtype: np.dtype, progress: Progress | None, label: str) -> np.ndarray:
    """Without merges every byte is its own token: the ids are the bytes plus an offset."""
    parts: list[np.ndarray] = []
    for start in range(0, len(texts), ENCODE_CHUNK * 16):
        data = [t.encode("utf-8") for t in texts[start : start + ENCODE_CHUNK * 16]]
        lengths = np.fromiter((len(d) for d in data), dtype=np.int64, count=len(data))
        out = np.empty(int(lengths.sum()) + 2 * len(data), dtype=dtype)
        bos_at = np.concatenate(([0], np.cumsum(lengths + 2)[:-1]))
        eos_at = bos_at + lengths + 1
        content = np.ones(out.size, dtype=bool)
        content[bos_at] = False
        content[eos_at] = False
        out[bos_at] = BOS
        out[eos_at] = EOS
        out[content] = np.frombuffer(b"".join(data), dtype=np.uint8).astype(dtype) + BYTE_OFFSET
        parts.append(out)
        if progress is not None:
            progress(label, min(start + ENCODE_CHUNK * 16, len(texts)), len(texts))
    return np.concatenate(parts)


class TokenWindows(Sequence[Example]):
    """Every full window of ``context + 1`` tokens of one split, by start offset."""

    def __init__(self, tokens: np.ndarray, context: int) -> None:
        self.tokens = tokens
        self.context = context
        self._span = np.arange(context + 1, dtype=np.int64)

    def __len__(self) -> int:
        return max(0, int(self.tokens.size) - self.context)

    @overload
    def __getitem__(self, start: int) -> Example: ...
    @overload
    def __getitem__(self, start: slice) -> list[Example]: ...
    def __getitem__(self, start: int | slice) -> Example | list[Example]:
        if isinstance(start, slice):
            return [self[i] for i in range(*start.indices(len(self)))]
        if not -len(self) <= start < len(self):
            raise IndexError(f"window {start} outside 0..{len(self) - 1}")
        start %= len(self)
        ids = self.tokens[start : start + self.context + 1].astype(np.int64).tolist()
        return Example(tuple(ids), record=0, window=start)

    def batch(self, starts: Sequence[int] | np.ndarray) -> Batch:
        """The windows at ``starts``: inputs are tokens 0..T-1, targets 1..T, all valid."""
        offsets = np.asarray(starts, dtype=np.int64)
        windows = torch.from_numpy(self.tokens[offsets[:, None] + self._span].astype(np.int64))
        return Batch(windows[:, :-1].contiguous(), windows[:, 1:].contiguous(), int(offsets.size) * self.context)

    def tiling(self) -> list[int]:
        """Non-overlapping windows from the start: every covered target predicted once."""
        return list(range(0, len(self), self.context))


def check_stream(stream: TokenStream, context: int, source: str, has_validation: bool) -> None:
    """Refuse splits too short for one window, naming the sizes."""
    window = context + 1
    if stream.train.size < window:
        raise CorpusError(
            f"corpus {source}: the training split has {stream.train.size} tokens, fewer than one window "
            f"of {window} (context {context} + 1)"
        )
    if has_validation and stream.validation.size < window:
        raise CorpusError(
            f"corpus {source}: the validation split has {stream.validation.size} tokens, fewer than one "
            f"evaluation window of {window} (context {context} + 1); lower corpus.val_every or the context"
        )
