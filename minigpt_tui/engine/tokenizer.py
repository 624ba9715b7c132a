"""Byte-level BPE with transparent ids.

Ids: BOS=0, EOS=1, the 256 bytes in byte order (ids 2..257), then one id per merge in rank
order (merge r produces id 258 + r). There is no PAD id: padded positions carry no target.
Training counts adjacent pairs over whole records (no pre-splitting) and merges the most
frequent pair; a tie goes to the pair that is smallest in our id space, (left, right).
"""

from __future__ import annotations

import hashlib
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
        words: list[list[int]] = []
        counts: list[int] = []
        for text, count in Counter(texts).items():
            words.append([b + BYTE_OFFSET for b in text.encode("utf-8")])
            counts.append(count)
        pair_counts: Counter[tuple[int, int]] = Counter()
        where: dict[tuple[int, int], set[int]] = {}
        for w, ids in enumerate(words):
            for pair in zip(ids, ids[1:]):
                pair_counts[pair] += counts[w]
                where.setdefault(pair, set()).add(w)
        learned: list[tuple[int, int]] = []
        while len(learned) < merges and pair_counts:
            best = min(pair_counts, key=lambda p: (-pair_counts[p], p))
            new_id = FIRST_MERGE_ID + len(learned)
            learned.append(best)
            for w in sorted(where.get(best, ())):
                old = words[w]
                for pair in zip(old, old[1:]):
                    pair_counts[pair] -= counts[w]
                    if pair_counts[pair] <= 0:
                        del pair_counts[pair]
                new = _merge(old, best, new_id)
                words[w] = new
                for pair in zip(new, new[1:]):
                    pair_counts[pair] += counts[w]
                    where.setdefault(pair, set()).add(w)
            where.pop(best, None)
        return ByteBPETokenizer(tuple(learned))


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
