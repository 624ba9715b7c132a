"""Cached decisions with attention, on every family: the cached decision equals the whole-prefix
one within float32 rounding, the recorded attention row equals a whole pass's last row, any
decision's whole pattern of any head is read from the records without a forward pass, and
exact precision (float64) keeps deciding over the whole prefix, bit for bit as before."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from family_support import FAMILIES, make_family_folder
from minigpt_tui.engine.analysis.generation import DecisionStepper, default_kv_cache
from minigpt_tui.engine.analysis.generation_rule import GenerationRule
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.session.generation import GenerationSession, GenerationSettings, parse_head
from minigpt_tui.engine.models.hf_models import open_hf_model

PROMPT = "The json module: tabs and spaces"
RULE = GenerationRule("greedy", max_new_tokens=5, forbidden_ids=())
FLOAT32 = {"atol": 3e-5, "rtol": 3e-5}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cached-families")
    return {family: make_family_folder(family, root / family, seed=index) for index, family in enumerate(FAMILIES)}


def _whole_pass(model, prefix: list[int]):
    with torch.no_grad():
        return model(torch.tensor([prefix]), return_attention=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_cached_decision_and_its_attention_row_equal_the_whole_prefix_ones(folders, family):
    ours = open_hf_model(folders[family])
    assert default_kv_cache(ours.model)  # float32: the cache by default
    cached = DecisionStepper.from_portable(ours, PROMPT, RULE, use_kv_cache=True, attention=True)
    whole = DecisionStepper.from_portable(ours, PROMPT, RULE, use_kv_cache=False, attention=True)
    a, b = cached.run(), whole.run()
    assert [d.chosen.id for d in a] == [d.chosen.id for d in b] and len(a) >= 2
    for x, y in zip(a, b):
        torch.testing.assert_close(x.logits, y.logits, **FLOAT32)
        out = _whole_pass(ours.model, x.prefix_ids)
        assert len(x.attention) == ours.config.layers
        for recorded, full in zip(x.attention, out.attentions):
            assert recorded.shape == (ours.config.heads, len(x.prefix))
            torch.testing.assert_close(recorded, full[0, :, -1, :].to(torch.float64), **FLOAT32)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("cache", [True, False], ids=["cached", "whole-prefix"])
def test_every_heads_whole_pattern_is_read_from_the_records(folders, family, cache):
    ours = open_hf_model(folders[family])
    stepper = DecisionStepper.from_portable(ours, PROMPT, RULE, use_kv_cache=cache, attention=True)
    assert stepper.head_patterns() is None  # nothing decided yet
    stepper.run()
    stepper.back()  # going back and redoing (a whole pass again) keeps the records whole
    stepper.step()
    patterns = stepper.head_patterns()
    for step, decision in enumerate(stepper.decisions, start=1):
        out = _whole_pass(ours.model, decision.prefix_ids)
        for layer in range(ours.config.layers):
            for head in range(ours.config.heads):
                got = patterns.pattern(step, layer, head)
                torch.testing.assert_close(got, out.attentions[layer][0, head].to(torch.float64), **FLOAT32)
    assert patterns.pattern(len(stepper.decisions) + 1, 0, 0) is None


def test_exact_precision_keeps_the_whole_prefix_bits(folders):
    ours = open_hf_model(folders["llama"], dtype="float64")
    assert not default_kv_cache(ours.model)
    session = GenerationSession(Path("."))
    session.portable = ours
    session.configure(GenerationSettings(PROMPT, RULE))
    session.run()
    reference = DecisionStepper.from_portable(ours, PROMPT, RULE, attention=True)
    reference.run()
    assert not session.view().cached
    for x, y in zip(session.stepper.decisions, reference.decisions):
        assert torch.equal(x.logits, y.logits)
        assert all(torch.equal(p, q) for p, q in zip(x.attention, y.attention))


def test_the_session_toggles_the_cache_and_redoes_its_decisions(folders):
    ours = open_hf_model(folders["qwen2"])
    session = GenerationSession(Path("."))
    session.portable = ours
    session.configure(GenerationSettings(PROMPT, RULE))
    session.step()
    session.force(2, 7)
    session.step()
    before = session.view()
    assert before.cached and before.patterns is not None
    assert "whole prefix" in session.toggle_kv_cache()
    after = session.view()
    assert not after.cached
    assert [d.chosen.id for d in after.decisions] == [d.chosen.id for d in before.decisions]
    assert after.forced_steps == before.forced_steps == frozenset({2})
    pattern = after.patterns.pattern(3, 1, 2)
    assert (pattern.layer, pattern.head) == (1, 2) and len(pattern.weights) == after.decisions[2].prefix_length
    assert len(pattern.pieces) == len(pattern.weights)


@pytest.mark.parametrize(("typed", "expected"), [("23.4", (23, 4)), ("23 4", (23, 4)), ("block 23 head 4", (23, 4)),
                                                  ("b23 h4", (23, 4)), (" 0,8 ", (0, 8))])
def test_a_head_is_typed_in_any_of_its_forms(typed, expected):
    assert parse_head(typed, 30, 9) == expected


@pytest.mark.parametrize(("typed", "message"), [("30.0", "no block 30"), ("2.9", "no head 9"), ("x", "names no head"),
                                                ("1.2.3", "names no head"), ("", "names no head")])
def test_a_head_that_is_not_there_is_refused_in_one_line(typed, message):
    with pytest.raises(GenerationError, match=message) as err:
        parse_head(typed, 30, 9)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("extra", "cached"), [((), True), (("--dtype", "float64"), False),
                                               (("--no-kv-cache",), False), (("--dtype", "float64", "--kv-cache"), True)])
def test_generate_uses_the_cache_unless_float64_or_told(folders, capsys, extra, cached):
    import json

    from conftest import run_cli

    code, out, err = run_cli(capsys, "generate", "--model", str(folders["gpt2"]), "--prompt", PROMPT,
                             "--max-new-tokens", "2", "--json", *extra)
    assert code == 0, err
    assert json.loads(out)["use_kv_cache"] is cached
