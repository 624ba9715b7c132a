"""Patched runs ride as rows of one batch: a run's bits do not depend on the runs beside it or
on the row it takes, equal the run alone, and the patcher falls back to one run at a time
where copies of one run disagree."""

from __future__ import annotations

import math
import random

import pytest
import torch

from lens_support import varied_model
from minigpt_tui.engine.analysis import patching
from minigpt_tui.engine.analysis.patching import Patch, Patcher, batch_rows, plan, sweep
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer

BYTES = ByteBPETokenizer()
CLEAN, CORRUPT = BYTES.encode_prompt("the cat sat"), BYTES.encode_prompt("the dog sat")


def patcher_of(family: str = "llama", dtype: torch.dtype = torch.float32, **kwargs: object) -> Patcher:
    return Patcher(varied_model(family, dtype=dtype), CLEAN, CORRUPT, 5, 6, **kwargs)


@pytest.mark.parametrize("family,dtype", [("llama", torch.float32), ("gpt2", torch.float32),
                                          ("llama", torch.float64)])
def test_a_run_has_the_same_bits_whatever_shares_its_batch(family, dtype):
    patcher = patcher_of(family, dtype)
    assert patcher.rows > 1
    patches = plan(patcher, ("resid", "attn", "mlp", "head"))
    together = patcher.differences([(p,) for p in patches])
    shuffled = list(range(len(patches)))
    random.Random(7).shuffle(shuffled)
    # The runs in another order (a start layer's runs keep together, so use runs of mixed
    # starts as well): each lands in another row beside other runs.
    mixed = [(patches[i],) if n % 3 else (patches[i], Patch("mlp", 0, (1,))) for n, i in enumerate(shuffled)]
    mixed_values = patcher.differences(mixed)
    for n, i in enumerate(shuffled):
        if n % 3:
            assert mixed_values[n] == together[i], patches[i]
    for n in range(0, len(mixed), 27):  # alone: a batch of one run, the other rows corrupt
        assert mixed_values[n] == patcher.difference(mixed[n]), mixed[n]
        assert patcher.difference([patches[shuffled[n]]]) == together[shuffled[n]], patches[shuffled[n]]


def test_batched_figures_lie_within_rounding_of_one_run_at_a_time():
    batched, alone = patcher_of(dtype=torch.float64), patcher_of(dtype=torch.float64, rows=1)
    assert alone.rows == 1
    assert batched.clean_difference == pytest.approx(alone.clean_difference, rel=1e-12)
    for ours, theirs in zip(sweep(batched, ("resid", "mlp")), sweep(alone, ("resid", "mlp"))):
        assert ours.difference == pytest.approx(theirs.difference, rel=1e-12, abs=1e-12)


def test_a_sweep_runs_in_batches_and_reports_each(monkeypatch):
    patcher = patcher_of()
    batches = []
    original = Patcher._batch
    monkeypatch.setattr(Patcher, "_batch", lambda self, runs: batches.append(len(runs)) or original(self, runs))
    seen: list[tuple[int, int]] = []
    effects = sweep(patcher, ("resid", "attn", "mlp"), lambda done, total: seen.append((done, total)))
    assert len(batches) == math.ceil(len(effects) / patcher.rows) and max(batches) == patcher.rows
    assert seen[-1] == (len(effects), len(effects)) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert patcher.difference([]) == patcher.corrupt_difference  # no patch: the corrupt run's row


def test_copies_that_disagree_mean_one_run_at_a_time(monkeypatch):
    monkeypatch.setattr(patching, "_rows_agree", lambda value: value.shape[0] == 1)
    patcher = patcher_of()
    assert patcher.rows == 1
    differ = tuple(i for i, (a, b) in enumerate(zip(CLEAN, CORRUPT)) if a != b)
    assert patcher.difference([Patch("resid", 0, differ)]) == patcher.clean_difference
    last = patcher.model.config.layers
    assert patcher.difference([Patch("resid", last, (len(CLEAN) - 1,))]) == patcher.clean_difference


def test_rows_tried_fill_a_batch_in_whole_multiples():
    for length in (1, 3, 5, 11, 16, 20, 40, 64, 200):
        rows = batch_rows(length)
        assert rows[-1] == 1 and list(rows) == sorted(rows, reverse=True)
        assert all(r * length % patching.POSITION_MULTIPLE == 0 for r in rows[:-1])
        assert all(r * length <= 2 * patching.BATCH_POSITIONS for r in rows)
    assert batch_rows(5)[0] == 24 and batch_rows(500) == (1,)
    with pytest.raises(GenerationError, match="at least one run"):
        patcher_of(rows=0)
