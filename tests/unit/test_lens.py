"""Logit lens, direct contributions and head patterns of the engine's lens module."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lens_support import BYTES_ONLY, varied_model
from minigpt_tui.commands.insight import _contributions_table
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.analysis.generation import DecisionStepper, GenerationRule
from minigpt_tui.engine.analysis.lens import inspect_decision, lens_stream_name, run_with_cache

PROMPT = "Attribution"
FAMILIES = ("llama", "gpt2")


def decisions_of(model, budget: int = 4):
    stepper = DecisionStepper(model, BYTES_ONLY, PROMPT, GenerationRule(max_new_tokens=budget), attention=True)
    stepper.run()
    return stepper.decisions


@pytest.mark.parametrize("family", FAMILIES)
def test_last_lens_row_is_the_models_logits_bit_for_bit(family):
    """A decision puts its last position alone through the head; the lens's last row is
    that one-row product over the same final residual."""
    model = varied_model(family)
    for decision in decisions_of(model):
        insight = inspect_decision(model, BYTES_ONLY, decision.prefix_ids, decision.chosen.id, lens=True)
        assert [row.layer for row in insight.lens] == list(range(model.config.layers + 1))
        last = insight.lens[-1]
        assert torch.equal(last.logits, decision.logits)
        assert last.chosen_rank == decision.chosen.rank
        assert last.chosen_probability == decision.chosen.raw_probability
        assert last.top[0].id == decision.alternatives[0].id
        # earlier layers read other streams, so they say something else
        assert not torch.equal(insight.lens[0].logits, decision.logits)


@pytest.mark.parametrize("family", FAMILIES)
def test_contributions_add_up_to_the_logit_in_float64(family):
    model = varied_model(family)
    for decision in decisions_of(model):
        picked = [7, int(decision.alternatives[1].id)]
        insight = inspect_decision(model, BYTES_ONLY, decision.prefix_ids, decision.chosen.id,
                                   contributions=True, candidate_ids=picked)
        assert [c.id for c in insight.contributions] == [decision.chosen.id, *picked]
        assert max(abs(float(decision.logits[c.id])) for c in insight.contributions) > 1.0
        for parts in insight.contributions:
            assert parts.logit == float(decision.logits[parts.id])
            by_hand = (parts.embedding + sum(sum(layer) for layer in parts.heads) + sum(parts.attention_bias)
                       + sum(parts.ffn) + parts.norm_bias)
            assert by_hand == pytest.approx(parts.total, abs=1e-12)
            assert abs(parts.total - parts.logit) < 1e-9
            assert len(parts.heads) == model.config.layers
            assert all(len(layer) == model.config.heads for layer in parts.heads)
        if family == "llama":
            assert all(c.norm_bias == 0.0 and not any(c.attention_bias) for c in insight.contributions)
        else:
            assert all(c.norm_bias != 0.0 and all(c.attention_bias) for c in insight.contributions)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_float32_models_parts_are_summed_in_float64_and_agree_to_float32_rounding(family):
    model = varied_model(family, dtype=torch.float32)
    ids = BYTES_ONLY.encode_prompt(PROMPT)
    every = list(range(BYTES_ONLY.vocab_size))
    insight = inspect_decision(model, BYTES_ONLY, ids, 0, contributions=True, candidate_ids=every)
    parts = insight.contributions
    assert {c.dtype for c in parts} == {"float32"}
    # The model's float32 logit is rounded to float32: the float64 sum differs from it in the
    # sixth decimal for some ids, and by no more than float32 rounding explains for any.
    assert any(f"{c.total:+.6f}" != f"{c.logit:+.6f}" for c in parts)
    assert all(c.agrees for c in parts)
    assert max(c.rounding for c in parts) < 1e-4
    # The command line's caption says so too.
    assert str(_contributions_table(1, parts[0]).renderables[-1]).endswith(", equal to float32 rounding")
    # A sum that missed a part would not agree.
    head = parts[1].heads[0][0]
    assert abs(head) > 10 * parts[1].rounding
    assert not dataclasses.replace(parts[1], total=parts[1].total - head).agrees
    # In float64 the allowance is far below the 1e-9 the sums are checked to.
    float64 = inspect_decision(varied_model(family), BYTES_ONLY, ids, 0, contributions=True).contributions[0]
    assert float64.dtype == "float64" and float64.agrees and float64.rounding < 1e-11


def test_silent_blocks_leave_the_whole_logit_to_the_embedding():
    model = varied_model("llama")
    with torch.no_grad():
        for block in model.blocks:
            block.attn.o_proj.weight.zero_()
            block.ffn.down_proj.weight.zero_()
    (decision,) = decisions_of(model, budget=1)
    insight = inspect_decision(model, BYTES_ONLY, decision.prefix_ids, decision.chosen.id, lens=True,
                               contributions=True)
    parts = insight.contributions[0]
    assert all(value == 0.0 for layer in parts.heads for value in layer) and parts.ffn == (0.0, 0.0, 0.0)
    assert parts.embedding == pytest.approx(parts.logit, abs=1e-12)
    # the residual never changes, so every lens layer already says what the model says
    assert all(torch.equal(row.logits, decision.logits) for row in insight.lens)


def test_head_pattern_is_the_whole_causal_matrix_the_model_used():
    model = varied_model("gpt2")
    decision = decisions_of(model)[-1]
    insight = inspect_decision(model, BYTES_ONLY, decision.prefix_ids, decision.chosen.id, pattern=(2, 3))
    pattern = insight.pattern
    length = len(decision.prefix_ids)
    assert pattern.weights.shape == (length, length)
    assert [i for i, _ in pattern.tokens] == decision.prefix_ids
    assert torch.equal(pattern.weights[-1], decision.attention[2][3])
    assert torch.all(pattern.weights.triu(diagonal=1) == 0)
    assert torch.allclose(pattern.weights.sum(dim=-1), torch.ones(length, dtype=torch.float64), atol=1e-12)


def test_activation_names_are_stable_and_shaped():
    model = varied_model("gpt2")
    ids = BYTES_ONLY.encode_prompt(PROMPT)
    cache = run_with_cache(model, ids)
    t, d, h = len(ids), model.config.width, model.config.heads
    assert cache["hook_embed"].shape == (t, d) and cache["hook_pos_embed"].shape == (t, d)
    for layer in range(model.config.layers):
        assert cache[f"blocks.{layer}.attn.hook_pattern"].shape == (h, t, t)
        assert cache[f"blocks.{layer}.attn.hook_z"].shape == (t, h, model.config.head_dim)
        mid = cache[f"blocks.{layer}.hook_resid_pre"] + cache[f"blocks.{layer}.hook_attn_out"]
        assert torch.equal(mid, cache[f"blocks.{layer}.hook_resid_mid"])
        post = cache[f"blocks.{layer}.hook_resid_mid"] + cache[f"blocks.{layer}.hook_mlp_out"]
        assert torch.equal(post, cache[f"blocks.{layer}.hook_resid_post"])
    assert lens_stream_name(0) == "blocks.0.hook_resid_pre" and lens_stream_name(3) == "blocks.2.hook_resid_post"
    assert cache["logits"].shape == (1, model.vocab_size)  # the last position's, as a decision's
    with pytest.raises(GenerationError, match="no activation named 'blocks.9.hook_resid_post'"):
        cache["blocks.9.hook_resid_post"]


@pytest.mark.parametrize(("options", "message"), [
    ({"pattern": (3, 0)}, "layer 3 does not exist: the model has blocks 0 to 2"),
    ({"pattern": (0, 4)}, "head 4 does not exist: each block has heads 0 to 3"),
    ({"pattern": (-1, 0)}, "layer -1 does not exist"),
    ({"candidate_ids": [258]}, "candidate id 258 is outside the vocabulary of 258"),
    ({"lens": True, "lens_top": 0}, "the lens shows at least 1 id per layer"),
])
def test_bad_requests_are_refused_with_one_line(options, message):
    model = varied_model("llama")
    with pytest.raises(GenerationError, match=message):
        inspect_decision(model, BYTES_ONLY, BYTES_ONLY.encode_prompt(PROMPT), 70, **options)
