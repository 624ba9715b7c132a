"""Probe scores during training: match, expected answer probability and rank."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from minigpt_tui.engine.core.config import ModelConfig
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.analysis.generation import DecisionStepper, GenerationRule, Probe, ProbeSet, load_probes, run_probes
from minigpt_tui.engine.models.model import MiniGPT
from minigpt_tui.engine.analysis.probe_scores import score_probes
from minigpt_tui.engine.core.tokenizer import EOS, ByteBPETokenizer
from tests.lens_support import byte_id

BYTES_ONLY = ByteBPETokenizer()


def test_scores_follow_the_probes_command_and_report_the_first_answer_token():
    model = MiniGPT(ModelConfig(family="llama", width=8, heads=2, kv_heads=1, ffn=16, layers=2, context=64),
                    BYTES_ONLY.vocab_size, torch.float64)
    model.initialize(11)
    probes = ProbeSet("test", "x", (Probe("one", "ab", "c"), Probe("two", "xyz", "")))
    scores = score_probes(model, BYTES_ONLY, probes)
    assert [s.name for s in scores] == ["one", "two"]
    assert scores[0].expected_id == byte_id("c") and scores[1].expected_id == EOS
    for probe, score in zip(probes.probes, scores):
        stepper = DecisionStepper(model, BYTES_ONLY, probe.prompt, GenerationRule.greedy(1))
        first = stepper.step()
        assert score.expected_probability == float(first.raw_probabilities[score.expected_id])
        rank = int((first.logits > first.logits[score.expected_id]).sum()) + 1
        assert score.expected_rank == rank
    bundled = load_probes()
    command = run_probes([("m", SimpleNamespace(model=model, tokenizer=BYTES_ONLY))], [GenerationRule.greedy()])
    assert [s.match for s in score_probes(model, BYTES_ONLY, bundled)] == \
        [row["results"][0]["match"] for row in command["rows"]]


def test_a_model_that_writes_the_answer_matches_with_rank_one(tmp_path):
    model = MiniGPT(ModelConfig(family="gpt2", width=8, heads=1, kv_heads=1, ffn=8, layers=1, context=32),
                    BYTES_ONLY.vocab_size, torch.float64)
    model.initialize(4)
    answer = [byte_id("o"), byte_id("k"), EOS]
    prompt = "q"
    start = len(BYTES_ONLY.encode_prompt(prompt)) - 1
    with torch.no_grad():  # the head reads only the position row: position p says answer[p - start]
        for block in model.blocks:
            block.attn.o_proj.weight.zero_()
            block.ffn.down_proj.weight.zero_()
            block.ffn.down_proj.bias.zero_()
        model.token_embedding.weight.zero_()
        model.position_embedding.weight.zero_()
        model.final_norm.weight.fill_(1.0)
        model.final_norm.bias.zero_()
        for offset, token_id in enumerate(answer):
            model.position_embedding.weight[start + offset, offset] = 5.0
            model.position_embedding.weight[start + offset, offset + 4] = -5.0
            model.token_embedding.weight[token_id, offset] = 1.0
    probes = ProbeSet("t", "x", (Probe("ok", prompt, "ok"), Probe("no", prompt, "ko")))
    hit, miss = score_probes(model, BYTES_ONLY, probes)
    assert hit.match and hit.completion == "ok"
    assert hit.expected_rank == 1 and hit.expected_probability > 5 / BYTES_ONLY.vocab_size
    assert not miss.match and miss.expected_rank > 1
    assert miss.completion == "o"  # generation stops where it leaves the expected answer
    file = tmp_path / "probes.json"
    file.write_text(json.dumps({"format": "minigpt-tui-probes", "version": 1,
                                "probes": [{"name": p.name, "prompt": p.prompt, "expected": p.expected}
                                           for p in probes.probes]}))
    command = run_probes([("m", SimpleNamespace(model=model, tokenizer=BYTES_ONLY))], [GenerationRule.greedy()], file)
    assert [row["results"][0]["match"] for row in command["rows"]] == [True, False]


def test_a_probe_that_cannot_run_is_an_error_not_a_failure():
    model = MiniGPT(ModelConfig(family="llama", width=8, heads=2, kv_heads=2, ffn=8, layers=1, context=4),
                    BYTES_ONLY.vocab_size, torch.float64)
    model.initialize(1)
    (score,) = score_probes(model, BYTES_ONLY, ProbeSet("t", "x", (Probe("long", "too long", "!"),)))
    assert not score.match and "fills the context of 4" in score.error


def test_a_probe_file_of_another_version_is_refused(tmp_path):
    path = tmp_path / "probes.json"
    path.write_text(json.dumps({"format": "minigpt-tui-probes", "version": 2, "probes": []}))
    with pytest.raises(GenerationError, match="unsupported version 2"):
        load_probes(path)
