"""Decision records, rules and stops of the generation engine."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from minigpt_tui.engine.core.config import ModelConfig, load_config
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.analysis.generation import (
    DecisionStepper,
    GenerationRule,
    eligibility_mask,
    greedy_choice,
    load_probes,
    run_probes,
    sample_choice,
    selection_distribution,
    selection_order,
)
from minigpt_tui.engine.models.model import MiniGPT
from minigpt_tui.engine.core.tokenizer import BOS, BYTE_OFFSET, EOS, ByteBPETokenizer
from tests.lens_support import byte_id, random_model

BYTES_ONLY = ByteBPETokenizer()  # 258 ids: BOS, EOS, 256 bytes
SMALL_CONTEXT = ModelConfig(family="gpt2", width=4, heads=1, kv_heads=1, ffn=8, layers=1, context=8)


def constant_logits_model(logits: dict[int, float], context: int = 8) -> MiniGPT:
    """A gpt2 model whose last-position logits are the same at every position: the final
    LayerNorm's weight is 0 and its bias is the first unit vector, so the head reads
    column 0 of the token table. Ids not named get logit 0."""
    config = ModelConfig(family="gpt2", width=4, heads=1, kv_heads=1, ffn=8, layers=1, context=context)
    model = MiniGPT(config, BYTES_ONLY.vocab_size, torch.float64)
    model.initialize(5)
    with torch.no_grad():
        model.final_norm.weight.zero_()
        model.final_norm.bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0]))
        column = torch.zeros(BYTES_ONLY.vocab_size, dtype=torch.float64)
        for token_id, value in logits.items():
            column[token_id] = value
        model.token_embedding.weight[:, 0] = column
    return model


def all_eligible(size: int) -> torch.Tensor:
    return torch.ones(size, dtype=torch.bool)


# -- rules on numbers ---------------------------------------------------------------------
def test_temperature_example_from_seed_003():
    logits = torch.tensor([2.0, 0.0], dtype=torch.float64)
    one = selection_distribution(logits, all_eligible(2), GenerationRule.sample(1.0))
    two = selection_distribution(logits, all_eligible(2), GenerationRule.sample(2.0))
    assert one[0].item() == pytest.approx(0.880797, abs=5e-7)
    assert two[0].item() == pytest.approx(0.731059, abs=5e-7)
    assert one[0].item() == pytest.approx(math.exp(2) / (math.exp(2) + 1), rel=1e-15)
    assert two[0].item() == pytest.approx(math.e / (math.e + 1), rel=1e-15)


def test_greedy_exact_tie_goes_to_the_smaller_id():
    logits = torch.tensor([9.0, 1.0, 4.0, 7.0, 7.0, 7.0], dtype=torch.float64)
    eligible = eligibility_mask(6)  # BOS (id 0, logit 9) is not eligible
    assert greedy_choice(logits, eligible) == 3
    eligible[3] = False
    assert greedy_choice(logits, eligible) == 4


def test_greedy_selection_is_the_eligible_softmax():
    logits = torch.tensor([3.0, 1.0, 2.0, 0.5], dtype=torch.float64)
    eligible = eligibility_mask(4)
    selection = selection_distribution(logits, eligible, GenerationRule())
    raw = torch.softmax(logits, 0)
    assert selection[0].item() == 0.0
    assert selection[2].item() == pytest.approx(raw[2].item() / (1 - raw[0].item()), rel=1e-14)
    assert selection.sum().item() == pytest.approx(1.0, abs=1e-15)


@pytest.mark.parametrize("temperature", [0.05, 0.7, 1.0, 50.0])
def test_top_k_one_gives_selection_probability_one(temperature):
    logits = torch.tensor([8.0, 2.0, 3.0, 2.9, -1.0], dtype=torch.float64)
    selection = selection_distribution(logits, eligibility_mask(5),
                                       GenerationRule.sample(temperature, top_k=1))
    assert selection[2].item() == 1.0
    assert selection.sum().item() == 1.0


def test_top_k_keeps_the_first_k_of_the_order_ties_by_id():
    logits = torch.tensor([0.0, 1.0, 5.0, 3.0, 3.0, 3.0], dtype=torch.float64)
    rule = GenerationRule.sample(1.0, top_k=3)
    selection = selection_distribution(logits, eligibility_mask(6), rule)
    assert torch.nonzero(selection > 0).flatten().tolist() == [2, 3, 4]
    assert selection_order(logits, eligibility_mask(6)).tolist() == [2, 3, 4, 5, 1]


def test_top_p_keeps_the_shortest_prefix_reaching_p():
    probabilities = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    logits = probabilities.log()
    eligible = all_eligible(4)

    def kept(p: float) -> list[int]:
        selection = selection_distribution(logits, eligible, GenerationRule.sample(1.0, top_p=p))
        assert selection.sum().item() == pytest.approx(1.0, abs=1e-15)
        return torch.nonzero(selection > 0).flatten().tolist()

    assert kept(0.4) == [0]
    assert kept(0.5) == [0]  # 0.5 reaches 0.5: one id is the shortest prefix
    assert kept(0.51) == [0, 1]
    assert kept(0.9) == [0, 1, 2]
    assert kept(0.96) == [0, 1, 2, 3]
    assert kept(1.0) == [0, 1, 2, 3]
    selection = selection_distribution(logits, eligible, GenerationRule.sample(1.0, top_p=0.75))
    assert selection[0].item() == pytest.approx(0.5 / 0.8, rel=1e-14)


def test_top_p_mass_is_taken_after_temperature_and_top_k():
    logits = torch.tensor([0.0, 2.0, 1.0, 0.5], dtype=torch.float64)
    # temperature 2, top-k 2 keeps ids 1 and 2 with masses e^1/(e^1+e^0.5) = 0.6225 and 0.3775.
    rule = GenerationRule.sample(2.0, top_k=2, top_p=0.6)
    selection = selection_distribution(logits, all_eligible(4), rule)
    assert torch.nonzero(selection > 0).flatten().tolist() == [1]
    rule = GenerationRule.sample(2.0, top_k=2, top_p=0.63)
    selection = selection_distribution(logits, all_eligible(4), rule)
    assert torch.nonzero(selection > 0).flatten().tolist() == [1, 2]
    assert selection[1].item() == pytest.approx(math.exp(1) / (math.exp(1) + math.exp(0.5)), rel=1e-14)


def test_renormalization_is_stable_for_huge_logits():
    logits = torch.tensor([0.0, 5000.0, 4999.0], dtype=torch.float64)
    selection = selection_distribution(logits, eligibility_mask(3), GenerationRule.sample(1.0))
    assert torch.isfinite(selection).all()
    assert selection[1].item() == pytest.approx(math.exp(1) / (math.exp(1) + 1), rel=1e-14)


def test_overflowing_temperature_and_non_finite_logits_are_refused():
    logits = torch.tensor([0.0, 300.0, 1.0], dtype=torch.float64)
    with pytest.raises(GenerationError, match="too small for these logits"):
        selection_distribution(logits, eligibility_mask(3), GenerationRule.sample(1e-308))
    with pytest.raises(GenerationError, match="non-finite logits"):
        selection_distribution(torch.tensor([0.0, math.nan, 1.0]), eligibility_mask(3), GenerationRule())


def test_sample_choice_walks_the_order_by_cumulative_mass():
    logits = torch.tensor([0.0, 1.0, 3.0, 2.0], dtype=torch.float64)
    eligible = eligibility_mask(4)
    selection = selection_distribution(logits, eligible, GenerationRule.sample(1.0))
    order = selection_order(logits, eligible)
    assert order.tolist() == [2, 3, 1]
    assert sample_choice(selection, order, 0.0) == 2
    assert sample_choice(selection, order, selection[2].item() - 1e-12) == 2
    assert sample_choice(selection, order, selection[2].item() + 1e-12) == 3
    assert sample_choice(selection, order, 0.999999999) == 1


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"kind": "sample", "temperature": 0.0}, "temperature"),
        ({"kind": "sample", "temperature": -1.0}, "temperature"),
        ({"kind": "sample", "top_k": 0}, "top-k"),
        ({"kind": "sample", "top_p": 0.0}, "top-p"),
        ({"kind": "sample", "top_p": 1.5}, "top-p"),
        ({"max_new_tokens": 0}, "budget"),
        ({"kind": "beam"}, "unknown rule"),
        ({"seed": -1}, "seed"),
        ({"forbidden_ids": (EOS,)}, "EOS"),
    ],
)
def test_invalid_rules_are_refused_with_one_line(values, message):
    with pytest.raises(GenerationError) as err:
        GenerationRule(**values)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"kind": "beam", "temperature": 0.0}, "unknown rule 'beam' (choose greedy or sample)"),
        ({"temperature": True}, "temperature must be a number, got True"),
        ({"temperature": float("nan"), "top_k": 0}, "temperature must be a finite number above 0, got nan"),
        ({"top_k": 2.0}, "top-k must be an integer of at least 1, got 2.0"),
        ({"top_k": False}, "top-k must be an integer of at least 1, got False"),
        ({"top_p": float("nan"), "max_new_tokens": 0}, "top-p must be in (0, 1], got nan"),
        ({"max_new_tokens": True}, "the new-token budget must be at least 1, got True"),
        ({"seed": 2**64}, f"the sampling seed must be an unsigned 64-bit integer, got {2**64}"),
        ({"forbidden_ids": (5, -1, EOS)}, "forbidden id -1 is not a token id"),
        ({"forbidden_ids": ("7",)}, "forbidden id '7' is not a token id"),
        ({"forbidden_ids": [9, EOS]}, "EOS (id 1) cannot be forbidden: it is how a continuation ends"),
    ],
)
def test_a_rule_reports_its_first_problem_in_declared_order(values, message):
    with pytest.raises(GenerationError) as err:
        GenerationRule(**values)
    assert str(err.value) == message


def test_a_rule_keeps_forbidden_ids_sorted_once_and_round_trips_through_json():
    rule = GenerationRule.sample(0.5, top_k=3, seed=2**64 - 1, forbidden_ids=[9, 4, 9])
    assert rule.forbidden_ids == (4, 9)
    assert GenerationRule.from_json(json.loads(json.dumps(rule.to_json()))) == rule
    assert rule.label == "sample t=0.5 k=3 seed=18446744073709551615"


# -- the stepper on a model with known logits ---------------------------------------------
def test_bos_is_never_chosen_even_with_the_highest_logit():
    model = constant_logits_model({BOS: 50.0, byte_id("x"): 10.0, byte_id("y"): 9.0})
    greedy = DecisionStepper(model, BYTES_ONLY, "ab", GenerationRule(max_new_tokens=2))
    first = greedy.step()
    assert first.chosen.id == byte_id("x")
    assert first.raw_probabilities[BOS].item() > 0.99  # the raw distribution keeps BOS
    assert first.selection_probabilities[BOS].item() == 0.0
    assert not first.eligible[BOS]
    bos_row = next(c for c in first.alternatives if c.id == BOS)
    assert bos_row.rank == 1 and not bos_row.eligible and bos_row.selection_probability == 0.0
    sampled = DecisionStepper(model, BYTES_ONLY, "ab", GenerationRule.sample(100.0, seed=3, max_new_tokens=5))
    assert BOS not in [d.chosen.id for d in sampled.run()]
    sampled.reset()
    with pytest.raises(GenerationError, match="not eligible"):
        sampled.force(BOS)


def test_extra_forbidden_ids_are_not_selectable():
    model = constant_logits_model({byte_id("x"): 10.0, byte_id("y"): 9.0})
    stepper = DecisionStepper(model, BYTES_ONLY, "ab", GenerationRule(forbidden_ids=(byte_id("x"),)))
    assert stepper.step().chosen.id == byte_id("y")


def test_eos_stop_is_recorded_and_eos_is_not_output_bytes():
    model = constant_logits_model({EOS: 10.0})
    stepper = DecisionStepper(model, BYTES_ONLY, "ab", GenerationRule())
    decisions = stepper.run()
    assert len(decisions) == 1 and decisions[0].chosen.id == EOS
    assert stepper.stop_reason == "eos" and stepper.finished
    out = stepper.output()
    assert out["generated_ids"] == [EOS] and out["generated_bytes"] == [] and out["ended_with_eos"]
    with pytest.raises(GenerationError, match="stopped"):
        stepper.step()


def test_budget_stop_is_not_an_eos_decision():
    model = constant_logits_model({byte_id("z"): 10.0, EOS: 9.0})
    stepper = DecisionStepper(model, BYTES_ONLY, "ab", GenerationRule(max_new_tokens=3))
    decisions = stepper.run()
    assert stepper.stop_reason == "budget"
    assert [d.chosen.id for d in decisions] == [byte_id("z")] * 3
    assert EOS not in stepper.output()["generated_ids"]
    assert stepper.output()["text"] == "zzz" and not stepper.output()["ended_with_eos"]


def test_context_stop_counts_every_id_including_bos():
    model = constant_logits_model({byte_id("z"): 10.0}, context=8)
    stepper = DecisionStepper(model, BYTES_ONLY, "ab", GenerationRule(max_new_tokens=24), stop_at_context=True)
    decisions = stepper.run()
    assert stepper.prompt_ids == (BOS, byte_id("a"), byte_id("b"))
    assert len(decisions) == 5 and len(stepper.ids) == 8
    assert stepper.stop_reason == "context"
    assert len(decisions[-1].prefix) == 7  # the last decision saw 7 ids; none was invented


def test_a_prompt_that_fills_the_context_is_refused():
    model = constant_logits_model({}, context=8)
    DecisionStepper(model, BYTES_ONLY, "abcdef", GenerationRule())  # 7 ids: room for one
    with pytest.raises(GenerationError, match="fills the context of 8"):
        DecisionStepper(model, BYTES_ONLY, "abcdefg", GenerationRule())


def test_invalid_utf8_output_keeps_raw_bytes():
    model = constant_logits_model({0xFF + BYTE_OFFSET: 10.0})
    stepper = DecisionStepper(model, BYTES_ONLY, "ab", GenerationRule(max_new_tokens=3))
    stepper.run()
    out = stepper.output()
    assert out["generated_bytes"] == [0xFF, 0xFF, 0xFF]
    assert out["valid_utf8"] is False and out["text"] is None
    assert out["display"] == "\ufffd" * 3 and out["display_only"] is True
    json.dumps(stepper.trace())  # still JSON-able: bytes are integers


def test_entropy_of_uniform_logits_is_log_vocab():
    model = constant_logits_model({})
    decision = DecisionStepper(model, BYTES_ONLY, "ab", GenerationRule()).step()
    assert decision.entropy == pytest.approx(math.log(BYTES_ONLY.vocab_size), rel=1e-12)
    # an exact tie over every eligible id: the smallest eligible id, EOS
    assert decision.chosen.id == EOS and decision.chosen.rank == 2


# -- the stepper on trained and random models ---------------------------------------------
@pytest.fixture(scope="module")
def trained_mini():
    from minigpt_tui.engine.training.corpus import load_corpus
    from minigpt_tui.engine.training.trainer import TrainingSetup, Trainer, apply_precision

    config = load_config("mini")
    config = config.replace(train={"steps": 300, "eval_every": 0})
    apply_precision(config.train)
    trainer = Trainer(TrainingSetup.build(config, load_corpus(config.corpus)))
    while not trainer.finished:
        trainer.update()
    return trainer


def test_every_decision_is_recorded_with_consistent_fields(trained_mini):
    model, tokenizer = trained_mini.model, trained_mini.tokenizer
    rule = GenerationRule.sample(0.9, top_k=20, top_p=0.95, seed=7)
    stepper = DecisionStepper(model, tokenizer, "The key is red. Answer: ", rule, top_n=5)
    decisions = stepper.run()
    for k, decision in enumerate(decisions, start=1):
        assert decision.step == k
        assert decision.prefix_ids == list(stepper.prompt_ids) + stepper.generated_ids[: k - 1]
        assert decision.logits.shape == (tokenizer.vocab_size,)
        assert decision.raw_probabilities.sum().item() == pytest.approx(1.0, abs=1e-12)
        assert decision.selection_probabilities.sum().item() == pytest.approx(1.0, abs=1e-12)
        assert decision.selection_probabilities[decision.chosen.id].item() > 0
        assert decision.chosen.logit == decision.logits[decision.chosen.id].item()
        assert decision.chosen.raw_probability == decision.raw_probabilities[decision.chosen.id].item()
        assert [c.rank for c in decision.alternatives] == [1, 2, 3, 4, 5]
        assert 0.0 <= decision.draw < 1.0
        assert len(decision.retained_ids) <= 20
    full = torch.tensor([piece.id for piece in decisions[-1].prefix])
    assert full.tolist() == stepper.ids[:-1]


def test_trained_mini_answers_the_aligned_red_prompt(trained_mini):
    stepper = DecisionStepper(trained_mini.model, trained_mini.tokenizer, "The key is red. Answer: ",
                              GenerationRule())
    stepper.run()
    assert stepper.stop_reason == "eos"
    assert stepper.output()["text"] == "red."


def test_back_restores_the_generator_and_force_marks_the_decision(trained_mini):
    model, tokenizer = trained_mini.model, trained_mini.tokenizer
    rule = GenerationRule.sample(1.5, seed=11, max_new_tokens=8)
    stepper = DecisionStepper(model, tokenizer, "Small models", rule)
    first = [(d.chosen.id, d.draw) for d in stepper.run()]
    undone = stepper.back()
    stepper.back()
    assert undone.step == 8 and len(stepper.decisions) == 6 and not stepper.finished
    redo = [(stepper.step().chosen.id, stepper.decisions[-1].draw) for _ in range(2)]
    assert redo == first[6:]
    stepper.reset()
    assert [(d.chosen.id, d.draw) for d in stepper.run()] == first

    stepper.reset()
    stepper.step()
    alternative = next(c.id for c in stepper.decisions[0].alternatives if c.id not in (first[1][0], BOS))
    forced = stepper.force(alternative)
    assert forced.forced and forced.chosen.id == alternative and forced.rule_choice == first[1][0]
    assert forced.draw == first[1][1]  # a forced decision takes the same draw as the rule's
    assert stepper.generated_ids[-1] == alternative
    stepper.back()
    again = stepper.step()
    assert not again.forced and (again.chosen.id, again.draw) == first[1]
    with pytest.raises(GenerationError, match="outside the vocabulary"):
        stepper.force(tokenizer.vocab_size)
    stepper.reset()
    with pytest.raises(GenerationError, match="no decision to undo"):
        stepper.back()


def test_forcing_eos_stops_with_eos(trained_mini):
    stepper = DecisionStepper(trained_mini.model, trained_mini.tokenizer, "The cup", GenerationRule())
    stepper.step()
    stepper.force(EOS)
    assert stepper.finished and stepper.stop_reason == "eos"


KV_CONFIGS = {
    "llama-grouped": ModelConfig(family="llama", width=16, heads=4, kv_heads=2, ffn=32, layers=2, context=24),
    "gpt2": dataclasses.replace(load_config("mini").model, context=24),
}


@pytest.mark.parametrize("name", sorted(KV_CONFIGS))
@pytest.mark.parametrize("kind", ["greedy", "sample"])
def test_kv_cache_matches_recompute(name, kind):
    model = random_model(KV_CONFIGS[name], seed=3, scale=10.0)
    rule = GenerationRule(kind=kind, temperature=1.3, seed=99, max_new_tokens=40)
    plain = DecisionStepper(model, BYTES_ONLY, "Old limit", rule, attention=True, stop_at_context=True)
    cached = DecisionStepper(model, BYTES_ONLY, "Old limit", rule, attention=True, use_kv_cache=True,
                             stop_at_context=True)
    a, b = plain.run(), cached.run()
    assert plain.stop_reason == cached.stop_reason == "context"
    assert [d.chosen.id for d in a] == [d.chosen.id for d in b]
    assert len(set(d.chosen.id for d in a)) >= 2  # the test sees a varied continuation
    for x, y in zip(a, b):
        assert torch.allclose(x.logits, y.logits, rtol=0, atol=1e-9)
        assert x.draw == y.draw
        for layer_x, layer_y in zip(x.attention, y.attention):
            assert layer_x.shape == (KV_CONFIGS[name].heads, len(x.prefix))
            assert torch.allclose(layer_x, layer_y, rtol=0, atol=1e-9)
    # going back drops the cache; redoing still matches recompute
    cached.back()
    cached.back()
    redo = cached.run()
    assert [d.chosen.id for d in redo] == [d.chosen.id for d in a[-2:]]
    assert torch.allclose(redo[-1].logits, a[-1].logits, rtol=0, atol=1e-9)


def test_attention_rows_are_distributions_over_the_prefix():
    model = random_model(KV_CONFIGS["llama-grouped"], seed=4, scale=5.0)
    decision = DecisionStepper(model, BYTES_ONLY, "abc", GenerationRule(), attention=True).step()
    assert len(decision.attention) == 2
    for layer in decision.attention:
        assert layer.shape == (4, 4)
        assert torch.allclose(layer.sum(-1), torch.ones(4, dtype=torch.float64))


def test_stepper_leaves_the_models_mode_and_grad_state_alone():
    model = random_model(KV_CONFIGS["gpt2"], seed=4, scale=1.0)
    model.train()
    decision = DecisionStepper(model, BYTES_ONLY, "abc", GenerationRule()).step()
    assert model.training and not decision.logits.requires_grad


TRACE_SCRIPT = """
import json, sys, torch
from minigpt_tui.engine.core.config import ModelConfig
from minigpt_tui.engine.analysis.generation import DecisionStepper, GenerationRule
from minigpt_tui.engine.models.model import MiniGPT
from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer
config = ModelConfig(family="llama", width=16, heads=4, kv_heads=2, ffn=32, layers=2, context=32)
model = MiniGPT(config, 258, torch.float64)
model.initialize(21)
traces = []
for seed in sys.argv[1:]:
    rule = GenerationRule.sample(1.0, top_p=0.99, seed=int(seed), max_new_tokens=12)
    stepper = DecisionStepper(model, ByteBPETokenizer(), "same seed", rule)
    stepper.run()
    traces.append(stepper.trace())
