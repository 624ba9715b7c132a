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

from minigpt_tui.engine.errors import TokenizerError

BOS = 0
EOS = 1
BYTE_OFFSET = 2
FIRST_MERGE_ID = BYTE_OFFSET + 256


@dataclass(frozen=True)
class Decoded:
    """Raw bytes and whether they are valid UTF-8; ``display`` replaces invalid bytes."""

    data: bytes
    valid_utf8: bool

    @property
    def display(self) -> str:
        return self.data.decode("utf-8", errors="replace")


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
        index = _PairIndex([(t, 1) for t in texts])
        for rank, pair in enumerate(self.merges):
            if pair in index.counts:
                index.merge(pair, FIRST_MERGE_ID + rank)
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
        data = b"".join(self.piece(i) for i in ids if i not in (BOS, EOS))
        try:
            data.decode("utf-8")
            valid = True
        except UnicodeDecodeError:
            valid = False
        return Decoded(data, valid)

    # -- training ---------------------------------------------------------------------
    @staticmethod
    def train(texts: list[str], merges: int) -> "ByteBPETokenizer":
        """Learn up to ``merges`` merges; fewer when no adjacent pair remains."""
        return ByteBPETokenizer(learn_merges(texts, merges))


def learn_merges(texts: list[str], merges: int) -> tuple[tuple[int, int], ...]:
    """Most frequent adjacent pair first; a tie goes to the smallest (left, right) id pair."""
    if merges == 0:
        return ()
    index = _PairIndex(list(Counter(texts).items()))
    heap = [(-c, pair) for pair, c in index.counts.items()]
    heapq.heapify(heap)
    learned: list[tuple[int, int]] = []
    while len(learned) < merges and heap:
        negative, pair = heapq.heappop(heap)
        if index.counts.get(pair, 0) != -negative:
            continue  # a stale heap entry
        learned.append(pair)
        for changed in index.merge(pair, FIRST_MERGE_ID + len(learned) - 1):
            count = index.counts.get(changed, 0)
            if count > 0:
                heapq.heappush(heap, (-count, changed))
    return tuple(learned)


class _PairIndex:
    """Adjacent-pair counts over many records, updated only where a merge happens.

    Every position sits in a linked list per record, and each pair keeps the positions
    where it may start. A merge's work is proportional to its occurrences, not to the
    corpus size, so 5 MB of text trains in seconds. Applying the merges in rank order
    is also BPE encoding: a merge never creates a pair of lower rank than itself.
    """

    def __init__(self, records: list[tuple[str, int]]) -> None:
        tokens: list[int] = []
        weight: list[int] = []  # how many identical records share this position
        self.record_starts: list[int] = []
        for text, count in records:
            data = text.encode("utf-8")
            self.record_starts.append(len(tokens))
            tokens.extend(b + BYTE_OFFSET for b in data)
            weight.extend([count] * len(data))
            tokens.append(-1)  # record boundary: no pair crosses it
            weight.append(0)
        self.tokens, self.weight, self.size = tokens, weight, len(tokens)
        self.nxt = list(range(1, self.size + 1))
        self.prv = list(range(-1, self.size - 1))
        self.counts: dict[tuple[int, int], int] = {}
        self.starts: dict[tuple[int, int], list[int]] = {}
        for i in range(self.size - 1):
            a, b = tokens[i], tokens[i + 1]
            if a >= 0 and b >= 0:
                self.counts[(a, b)] = self.counts.get((a, b), 0) + weight[i]
                self.starts.setdefault((a, b), []).append(i)

    def merge(self, pair: tuple[int, int], new_id: int) -> set[tuple[int, int]]:
        """Merge every occurrence, left to right; return the pairs whose counts changed."""
        tokens, nxt, prv, counts, starts, size = self.tokens, self.nxt, self.prv, self.counts, self.starts, self.size
        a, b = pair
        changed: set[tuple[int, int]] = set()
        for i in sorted(starts.pop(pair, ())):  # ascending: overlapping runs merge left to right
            j = nxt[i]
            if tokens[i] != a or j >= size or tokens[j] != b:
                continue  # this start was consumed by an earlier merge
            w = self.weight[i]
            p, n = prv[i], nxt[j]
            left = tokens[p] if p >= 0 and tokens[p] >= 0 else None
            right = tokens[n] if n < size and tokens[n] >= 0 else None
            if left is not None:
                counts[(left, a)] -= w
                changed.add((left, a))
            if right is not None:
                counts[(b, right)] -= w
                changed.add((b, right))
            tokens[i], tokens[j] = new_id, -2
            nxt[i] = n
            if n < size:
                prv[n] = i
            if left is not None:
                key = (left, new_id)
                counts[key] = counts.get(key, 0) + w
                starts.setdefault(key, []).append(p)
                changed.add(key)
            if right is not None:
                key = (new_id, right)
                counts[key] = counts.get(key, 0) + w
                starts.setdefault(key, []).append(i)
                changed.add(key)
        counts.pop(pair, None)
        changed.discard(pair)
        for key in changed:
            if counts.get(key, 0) <= 0:
                counts.pop(key, None)
        return changed

    def sequences(self) -> list[list[int]]:
        out = []
        for start in self.record_starts:
            ids, i = [], start
            while self.tokens[i] != -1:
                ids.append(self.tokens[i])
                i = self.nxt[i]
            out.append(ids)
        return out


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
