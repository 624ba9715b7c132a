"""A decision's record, built on the top of the distribution, against the full-vocabulary
reference: every figure shown (choice, draw, candidates' logit / raw / selection probability,
ranks, entropy, retained size and mass) bitwise equal, on random logits with ties, under
greedy, temperature, top-k, top-p, forbidden ids and forced tokens."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from minigpt_tui.engine.analysis.generation import (
    DecisionStepper,
    GenerationRule,
    eligibility_mask,
    entropy_nats,
    greedy_choice,
    raw_probabilities,
    sample_choice,
    selection_distribution,
    selection_order,
    token_rank,
    top_ranked,
)
from minigpt_tui.engine.analysis.selection import select
from minigpt_tui.engine.core.config import ModelConfig
from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer
from minigpt_tui.engine.models.model import MiniGPT

BYTES_ONLY = ByteBPETokenizer()  # 258 ids
RULES = [
    GenerationRule("greedy"),
    GenerationRule.sample(1.0),
    GenerationRule.sample(0.7, top_k=5),
    GenerationRule.sample(1.3, top_k=1),
    GenerationRule.sample(0.9, top_p=0.5),
    GenerationRule.sample(2.0, top_p=0.95),
    GenerationRule.sample(0.8, top_k=40, top_p=0.8),
    GenerationRule.sample(1.0, top_k=100_000),  # more than the vocabulary
    GenerationRule.sample(1.0, top_p=1.0),
]


def tied_logits(size: int, seed: int, spread: float = 4.0) -> torch.Tensor:
    """Random logits on a coarse grid, so that many ids share a value exactly."""
    generator = torch.Generator().manual_seed(seed)
    return torch.round(torch.randn(size, generator=generator, dtype=torch.float64) * spread * 4) / 4


def eligible_for(size: int, forbidden: tuple[int, ...]) -> torch.Tensor:
    return eligibility_mask(size, forbidden, bos_id=0, eos_ids=(1,))


# 40,000 ids: more than one thread's share of an elementwise operation (32,768), as on a
# real vocabulary; fewer rules and one seed there to stay quick on a busy machine.
@pytest.mark.parametrize(("rule", "size"), [*((rule, 258) for rule in RULES),
                                            *((RULES[i], 40_000) for i in (0, 1, 2, 5))])
def test_selection_equals_the_full_vocabulary_reference(rule, size):
    forbidden = (5, 17, size - 1)
    for seed in range(3 if size < 1000 else 1):
        logits = tied_logits(size, seed)
        logits[17] = logits.max() + 1  # a forbidden id at the top of the distribution
        eligible = eligible_for(size, forbidden)
        reference = selection_distribution(logits, eligible, rule)
        selection = select(logits, eligible, rule)
        every_id = torch.arange(size)
        assert torch.equal(selection.probabilities_of(every_id), reference)
        assert selection.retained_count == int((reference > 0).sum())
        assert torch.equal(selection.retained_mask(), reference > 0)
        if rule.kind == "sample":
            order = selection_order(logits, eligible, rule.temperature)
            kept = order[reference[order] > 0]
            assert [selection.id_at(int(p)) for p in selection.positions(kept[:50])] == kept[:50].tolist()
            # Draws at, just under and just over each cumulative boundary, and at random.
            cumulative = torch.cumsum(reference[kept], dim=0)[:30 if size < 1000 else 8]
            draws = [0.0, 0.999999999, *torch.rand(20, generator=torch.Generator().manual_seed(seed)).tolist()]
            for edge in cumulative.tolist():
                draws += [edge, torch.nextafter(torch.tensor(edge), torch.tensor(0.0)).item(),
                          torch.nextafter(torch.tensor(edge), torch.tensor(1.0)).item()]
            for draw in draws:
                assert selection.choose(draw) == sample_choice(reference, order, draw)


def test_every_value_tied_and_extreme_spreads():
    size = 1000
    eligible = eligible_for(size, (3,))
    for logits in (torch.zeros(size, dtype=torch.float64),
                   tied_logits(size, 9, spread=400.0)):  # exponentials underflow to zero
        for rule in RULES:
            reference = selection_distribution(logits, eligible, rule)
            selection = select(logits, eligible, rule)
            assert torch.equal(selection.probabilities_of(torch.arange(size)), reference)
            assert torch.equal(selection.retained_mask(), reference > 0)


class ScriptedStepper(DecisionStepper):
    """A stepper whose model says the given logits, one vector per decision."""

    def __init__(self, script: list[torch.Tensor], rule: GenerationRule) -> None:
        config = ModelConfig(family="gpt2", width=4, heads=1, kv_heads=1, ffn=8, layers=1, context=64)
        super().__init__(MiniGPT(config, BYTES_ONLY.vocab_size, torch.float64), BYTES_ONLY, "ab", rule, top_n=6)
        self.script = script

    def _last_logits(self, prefix):
        return self.script[len(self._steps)].clone(), None


def reference_rows(logits, eligible, rule, ids):
    raw = raw_probabilities(logits)
    selection = selection_distribution(logits, eligible, rule)
    return [(i, float(logits[i]), float(raw[i]), float(selection[i]), token_rank(logits, i), bool(eligible[i]))
            for i in ids]


def candidate_rows(candidates):
    return [(c.id, c.logit, c.raw_probability, c.selection_probability, c.rank, c.eligible) for c in candidates]


@pytest.mark.parametrize("rule", [dataclasses.replace(rule, forbidden_ids=(7, 70), max_new_tokens=12)
                                  for rule in RULES])
def test_stepper_records_equal_the_reference_forced_or_not(rule):
    script = [tied_logits(BYTES_ONLY.vocab_size, 100 + k, spread=2.0) for k in range(12)]
    stepper = ScriptedStepper(script, rule)
    generator = torch.Generator().manual_seed(rule.seed)
    for k, logits in enumerate(script):
        eligible = stepper.eligible
        reference = selection_distribution(logits, eligible, rule)
        draw = None if rule.kind == "greedy" else float(torch.rand((), generator=generator, dtype=torch.float64))
        expected = (greedy_choice(logits, eligible) if draw is None
                    else sample_choice(reference, selection_order(logits, eligible, rule.temperature), draw))
        forced = 200 + k if k % 3 == 1 else None  # any eligible id, retained or not
        decision = stepper.step() if forced is None else stepper.force(forced)
        assert (decision.rule_choice, decision.draw) == (expected, draw)
        assert decision.chosen.id == (expected if forced is None else forced)
        ranking = top_ranked(logits, 6)
        assert candidate_rows(decision.alternatives) == reference_rows(logits, eligible, rule, ranking)
        assert [c.rank for c in decision.alternatives] == list(range(1, 7))
        assert candidate_rows([decision.chosen, decision.rule_candidate]) == reference_rows(
            logits, eligible, rule, [decision.chosen.id, expected])
        raw = raw_probabilities(logits)
        assert decision.entropy == entropy_nats(raw)
        assert decision.retained_count == int((reference > 0).sum())
        assert decision.retained_mass == float(raw[reference > 0].sum())
        assert decision.ineligible_count == 3 and decision.eligible_count == BYTES_ONLY.vocab_size - 3
        assert torch.equal(decision.selection_probabilities, reference)
        assert torch.equal(decision.raw_probabilities, raw)
        assert decision.retained_ids == torch.nonzero(reference > 0).flatten().tolist()
        asked = [0, 7, 70, decision.chosen.id, 255]
        assert candidate_rows(decision.candidates_for(asked, BYTES_ONLY)) == reference_rows(logits, eligible, rule, asked)


def test_default_record_has_no_vocabulary_sized_part_and_full_adds_the_vectors():
    script = [tied_logits(BYTES_ONLY.vocab_size, k) for k in range(3)]
    stepper = ScriptedStepper(script, GenerationRule.sample(0.8, top_p=0.9, max_new_tokens=3))
    stepper.run()
    decision = stepper.decisions[0]
    compact, full = decision.to_json(), decision.to_json(full_logits=True)
    assert {"retained_count", "retained_mass", "ineligible_count"} <= set(compact)
    vectors = {"logits", "raw_probabilities", "selection_probabilities", "retained_ids", "ineligible_ids"}
    assert not vectors & set(compact)
    assert {k: v for k, v in full.items() if k in compact} == compact
    assert full["logits"] == script[0].tolist()
    assert full["ineligible_ids"] == [0] and len(full["retained_ids"]) == compact["retained_count"]