print(json.dumps(traces))
"""


def test_the_same_seed_gives_the_same_trace_in_two_processes():
    def traces(*seeds: int) -> list[dict]:
        done = subprocess.run([sys.executable, "-c", TRACE_SCRIPT, *map(str, seeds)], capture_output=True,
                              text=True, check=True, timeout=120)
        return json.loads(done.stdout)

    first, other = traces(2024, 2025)
    (second,) = traces(2024)
    assert first == second
    assert len(first["decisions"]) == 12 and first["stop_reason"] == "budget"
    assert [d["chosen"]["id"] for d in first["decisions"]] != [d["chosen"]["id"] for d in other["decisions"]]


def test_trace_holds_identities_rule_decisions_and_output(trained_mini):
    stepper = DecisionStepper(trained_mini.model, trained_mini.tokenizer, "The box is blue. Answer: ",
                              GenerationRule.sample(0.7, top_k=5, seed=31415), model_identity="abc123",
                              model_path="/tmp/model.safetensors")
    stepper.run()
    trace = json.loads(json.dumps(stepper.trace()))
    assert trace["format"] == "minigpt-tui-generation-trace" and trace["version"] == 2
    assert trace["full_logits"] is False
    assert trace["model"]["identity"] == "abc123" and trace["model"]["path"] == "/tmp/model.safetensors"
    assert trace["tokenizer"]["identity"] == trained_mini.tokenizer.identity
    assert trace["rule"]["kind"] == "sample" and trace["temperature"] == 0.7
    assert trace["top_k"] == 5 and trace["seed"] == 31415 and trace["max_new_tokens"] == 24
    assert trace["stop_reason"] == stepper.stop_reason
    assert len(trace["decisions"]) == len(stepper.decisions)
    first = trace["decisions"][0]
    assert first["ineligible_count"] == 1 and first["retained_count"] == 5
    assert not {"logits", "raw_probabilities", "selection_probabilities", "retained_ids", "ineligible_ids"} & set(first)
    full = json.loads(json.dumps(stepper.trace(full_logits=True)))
    assert full["full_logits"] is True
    first_full = full["decisions"][0]
    assert {k: v for k, v in first_full.items() if k in first} == first  # the same record, with the vectors added
    assert len(first_full["logits"]) == trained_mini.tokenizer.vocab_size
    assert first_full["ineligible_ids"] == [BOS] and len(first_full["retained_ids"]) == 5
    raw = first_full["raw_probabilities"]
    assert first["retained_mass"] == float(torch.tensor([raw[i] for i in first_full["retained_ids"]],
                                                        dtype=torch.float64).sum())
    assert trace["output"]["generated_ids"] == stepper.generated_ids
    assert stepper.trace(model_path="/elsewhere")["model"]["path"] == "/elsewhere"


# -- probes --------------------------------------------------------------------------------
def test_bundled_probes_load():
    probes = load_probes()
    assert probes.source == "bundled:probes.json" and len(probes.identity) == 64
    names = [p.name for p in probes.probes]
    assert "clue_key_red" in names and "clue_key_red_trailing_space" in names


def test_probe_table_shows_completions_matches_and_last_token(trained_mini, tmp_path):
    portable = SimpleNamespace(model=trained_mini.model, tokenizer=trained_mini.tokenizer,
                               identity="id-1", path=tmp_path / "m.safetensors")
    bundled = {p.name: p for p in load_probes().probes}
    chosen = [bundled[name] for name in ("clue_key_red", "clue_key_red_trailing_space", "clue_box_blue")]
    probes = tmp_path / "probes.json"
    probes.write_text(json.dumps({"format": "minigpt-tui-probes", "version": 1,
                                  "probes": [dataclasses.asdict(p) for p in chosen]}))
    rules = [GenerationRule(), GenerationRule.sample(0.7, top_k=5)]
    result = run_probes([("final", portable)], rules, probes)
    assert result["probes"]["source"] == str(probes) and result["probes"]["count"] == 3
    assert [c["key"] for c in result["columns"]] == ["final · greedy", "final · sample t=0.7 k=5 seed=31415"]
    rows = {row["name"]: row for row in result["rows"]}
    spaced = rows["clue_key_red_trailing_space"]
    unspaced = rows["clue_key_red"]
    assert spaced["prompt_last_token"]["piece"] != unspaced["prompt_last_token"]["piece"]
    assert spaced["prompt_last_token"]["bytes"][-1] == ord(" ")
    assert spaced["results"][0]["completion"] == "red." and spaced["results"][0]["match"] is True
    for row in result["rows"]:
        assert len(row["results"]) == 2
        for cell in row["results"]:
            assert cell["stop_reason"] in ("eos", "budget", "context")
    assert result["matches"]["final · greedy"] >= 1
    json.dumps(result)


def test_probe_prompt_longer_than_the_context_is_an_error_cell(tmp_path):
    model = constant_logits_model({EOS: 5.0}, context=8)
    probes = tmp_path / "p.json"
    probes.write_text(json.dumps({"format": "minigpt-tui-probes", "version": 1, "probes": [
        {"name": "short", "prompt": "ab", "expected": ""},
        {"name": "long", "prompt": "abcdefghij", "expected": "x"}]}))
    result = run_probes([("m", SimpleNamespace(model=model, tokenizer=BYTES_ONLY))], [GenerationRule()], probes)
    short, long = result["rows"]
    assert short["results"][0]["match"] is True and short["results"][0]["stop_reason"] == "eos"
    assert "fills the context" in long["results"][0]["error"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not valid JSON"),
        ("[]", "JSON object"),
        ('{"format": "other", "version": 1, "probes": []}', "format must be"),
        ('{"format": "minigpt-tui-probes", "version": 2, "probes": []}', "unsupported version"),
        ('{"format": "minigpt-tui-probes", "version": 1, "probes": []}', "non-empty list"),
        ('{"format": "minigpt-tui-probes", "version": 1, "probes": [{"name": "a", "prompt": 3, "expected": ""}]}',
         "'prompt' must be a string"),
        ('{"format": "minigpt-tui-probes", "version": 1, "probes": ['
         '{"name": "a", "prompt": "", "expected": ""}, {"name": "a", "prompt": "", "expected": ""}]}',
         "duplicate name"),
    ],
)
def test_invalid_probe_files_are_refused_with_one_line(tmp_path, content, message):
    path = tmp_path / "probes.json"
    path.write_text(content)
    with pytest.raises(GenerationError) as err:
        load_probes(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_missing_probe_file_is_named(tmp_path):
    with pytest.raises(GenerationError, match="probe file not found"):
        load_probes(tmp_path / "absent.json")


@pytest.mark.parametrize("rule", [GenerationRule(max_new_tokens=2), GenerationRule.sample(0.8, seed=3)])
def test_non_finite_logits_are_refused_before_anything_is_drawn(rule):
    model = constant_logits_model({byte_id("x"): float("nan"), byte_id("y"): 9.0})
    stepper = DecisionStepper(model, BYTES_ONLY, "ab", rule)
    with pytest.raises(GenerationError, match=r"logits are not finite \(1 of \d+ are NaN or infinite\)"):
        stepper.step()
    assert stepper.decisions == ()
