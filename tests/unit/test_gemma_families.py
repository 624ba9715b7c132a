"""Gemma 2 and Gemma 3 (text), each a declaration of parts: tiny random transformers models
made here (sliding windows shorter than the prompt, grouped kv heads, soft-capping active,
Gemma 3 with a free head width and its own local rotary base) open as ours with
transformers' logits and greedy ids, bit for bit once the rotary tables are rounded as
transformers rounds them; the key/value cache equals running the whole prefix again past
the window; the lens ends at the logits; contributions are refused in one line; patching is
exact at both ends; config values we do not build are refused in one line. (The registry
test proves their folder round trip and ``convert``.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from family_support import cached_decisions_equal_recompute, make_family_folder, reference, reference_greedy

from minigpt_tui.engine.analysis.generation import DecisionStepper
from minigpt_tui.engine.analysis.generation_rule import GenerationRule
from minigpt_tui.engine.analysis.lens import direct_contributions, inspect_decision, run_with_cache
from minigpt_tui.engine.analysis.patching import Patch, Patcher
from minigpt_tui.engine.core.config import PART_DEFAULTS, ModelConfig, load_config
from minigpt_tui.engine.core.errors import CheckpointError, ConfigError, GenerationError
from minigpt_tui.engine.models import model as model_module
from minigpt_tui.engine.models.hf_models import open_hf_model

GEMMA = ("gemma2", "gemma3")
PROMPT = "The json module: héllo wörld — tabs\tand spaces, 12345"
GEMMA_PARTS = ("norm_offset", "sandwich_norms", "scaled_embedding", "attention_scalar", "attention_softcap",
               "logit_softcap", "local_rope_base")


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gemma")
    return {name: make_family_folder(name, root / name, seed=70 + i) for i, name in enumerate(GEMMA)}


def _eager(folder: Path):
    import transformers as tr

    return tr.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()


def _float32_tables(positions, dims, base, dtype, scaling=None):
    """transformers' rotary tables: frequencies, angles, cos and sin in float32."""
    assert scaling is None or scaling.rope_scaling == "none"
    inv_freq = 1.0 / (base ** (torch.arange(0, dims, 2, dtype=torch.int64).float() / dims))
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def test_the_gemma_parts_leave_every_other_model_as_it_was():
    for name in GEMMA_PARTS:
        assert name in PART_DEFAULTS and name not in ModelConfig().declared()
        assert name not in ModelConfig(family="gpt2").declared()
    gemma2, gemma3 = (ModelConfig(family=name) for name in GEMMA)
    assert (gemma2.norm_offset, gemma2.sandwich_norms, gemma2.scaled_embedding, gemma2.ffn_kind) == (
        True, True, True, "geglu")
    assert gemma3.qk_norm and not gemma2.qk_norm
    assert not ModelConfig(family="llama").sandwich_norms and ModelConfig(family="llama").ffn_kind == "swiglu"


@pytest.mark.parametrize("name", GEMMA)
def test_logits_and_greedy_ids_equal_transformers(folders, name):
    ours = open_hf_model(folders[name])
    _, tokenizer = reference(folders[name])
    ref = _eager(folders[name])
    ids = tokenizer(PROMPT).input_ids
    assert ours.tokenizer.encode_prompt(PROMPT) == ids
    assert len(ids) > 8  # longer than the window of 4
    with torch.no_grad():
        theirs = ref(torch.tensor([ids])).logits[0]
        # Our rotary tables are computed in float64 and rounded once, transformers' in float32: the
        # angles differ in their last float32 bits (the test below is exact with its rounding).
        torch.testing.assert_close(ours.model(torch.tensor([ids])).logits[0], theirs, atol=1e-5, rtol=1e-5)
    assert float(theirs.abs().max()) > 0.9 * 3.0  # the final soft-cap of 3 is reached: it is active
    rule = GenerationRule("greedy", max_new_tokens=6, forbidden_ids=())
    chosen = [d.chosen.id for d in DecisionStepper.from_portable(ours, PROMPT, rule, use_kv_cache=True).run()]
    assert chosen == reference_greedy(ref, ids, 6)[: len(chosen)]


@pytest.mark.parametrize("name", GEMMA)
def test_with_transformers_rotary_rounding_every_part_equals_it_bit_for_bit(folders, name, monkeypatch):
    """(1 + w) norms in float32, sandwich norms, sqrt(width) in the model's dtype, GELU-tanh
    gating, query_pre_attn_scalar, both soft-caps, per-kind rotary bases and q/k norms: with
    the rotary tables rounded as transformers rounds them, nothing else differs by a bit."""
    monkeypatch.setattr(model_module, "rope_tables", _float32_tables)
    ours = open_hf_model(folders[name])
    ids = ours.tokenizer.encode_prompt(PROMPT)
    with torch.no_grad():
        assert torch.equal(ours.model(torch.tensor([ids])).logits[0], _eager(folders[name])(
            torch.tensor([ids])).logits[0])


def test_the_parts_are_read_from_config_json(folders):
    gemma2 = open_hf_model(folders["gemma2"]).config
    assert (gemma2.attention_window, gemma2.local_layers, gemma2.attention_scalar) == (4, (0, 2), 12.0)
    assert (gemma2.attention_softcap, gemma2.logit_softcap, gemma2.tied_head, gemma2.head_dim) == (2.0, 3.0, True, 8)
    gemma3 = open_hf_model(folders["gemma3"]).config
    assert (gemma3.head_dim, gemma3.qk_norm, gemma3.local_layers, gemma3.attention_window) == (16, True, (0, 2), 4)
    assert (gemma3.rope_base, gemma3.local_rope_base, gemma3.logit_softcap, gemma3.attention_softcap) == (
        5000.0, 100.0, 3.0, 0.0)


