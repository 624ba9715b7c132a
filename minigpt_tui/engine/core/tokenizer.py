"""Byte-level BPE with transparent ids.

Ids: BOS=0, EOS=1, the 256 bytes in byte order (ids 2..257), then one id per merge in rank
order (merge r produces id 258 + r). There is no PAD id: padded positions carry no target.
Training counts adjacent pairs over whole records (no pre-splitting) and merges the most
frequent pair; a tie goes to the pair that is smallest in our id space, (left, right).
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections import Counter
from dataclasses import dataclass
from functools import cached_property

from minigpt_tui.engine.core.errors import TokenizerError
from minigpt_tui.engine.core.token_ids import BOS, BYTE_OFFSET, EOS, FIRST_MERGE_ID

__all__ = ["BOS", "BYTE_OFFSET", "EOS", "FIRST_MERGE_ID", "ByteBPETokenizer", "Decoded", "learn_merges"]


@dataclass(frozen=True)
class Decoded:
    """Raw bytes and whether they are valid UTF-8; ``display`` replaces invalid bytes."""

    data: bytes
    valid_utf8: bool

    @property
    def display(self) -> str:
        return self.data.decode("utf-8", errors="replace")

    @staticmethod
    def of(data: bytes) -> "Decoded":
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return Decoded(data, False)
        return Decoded(data, True)


@dataclass(frozen=True)
class ByteBPETokenizer:
    merges: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        for rank, (left, right) in enumerate(self.merges):
            limit = FIRST_MERGE_ID + rank
            if not (BYTE_OFFSET <= left < limit and BYTE_OFFSET <= right < limit):
                raise TokenizerError(f"merge {rank} ({left}, {right}) refers to an unknown id")

    @property
    def vocab_size(self) -> int:
        return FIRST_MERGE_ID + len(self.merges)

    @property
    def bos_id(self) -> int:
        return BOS

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return (EOS,)

    @cached_property
    def _ranks(self) -> dict[tuple[int, int], int]:
        return {pair: rank for rank, pair in enumerate(self.merges)}

    @cached_property
    def _pieces(self) -> tuple[bytes, ...]:
        pieces: list[bytes] = [b"", b""] + [bytes([b]) for b in range(256)]
        for left, right in self.merges:
            pieces.append(pieces[left] + pieces[right])
        return tuple(pieces)

    @property
    def identity(self) -> str:
        payload = {"bos": BOS, "eos": EOS, "byte_offset": BYTE_OFFSET, "merges": self.merges}
        text = json.dumps(payload, separators=(",", ":"), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    # -- encoding ---------------------------------------------------------------------
    def encode_bytes(self, data: bytes) -> list[int]:
        ids = [b + BYTE_OFFSET for b in data]
        ranks = self._ranks
        while len(ids) > 1:
            best_rank, best_pair = None, None
            for pair in zip(ids, ids[1:]):
                rank = ranks.get(pair)
                if rank is not None and (best_rank is None or rank < best_rank):
                    best_rank, best_pair = rank, pair
            if best_pair is None:
                break
            ids = _merge(ids, best_pair, FIRST_MERGE_ID + best_rank)
        return ids

    def encode(self, text: str, *, bos: bool = True, eos: bool = True) -> list[int]:
        ids = self.encode_bytes(text.encode("utf-8"))
        return ([BOS] if bos else []) + ids + ([EOS] if eos else [])

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """Encode many records at once (BOS and EOS added): the merges replayed in rank
        order over one pair index, equal to :meth:`encode` of each, much faster."""
        from minigpt_tui.engine.core.pair_index import PairIndex  # deferred: imports numpy

        index = PairIndex([(t, 1) for t in texts], self.vocab_size)
        for rank, pair in enumerate(self.merges):
            code = index.code(pair)
            if code in index.counts:
                index.merge(code, FIRST_MERGE_ID + rank)
        return [[BOS, *ids, EOS] for ids in index.sequences()]

    def encode_prompt(self, text: str) -> list[int]:
        """A generation prompt: BOS prepended, no terminal EOS."""
        return self.encode(text, bos=True, eos=False)

    # -- decoding ---------------------------------------------------------------------
    def piece(self, token_id: int) -> bytes:
        if not 0 <= token_id < self.vocab_size:
            raise TokenizerError(f"token id {token_id} is outside the vocabulary of {self.vocab_size}")
        return self._pieces[token_id]

    def piece_text(self, token_id: int) -> str:
        """A readable label: <bos>/<eos>, else the bytes with invalid UTF-8 shown as \\xNN."""
        if token_id == BOS:
            return "<bos>"
        if token_id == EOS:
            return "<eos>"
        return self.piece(token_id).decode("utf-8", errors="backslashreplace")

    def decode(self, ids: list[int]) -> Decoded:
        return Decoded.of(b"".join(self.piece(i) for i in ids if i not in (BOS, EOS)))

    # -- training ---------------------------------------------------------------------
    @staticmethod
    def train(texts: list[str], merges: int) -> "ByteBPETokenizer":
        """Learn up to ``merges`` merges; fewer when no adjacent pair remains."""
        return ByteBPETokenizer(learn_merges(texts, merges))


def learn_merges(texts: list[str], merges: int) -> tuple[tuple[int, int], ...]:
    """Most frequent adjacent pair first; a tie goes to the smallest (left, right) id pair."""
    if merges == 0:
        return ()
    from minigpt_tui.engine.core.pair_index import PairIndex  # deferred: imports numpy

    index = PairIndex(list(Counter(texts).items()), FIRST_MERGE_ID + merges)
    # A pair's code orders like (left, right), so the heap's smallest entry is the most
    # frequent pair and, among equals, the smallest in our id space.
    heap = [(-count, code) for code, count in index.counts.items()]
    heapq.heapify(heap)
    learned: list[tuple[int, int]] = []
    while len(learned) < merges and heap:
        negative, code = heapq.heappop(heap)
        if index.counts.get(code, 0) != -negative:
            continue  # a stale heap entry
        learned.append(index.pair(code))
        for changed, count in index.merge(code, FIRST_MERGE_ID + len(learned) - 1).items():
            heapq.heappush(heap, (-count, changed))
    return tuple(learned)


def _merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    out: list[int] = []
    i = 0
    left, right = pair
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == left and ids[i + 1] == right:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out
