"""The pair index behind BPE training and batch encoding (numpy), kept apart from the
tokenizer so that reading a tokenizer or a config never imports numpy."""

from __future__ import annotations

import numpy as np

from minigpt_tui.engine.core.token_ids import BYTE_OFFSET


class PairIndex:
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
