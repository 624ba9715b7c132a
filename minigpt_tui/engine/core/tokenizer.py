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

import numpy as np

from minigpt_tui.engine.core.errors import TokenizerError

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
        index = _PairIndex([(t, 1) for t in texts], self.vocab_size)
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
    index = _PairIndex(list(Counter(texts).items()), FIRST_MERGE_ID + merges)
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


class _PairIndex:
    """Adjacent-pair counts over many records, updated only where a merge happens.

    The records lie in one array, each followed by a boundary (-1) that no pair crosses;
    every position sits in a doubly linked list (``nxt``/``prv``) and each pair keeps the
    positions where it may start (some stale, checked at use). A pair is stored as one
    integer code ``left * width + right``, so codes order like (left, right) pairs. A merge
    is a few array operations over its occurrences, not a scan of the corpus, so its work is
    proportional to its occurrences. Applying merges in rank order is also BPE encoding: a
    merge never creates a pair of lower rank than itself.
    """

    def __init__(self, records: list[tuple[str, int]], vocab_limit: int) -> None:
        self.width = vocab_limit  # every id, present and future, is below it
        encoded = [text.encode("utf-8") for text, _ in records]
        lengths = np.fromiter((len(d) for d in encoded), dtype=np.int64, count=len(encoded))
        self.size = int(lengths.sum()) + len(encoded)
        record_ends = np.cumsum(lengths + 1) - 1  # each record's boundary position
        self.record_starts = record_ends - lengths
        self.tokens = np.full(self.size, -1, dtype=np.int64)
        is_data = np.ones(self.size, dtype=bool)
        is_data[record_ends] = False
        self.tokens[is_data] = np.frombuffer(b"".join(encoded), dtype=np.uint8).astype(np.int64) + BYTE_OFFSET
        # How many identical records share this position (boundaries share none).
        self.weight = np.repeat(np.fromiter((c for _, c in records), dtype=np.int64, count=len(records)), lengths + 1)
        self.nxt = np.arange(1, self.size + 1, dtype=np.int64)
        self.prv = np.arange(-1, self.size - 1, dtype=np.int64)
        left, right = self.tokens[:-1], self.tokens[1:]
        starts = np.flatnonzero((left >= 0) & (right >= 0))
        codes = left[starts] * self.width + right[starts]
        self.counts: dict[int, int] = {}
        self.starts: dict[int, list[np.ndarray]] = {}
        self._add(codes, starts, self.weight[starts])

    def pair(self, code: int) -> tuple[int, int]:
        left, right = divmod(code, self.width)
        return left, right

    def code(self, pair: tuple[int, int]) -> int:
        return pair[0] * self.width + pair[1]

    def _add(self, codes: np.ndarray, positions: np.ndarray, weights: np.ndarray) -> dict[int, int]:
        """Add ``weights`` to the counts of ``codes`` (negative weights remove) and index the
        positions of positive weights; return the changed codes with their new counts."""
        if codes.size == 0:
            return {}
        unique, inverse = np.unique(codes, return_inverse=True)
        totals = np.bincount(inverse, weights=weights, minlength=unique.size)
        counts = self.counts
        changed: dict[int, int] = {}
        for code, delta in zip(unique.tolist(), totals.astype(np.int64).tolist()):
            if delta == 0:
                continue
            count = counts.get(code, 0) + delta
            if count > 0:
                counts[code] = count
                changed[code] = count
            else:
                counts.pop(code, None)
        added = weights > 0
        if added.any():
            codes, positions = codes[added], positions[added]
            order = np.argsort(codes, kind="stable")
            codes, positions = codes[order], positions[order]
            bounds = np.flatnonzero(np.diff(codes)) + 1
            for code, group in zip(codes[np.r_[0, bounds]].tolist(), np.split(positions, bounds)):
                self.starts.setdefault(code, []).append(group)
        return changed

    def merge(self, code: int, new_id: int) -> dict[int, int]:
        """Merge every occurrence of the pair ``code``, left to right as sequential BPE does;
        return the pairs whose counts changed, with their new counts (absent: now zero)."""
        tokens, nxt, prv = self.tokens, self.nxt, self.prv
        a, b = self.pair(code)
        self.counts.pop(code, None)
        chunks = self.starts.pop(code, None)
        if not chunks:
            return {}
        at = np.unique(np.concatenate(chunks)) if len(chunks) > 1 else np.unique(chunks[0])
        ends = nxt[at]
        live = (tokens[at] == a) & (tokens[ends] == b)  # the others were consumed earlier
        at, ends = at[live], ends[live]
        if a == b and at.size > 1:
            # In a run like "aaaa" the occurrences overlap: merge the 1st, 3rd, ... of each run.
            overlaps = np.zeros(at.size, dtype=bool)
            overlaps[1:] = nxt[at[:-1]] == at[1:]
            rank = np.arange(at.size)
            run_start = np.maximum.accumulate(np.where(overlaps, 0, rank))
            keep = (rank - run_start) % 2 == 0
            at, ends = at[keep], ends[keep]
        if at.size == 0:
            return {}
        before, after = prv[at], nxt[ends]
        weight = self.weight[at]
        left, right = tokens[before], tokens[after]
        # Occurrences in a row ("abab"): the pair between them is removed once, by the first,
        # and the new pair between them is added once, by the second.
        follows_previous = np.zeros(at.size, dtype=bool)
        follows_previous[1:] = before[1:] == ends[:-1]
        precedes_next = np.zeros(at.size, dtype=bool)
        precedes_next[:-1] = after[:-1] == at[1:]
        tokens[at] = new_id
        tokens[ends] = -2
        nxt[at] = after
        prv[after] = at
        before = prv[at]
        new_left = tokens[before]
        removed_left = (left >= 0) & ~follows_previous
        removed_right = right >= 0
        added_left = new_left >= 0
        added_right = (right >= 0) & ~precedes_next
        codes = np.concatenate((
            left[removed_left] * self.width + a,
            b * self.width + right[removed_right],
            new_left[added_left] * self.width + new_id,
            new_id * self.width + right[added_right],
        ))
        positions = np.concatenate((before[removed_left], at[removed_right], before[added_left], at[added_right]))
        weights = np.concatenate((
            -weight[removed_left], -weight[removed_right], weight[added_left], weight[added_right]
        ))
        keep = codes != code  # the merged pair itself is gone already
        changed = self._add(codes[keep], positions[keep], weights[keep])
        return changed

    def sequences(self) -> list[list[int]]:
        """Each record's ids, in order (merged-away positions dropped)."""
        remaining = self.tokens[self.tokens != -2]
        bounds = np.flatnonzero(remaining == -1)
        flat = remaining.tolist()
        out, start = [], 0
        for end in bounds.tolist():
            out.append(flat[start:end])
            start = end + 1
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
