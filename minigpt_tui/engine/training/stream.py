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
from minigpt_tui.engine.training.batches import NO_TARGET, Batch, Example
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
    """The train and validation token arrays of one (corpus, tokenizer); with
    ``--train-on assistant`` also a mask of each (uint8, 1 where the token is a target the
    loss counts)."""

    train: np.ndarray
    validation: np.ndarray
    train_mask: np.ndarray | None = None
    validation_mask: np.ndarray | None = None

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
    """Every full window of ``context + 1`` tokens of one split, by start offset. With a
    ``mask``, only the windows with a target the mask counts, in order (window i starts at
    ``starts[i]``), and the targets it does not count are no targets."""

    def __init__(self, tokens: np.ndarray, context: int, mask: np.ndarray | None = None) -> None:
        self.tokens = tokens
        self.context = context
        self.mask = mask
        self._span = np.arange(context + 1, dtype=np.int64)
        self.starts = None if mask is None else counted_starts(mask, context)

    def __len__(self) -> int:
        if self.starts is not None:
            return int(self.starts.size)
        return max(0, int(self.tokens.size) - self.context)

    def offsets(self, windows: Sequence[int] | np.ndarray) -> np.ndarray:
        """Where each window starts in the token array."""
        indices = np.asarray(windows, dtype=np.int64)
        return indices if self.starts is None else self.starts[indices]

    @overload
    def __getitem__(self, start: int) -> Example: ...
    @overload
    def __getitem__(self, start: slice) -> list[Example]: ...
    def __getitem__(self, start: int | slice) -> Example | list[Example]:
        if isinstance(start, slice):
            return [self[i] for i in range(*start.indices(len(self)))]
        if not -len(self) <= start < len(self):
            raise IndexError(f"window {start} outside 0..{len(self) - 1}")
        start = int(self.offsets([start % len(self)])[0])
        ids = self.tokens[start : start + self.context + 1].astype(np.int64).tolist()
        return Example(tuple(ids), record=0, window=start)

    def batch(self, windows: Sequence[int] | np.ndarray) -> Batch:
        """The ``windows``: inputs are tokens 0..T-1, targets 1..T (without a mask, all valid)."""
        offsets = self.offsets(windows)
        at = offsets[:, None] + self._span
        ids = torch.from_numpy(self.tokens[at].astype(np.int64))
        inputs = ids[:, :-1].contiguous()
        if self.mask is None:
            return Batch(inputs, ids[:, 1:].contiguous(), int(offsets.size) * self.context)
        counted = torch.from_numpy(self.mask[at[:, 1:]].astype(bool))
        targets = torch.where(counted, ids[:, 1:], NO_TARGET)  # a new tensor: the inputs keep every id
        return Batch(inputs, targets, int(counted.sum()))

    def tiling(self) -> list[int]:
        """Non-overlapping windows from the start: every covered target predicted once
        (with a mask, the windows among them that hold a counted target)."""
        if self.starts is None:
            return list(range(0, len(self), self.context))
        tiles = np.arange(0, max(0, int(self.tokens.size) - self.context), self.context, dtype=np.int64)
        found = np.searchsorted(self.starts, tiles)
        held = found < self.starts.size
        held[held] = self.starts[found[held]] == tiles[held]
        return found[held].tolist()


def counted_starts(mask: np.ndarray, context: int) -> np.ndarray:
    """The start offsets of the full windows whose targets (tokens 1..context) hold one the mask counts."""
    windows = max(0, int(mask.size) - context)
    running = np.concatenate(([0], np.cumsum(mask, dtype=np.int64)))
    counted = running[context + 1 : context + 1 + windows] - running[1 : 1 + windows]
    return np.flatnonzero(counted > 0)


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
    splits = [("training", stream.train, stream.train_mask)]
    if has_validation:
        splits.append(("validation", stream.validation, stream.validation_mask))
    for split, tokens, mask in splits:  # an evaluation reads the tiling: it must count a target
        if mask is not None and not TokenWindows(tokens, context, mask).tiling():
            raise CorpusError(f"corpus {source}: the {split} split has no token of an assistant's turn that a "
                              "window counts, so --train-on assistant has nothing to learn or evaluate there")