@pytest.mark.parametrize("name", GEMMA)
def test_a_cached_decision_equals_the_whole_prefix_past_the_window(folders, name):
    decisions, prefix = cached_decisions_equal_recompute(open_hf_model(folders[name], dtype="float64"), PROMPT)
    assert len(decisions) >= 2 and len(prefix) > 4 + 5


@pytest.mark.parametrize("name", GEMMA)
def test_the_lens_ends_at_the_capped_logits_and_contributions_are_refused(folders, name):
    ours = open_hf_model(folders[name], dtype="float64")
    ids = ours.tokenizer.encode_prompt(PROMPT)
    with torch.no_grad():
        logits = ours.model(torch.tensor([ids]), last_only=True).logits[0, -1]
    chosen, other = int(logits.argmax()), int(logits.argsort()[-2])
    insight = inspect_decision(ours.model, ours.tokenizer, ids, chosen, lens=True, contributions=True,
                               candidate_ids=[other], pattern=(0, 3))
    assert torch.equal(insight.lens[-1].logits, logits)
    assert all(float(row.logits.abs().max()) <= 3.0 for row in insight.lens)  # every lens row is capped
    assert insight.contributions == () and "sandwich_norms" in insight.to_json()["contributions_refused"]
    row = insight.pattern.weights[-1]  # block 0 slides over the last 4 positions
    assert float(row[:-4].abs().sum()) == 0.0 and abs(float(row[-4:].sum()) - 1) < 1e-12
    with pytest.raises(GenerationError) as caught:
        direct_contributions(ours.model, ours.tokenizer, run_with_cache(ours.model, ids), [chosen])
    assert name in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("name", GEMMA)
def test_patching_is_exact_at_both_ends(folders, name):
    ours = open_hf_model(folders[name], dtype="float64")
    clean = ours.tokenizer.encode_prompt("the json module reads text")
    corrupt = [*clean[:2], 7 if clean[2] != 7 else 8, *clean[3:]]  # one id changed
    patcher = Patcher(ours.model, clean, corrupt, 5, 6)
    assert patcher.clean_difference != patcher.corrupt_difference
    assert abs(patcher.clean_difference) < 2 * 3.0  # a difference of two capped logits
    differ = tuple(i for i, (a, b) in enumerate(zip(clean, corrupt)) if a != b)
    assert patcher.difference([Patch("resid", 0, differ)]) == patcher.clean_difference
    last = ours.config.layers
    assert patcher.difference([Patch("resid", last, (len(clean) - 1,))]) == patcher.clean_difference


def test_a_new_gemma_model_starts_as_the_identity_of_its_norms():
    """Built here, a (1 + w) norm's stored weight starts at 0 (scale 1), and the model trains."""
    config = ModelConfig(family="gemma3", width=16, heads=2, kv_heads=1, ffn=32, layers=2, head_dim_override=8,
                         attention_window=3, local_layers=(0,), local_rope_base=100.0, logit_softcap=5.0)
    model = model_module.MiniGPT(config, 50)
    model.initialize(3)
    norms = [p for n, p in model.named_parameters() if n.endswith("norm.weight")]
    assert len(norms) == 2 * 6 + 1 and all(float(p.detach().abs().sum()) == 0 for p in norms)
    ids = torch.arange(10)[None] % 50
    loss = torch.nn.functional.cross_entropy(model(ids).logits[0], ids[0])
    loss.backward()
    assert all(p.grad is not None for p in norms)


def _edited(folders, tmp_path: Path, name: str, **changes) -> Path:
    target = tmp_path / f"{name}-edited"
    shutil.copytree(folders[name], target)
    config = json.loads((target / "config.json").read_text())
    config.update(changes)
    (target / "config.json").write_text(json.dumps(config))
    return target


REFUSALS = [
    ("gemma2", {"hidden_activation": "gelu"}, "hidden_activation 'gelu'"),
    ("gemma2", {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ("gemma2", {"layer_types": ["full_attention", "chunked", "full_attention"]}, "layer_types"),
    ("gemma2", {"final_logit_softcapping": -1.0}, "final_logit_softcapping -1.0"),
    ("gemma2", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}}, "rope scaling"),
    ("gemma3", {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 5000.0},
                                    "sliding_attention": {"rope_type": "linear", "factor": 2.0}}},
     "on the sliding-window layers"),
    ("gemma3", {"query_pre_attn_scalar": 0}, "query_pre_attn_scalar must be a positive number"),
    ("gemma3", {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"]},
     "Gemma3ForConditionalGeneration"),
]


@pytest.mark.parametrize("name, changes, named", REFUSALS, ids=[f"{r[0]}-{r[2]}" for r in REFUSALS])
def test_variants_we_do_not_build_are_refused_in_one_line(folders, tmp_path, name, changes, named):
    with pytest.raises(CheckpointError) as caught:
        open_hf_model(_edited(folders, tmp_path, name, **changes))
    message = str(caught.value)
    assert named in message and "\n" not in message


@pytest.mark.parametrize("setting, value", [("logit_softcap", -1.0), ("attention_softcap", -2.0),
                                            ("attention_scalar", -4.0), ("local_rope_base", -1.0),
                                            ("ffn_kind", "reglu")])
def test_bad_gemma_settings_are_refused_in_one_line(setting, value):
    with pytest.raises(ConfigError) as caught:
        load_config("mini", overrides={"model": {"family": "gemma2", setting: value}})
    assert f"model.{setting}" in str(caught.value) and "\n" not in str(caught.value)
