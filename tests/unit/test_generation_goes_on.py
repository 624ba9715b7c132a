"""Generation that goes on past the context: a decision whose prefix is longer than the
model's context sees a sliding window of its last ``context`` ids (learned positions and
rotary ones alike, each up to its own position limit), recomputed in one pass. Decisions
under the context keep their bits; ``stop_at_context`` keeps the old stop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from family_support import make_family_folder
from lens_support import random_model
from minigpt_tui.engine.analysis.generation import DecisionStepper, GenerationRule
from minigpt_tui.engine.core.config import ModelConfig
from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer
from minigpt_tui.engine.session.generation import GenerationSession, GenerationSettings
from minigpt_tui.engine.models.hf_models import open_hf_model
from minigpt_tui.engine.models.model import MiniGPT, evaluating

BYTES_ONLY = ByteBPETokenizer()
CONTEXT = 16
PROMPT = "Old limits"  # 11 ids with BOS: decision 6 fills the context, decision 7 slides
FIRST_SLID = CONTEXT - 11 + 2
GPT2 = ModelConfig(family="gpt2", width=16, heads=2, kv_heads=2, ffn=32, layers=2, context=CONTEXT)
LLAMA = ModelConfig(family="llama", width=16, heads=4, kv_heads=2, ffn=32, layers=2, context=CONTEXT)


def fresh_forward(model: MiniGPT, ids: list[int]) -> torch.Tensor:
    with evaluating(model), torch.no_grad():
        out = model(torch.tensor([ids], dtype=torch.int64), last_only=True)
    return out.logits[0, -1].to(torch.float64)


def stepper(model: MiniGPT, rule: GenerationRule, **options) -> DecisionStepper:
    return DecisionStepper(model, BYTES_ONLY, PROMPT, rule, **options)


@pytest.mark.parametrize("config", [GPT2, LLAMA], ids=["learned", "rotary"])
@pytest.mark.parametrize("cache", [False, True], ids=["whole-prefix", "cached"])
def test_generation_goes_on_over_a_sliding_window(config, cache):
    model = random_model(config)
    going = stepper(model, GenerationRule.greedy(max_new_tokens=30), use_kv_cache=cache)
    decisions = going.run()
    assert going.stop_reason == "budget" and len(decisions) == 30  # the budget still bounds it
    assert len(going.ids) == 11 + 30 > CONTEXT
    assert going.window_from == FIRST_SLID
    assert going.window_note() == f"sliding window of {CONTEXT} positions from decision {FIRST_SLID}"
    for decision in decisions:
        whole = len(going.prompt_ids) + decision.step - 1
        assert decision.window_start == max(0, whole - CONTEXT)
        assert decision.slid == (decision.step >= FIRST_SLID)
        assert len(decision.prefix) == min(whole, CONTEXT)  # the ids the model saw
        assert decision.prefix_ids == going.ids[decision.window_start:whole]
    assert len({d.chosen.id for d in decisions}) >= 3


@pytest.mark.parametrize("config", [GPT2, LLAMA], ids=["learned", "rotary"])
@pytest.mark.parametrize("cache", [False, True], ids=["whole-prefix", "cached"])
def test_decisions_under_the_context_keep_their_bits(config, cache):
    model = random_model(config)
    rule = GenerationRule.sample(1.3, seed=7, max_new_tokens=30)
    old = stepper(model, rule, use_kv_cache=cache, attention=True, stop_at_context=True)
    new = stepper(model, rule, use_kv_cache=cache, attention=True)
    before, after = old.run(), new.run()
    assert old.stop_reason == "context" and len(before) == CONTEXT - 11
    assert old.window_from is None and old.window_note() is None
    for a, b in zip(before, after):
        assert torch.equal(a.logits, b.logits) and a.chosen.id == b.chosen.id and a.draw == b.draw
        assert all(torch.equal(x, y) for x, y in zip(a.attention, b.attention))


@pytest.mark.parametrize("config", [GPT2, LLAMA], ids=["learned", "rotary"])
@pytest.mark.parametrize("cache", [False, True], ids=["whole-prefix", "cached"])
def test_a_sliding_decision_equals_a_fresh_forward_of_its_window(config, cache):
    model = random_model(config)
    going = stepper(model, GenerationRule.greedy(max_new_tokens=25), use_kv_cache=cache)
    going.run()
    slid = [d for d in going.decisions if d.slid]
    assert len(slid) == 25 - FIRST_SLID + 1
    for decision in slid:
        assert len(decision.prefix_ids) == CONTEXT
        assert torch.equal(decision.logits, fresh_forward(model, decision.prefix_ids))


@pytest.mark.parametrize("kind", ["greedy", "sample"])
def test_sliding_decisions_are_deterministic_in_exact_precision(kind):
    model = random_model(GPT2)
    rule = GenerationRule(kind, temperature=1.1, seed=5, max_new_tokens=28)
    first, second = stepper(model, rule, attention=True), stepper(model, rule, attention=True)
    a, b = first.run(), second.run()
    assert first.window_from == FIRST_SLID
    for x, y in zip(a, b):
        assert torch.equal(x.logits, y.logits) and x.chosen.id == y.chosen.id and x.draw == y.draw
    # Back across the slide and on again: the same bits (the cache-free window is rebuilt).
    while len(first.decisions) > FIRST_SLID - 2:
        first.back()
    first.run()
    for x, y in zip(first.decisions, b):
        assert torch.equal(x.logits, y.logits) and x.chosen.id == y.chosen.id


def test_the_trace_records_the_window():
    model = random_model(GPT2)
    going = stepper(model, GenerationRule.greedy(max_new_tokens=12))
    going.run()
    trace = json.loads(json.dumps(going.trace()))
    assert trace["stop_reason"] == "budget" and trace["stop_at_context"] is False
    assert trace["window"] == {"positions": CONTEXT, "from_decision": FIRST_SLID}
    assert trace["model"]["positions"] == "learned" and trace["model"]["context"] == CONTEXT
    for decision in trace["decisions"]:
        if decision["step"] < FIRST_SLID:
            assert "window" not in decision and decision["prefix_length"] == 11 + decision["step"] - 1
        else:
            start = 11 + decision["step"] - 1 - CONTEXT
            assert decision["window"] == {"start": start, "positions": CONTEXT}
            assert decision["prefix_ids"] == going.ids[start:start + CONTEXT]
    stopped = stepper(model, GenerationRule.greedy(max_new_tokens=12), stop_at_context=True)
    stopped.run()
    trace = stopped.trace()
    assert trace["stop_reason"] == "context" and trace["stop_at_context"] is True and trace["window"] is None


def test_head_patterns_and_the_inside_of_a_sliding_decision():
    model = random_model(GPT2)
    session = GenerationSession(Path("."))
    session.portable = type("Portable", (), {"model": model, "tokenizer": BYTES_ONLY, "path": None})()
    session.configure(GenerationSettings(PROMPT, GenerationRule.greedy(max_new_tokens=10)))
    session.run()
    view = session.view()
    assert view.window_from == FIRST_SLID and view.window_note.startswith("sliding window of 16")
    slid = view.decisions[FIRST_SLID - 1]
    assert slid.window_start == 1 and slid.prefix_length == CONTEXT
    assert all(len(head) == CONTEXT for layer in slid.attention for head in layer)
    assert view.patterns.pattern(FIRST_SLID - 1, 0, 0) is not None  # under the context: from the records
    assert view.patterns.pattern(FIRST_SLID, 0, 0) is None  # its own window's pass: the worker computes it
    insight = session.inspect(FIRST_SLID + 2, 1, 1)  # a forward over the window, never past the context
    assert insight.pattern is not None and len(insight.pattern.pieces) == CONTEXT


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("goes-on-families")
    limits = {"gpt2": {"n_positions": CONTEXT}}
    return {family: make_family_folder(family, root / family, seed=index,
                                       **limits.get(family, {"max_position_embeddings": CONTEXT}))
            for index, family in enumerate(("gpt2", "llama", "qwen2", "gpt_neox"))}


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2", "gpt_neox"])
def test_models_from_elsewhere_go_on_to_their_limit_then_slide(folders, family):
    portable = open_hf_model(folders[family])
    assert portable.model.config.context == CONTEXT
    eos = tuple(portable.tokenizer.eos_ids)
    rule = GenerationRule.greedy(max_new_tokens=24, forbidden_ids=eos)
    cached = DecisionStepper.from_portable(portable, "json", rule, use_kv_cache=True)
    whole = DecisionStepper.from_portable(portable, "json", rule, use_kv_cache=False)
    a, b = cached.run(), whole.run()
    prompt = len(cached.prompt_ids)
    assert cached.stop_reason == whole.stop_reason == "budget" and len(a) == 24
    first = CONTEXT - prompt + 2  # the first decision over more ids than the position limit
    assert cached.window_from == whole.window_from == first
    assert portable.model.config.positions == ("learned" if family == "gpt2" else "rotary")
    for x, y in zip(a, b):
        if x.slid:  # recomputed the same way by both
            assert torch.equal(x.logits, y.logits)
            assert torch.equal(x.logits, fresh_forward(portable.model, x.prefix_ids))
        else:  # up to the limit: the cache, within float32 rounding
            torch.testing.assert_close(x.logits, y.logits, atol=3e-5, rtol=3e-5)


def test_generate_says_where_the_window_began_and_can_stop_at_the_context(runs, capsys):
    from minigpt_tui.cli import main

    model = ["generate", "--model", "tiny-a:latest", "--prompt", "a", "--runs-dir", str(runs)]
    assert main([*model, "--max-new-tokens", "12"]) == 0
    out = capsys.readouterr().out
    assert "stop: budget · sliding window of 8 positions from decision 8" in out
    assert main([*model, "--max-new-tokens", "12", "--stop-at-context"]) == 0
    assert "stop: context\n" in capsys.readouterr().out
    assert main([*model, "--max-new-tokens", "9", "--json"]) == 0
    trace = json.loads(capsys.readouterr().out)
    assert trace["window"] == {"positions": 8, "from_decision": 8} and trace["model"]["positions"] == "rotary"
    assert [d.get("window") for d in trace["decisions"][-2:]] == [{"start": 1, "positions": 8},
                                                                 {"start": 2, "positions": 8}]
