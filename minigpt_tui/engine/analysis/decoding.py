"""The one decoding loop's forward: growing texts fed to a model, the key/value cache
handled here and nowhere else.

The decision stepper (one text), the watched samples (a batch of texts) and a patched or
steered generation (``sites``) feed their texts to a :class:`Decoder` once per decision:

- with the cache, a call feeds every text from the positions the cache holds up to the
  length of the shortest text; the texts that long are the ones that decide (``deciding``),
  the longer ones ride along feeding their own known ids until the shorter have caught up;
- past the context (a text longer than the model's positions) or without the cache, each
  text's last ``context`` ids are fed whole, at positions from 0 (every id's position moves
  when the window slides, so no cache holds them), and every text decides.

The cache's rows follow the texts: :meth:`Decoder.keep` drops the rows of texts that
stopped. The caller chooses evaluation mode and the gradient mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from minigpt_tui.engine.models.model import ForwardOutput, KVCache, MiniGPT
from minigpt_tui.engine.models.sites import Sites


@dataclass(frozen=True)
class Fed:
    """One call's forward, the place in its text of each row's first fed id (its window's
    start past the context), and the rows whose last fed id is their text's last."""

    output: ForwardOutput
    starts: tuple[int, ...]
    deciding: tuple[int, ...]

    @property
    def every_row_decides(self) -> bool:
        return len(self.deciding) == self.output.logits.shape[0]


class Decoder:
    """Feeds growing texts to ``model`` (see the module doc): with ``use_cache`` only the ids
    the cache does not hold yet; ``last_only`` puts each row's last position alone through
    the head (logits [rows, 1, V]); ``attention`` keeps the attention weights; ``sites``
    edits and reads every forward (:class:`~minigpt_tui.engine.models.sites.Sites`)."""

    def __init__(self, model: MiniGPT, *, use_cache: bool, last_only: bool = True, attention: bool = False,
                 sites: Sites | None = None) -> None:
        self.model, self.use_cache, self.last_only = model, use_cache, last_only
        self.attention, self.sites = attention, sites
        self.device = next(model.parameters()).device
        self.cache: KVCache | None = None
        self.fed = 0  # positions every row's cache holds

    def reset(self) -> None:
        """Forget the cache: the next call feeds every text from its start."""
        self.cache, self.fed = None, 0

    def feed(self, texts: Sequence[Sequence[int]]) -> Fed:
        """One forward over the texts (a row each, each at least as long as the cache)."""
        context = self.model.config.context
        shortest = min(len(text) for text in texts)
        if not self.use_cache or shortest > context:
            self.reset()
            windows = [list(text[-context:]) for text in texts]
            starts = tuple(len(text) - len(window) for text, window in zip(texts, windows))
            return Fed(self._forward(windows, None), starts, tuple(range(len(texts))))
        if self.cache is None:
            self.cache = []
        start, self.fed = self.fed, shortest
        output = self._forward([list(text[start:shortest]) for text in texts], self.cache)
        deciding = tuple(row for row, text in enumerate(texts) if len(text) == shortest)
        return Fed(output, (start,) * len(texts), deciding)

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only the cache's ``rows`` (ascending), for the texts that go on."""
        if self.cache and rows:
            keep = torch.tensor(list(rows), device=self.device)
            self.cache[:] = [(k.index_select(0, keep), v.index_select(0, keep)) for k, v in self.cache]

    def _forward(self, ids: list[list[int]], cache: KVCache | None) -> ForwardOutput:
        tensor = torch.tensor(ids, dtype=torch.int64, device=self.device)
        return self.model(tensor, cache=cache, return_attention=self.attention, last_only=self.last_only,
                          sites=self.sites)
