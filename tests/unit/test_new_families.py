"""Qwen3, Mistral and Phi-3, each a declaration of parts: tiny random transformers models made
here open as ours with transformers' logits and greedy ids; the key/value cache equals
running the whole prefix again past the sliding window; the lens ends at the logits and the
contributions add up in float64; patching is exact at both ends; config.json values we do
not build are refused in one line. (The registry test proves their folder, GGUF and convert
round trips.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from family_support import cached_decisions_equal_recompute, make_family_folder, reference, reference_greedy

from minigpt_tui.engine.analysis.generation import DecisionStepper
from minigpt_tui.engine.analysis.generation_rule import GenerationRule
from minigpt_tui.engine.analysis.lens import inspect_decision
from minigpt_tui.engine.analysis.patching import Patch, Patcher
from minigpt_tui.engine.core.config import ModelConfig
from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.models.hf_models import open_hf_model

NEW = ("qwen3", "mistral", "phi3")
PROMPT = "The json module: héllo wörld — tabs\tand spaces, 12345"
# Qwen3's example has no window: the last of its two blocks slides over 4 positions here.
EXTRA = {"qwen3": {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1}}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("new-families")
    made = {name: make_family_folder(name, root / name, seed=40 + i) for i, name in enumerate(NEW)}
    made["qwen3-sliding"] = make_family_folder("qwen3", root / "qwen3-sliding", seed=50, **EXTRA["qwen3"])
    return made


def _eager(folder: Path):
    import transformers as tr

    return tr.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()


def test_each_family_is_its_parts():
    qwen3, mistral, phi3 = (ModelConfig(family=name) for name in NEW)
    assert qwen3.qk_norm and not mistral.qk_norm and not phi3.qk_norm
    assert ModelConfig(family="qwen3", width=32, heads=4, head_dim_override=12).head_dim == 12
    # The new settings at their old values leave every other model's record as it was.
    assert "qk_norm" not in ModelConfig().declared() and "head_dim_override" not in ModelConfig().declared()


@pytest.mark.parametrize("name", [*NEW, "qwen3-sliding"])
def test_logits_and_greedy_ids_equal_transformers(folders, name):
    ours = open_hf_model(folders[name])
    _, tokenizer = reference(folders[name])
    ref = _eager(folders[name])
    ids = tokenizer(PROMPT).input_ids
    assert ours.tokenizer.encode_prompt(PROMPT) == ids
    assert len(ids) > 8  # longer than every window here
    with torch.no_grad():
        torch.testing.assert_close(ours.model(torch.tensor([ids])).logits[0], ref(torch.tensor([ids])).logits[0],
                                   atol=1e-5, rtol=1e-5)
    rule = GenerationRule("greedy", max_new_tokens=6, forbidden_ids=())
    chosen = [d.chosen.id for d in DecisionStepper.from_portable(ours, PROMPT, rule, use_kv_cache=True).run()]
    assert chosen == reference_greedy(ref, ids, 6)[: len(chosen)]


def test_the_parts_are_read_from_config_json(folders):
    qwen3 = open_hf_model(folders["qwen3"]).config
    assert (qwen3.qk_norm, qwen3.head_dim, qwen3.tied_head, qwen3.attention_window) == (True, 12, True, 0)
    sliding = open_hf_model(folders["qwen3-sliding"]).config
    assert (sliding.attention_window, sliding.local_layers) == (4, (1,))
    mistral = open_hf_model(folders["mistral"]).config
    assert (mistral.attention_window, mistral.local_layers, mistral.tied_head) == (5, (0, 1), False)
    phi3 = open_hf_model(folders["phi3"]).config
    assert (phi3.rotary_fraction, phi3.rotary_dims, phi3.attention_window) == (0.5, 4, 6)


@pytest.mark.parametrize("name", [*NEW, "qwen3-sliding"])
def test_a_cached_decision_equals_the_whole_prefix_past_the_window(folders, name):
    decisions, prefix = cached_decisions_equal_recompute(open_hf_model(folders[name], dtype="float64"), PROMPT)
    assert len(decisions) >= 2


@pytest.mark.parametrize("name", NEW)
def test_the_lens_ends_at_the_logits_and_contributions_add_up(folders, name):
    ours = open_hf_model(folders[name], dtype="float64")
    ids = ours.tokenizer.encode_prompt(PROMPT)
    with torch.no_grad():
        logits = ours.model(torch.tensor([ids]), last_only=True).logits[0, -1]
    chosen, other = int(logits.argmax()), int(logits.argsort()[-2])
    insight = inspect_decision(ours.model, ours.tokenizer, ids, chosen, lens=True, contributions=True,
                               candidate_ids=[other], pattern=(1, 3))
    for part in insight.contributions:
        assert abs(part.total - part.logit) < 1e-9, (name, part.total, part.logit)
    assert torch.equal(insight.lens[-1].logits, logits)
    row, window = insight.pattern.weights[-1], ours.config.window_of(1)
    assert abs(float(row.sum()) - 1) < 1e-12
    if window:  # block 1 of Mistral's and Phi-3's slides: nothing before its window is read
        assert float(row[:-window].abs().sum()) == 0.0 and float(row[-window:].abs().sum()) > 0


@pytest.mark.parametrize("name", NEW)
def test_patching_is_exact_at_both_ends(folders, name):
    ours = open_hf_model(folders[name], dtype="float64")
    clean = ours.tokenizer.encode_prompt("the json module reads text")
    at = len(clean) - 3  # one id changed, inside every window of the last position
    corrupt = [*clean[:at], 7 if clean[at] != 7 else 8, *clean[at + 1:]]
    patcher = Patcher(ours.model, clean, corrupt, 5, 6)
    assert patcher.clean_difference != patcher.corrupt_difference
    differ = tuple(i for i, (a, b) in enumerate(zip(clean, corrupt)) if a != b)
    assert patcher.difference([Patch("resid", 0, differ)]) == patcher.clean_difference
    last = ours.config.layers
    assert patcher.difference([Patch("resid", last, (len(clean) - 1,))]) == patcher.clean_difference


def _edited(folders, tmp_path: Path, name: str, **changes) -> Path:
    target = tmp_path / f"{name}-edited"
    shutil.copytree(folders[name], target)
    config = json.loads((target / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (target / "config.json").write_text(json.dumps(config))
    return target


REFUSALS = [
    ("phi3", {"rope_scaling": {"type": "longrope", "short_factor": [1.0, 1.0], "long_factor": [1.0, 1.0]}},
     "rope scaling 'longrope'"),
    ("phi3", {"rope_parameters": {"rope_type": "su", "rope_theta": 1000.0}}, "rope scaling 'su'"),
    ("phi3", {"partial_rotary_factor": 0.375, "rope_parameters": None}, "partial_rotary_factor 0.375"),
    ("qwen3", {"head_dim": None}, "head_dim null"),
    ("qwen3", {"attention_bias": True}, "attention_bias true"),
    ("qwen3", {"layer_types": ["full_attention", "chunked"]}, "layer_types"),
    ("mistral", {"sliding_window": 0}, "sliding_window must be a positive integer"),
]


@pytest.mark.parametrize("name, changes, named", REFUSALS, ids=[f"{r[0]}-{r[2]}" for r in REFUSALS])
def test_variants_we_do_not_build_are_refused_in_one_line(folders, tmp_path, name, changes, named):
    with pytest.raises(CheckpointError) as caught:
        open_hf_model(_edited(folders, tmp_path, name, **changes))
    message = str(caught.value)
    assert named in message and "\n" not in message
