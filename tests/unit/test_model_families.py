"""Transformers folders of five families open as they are: the prompt's ids, every logit and
the greedy ids equal transformers', and every view (lens, contributions) holds on each."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch

from conftest import run_cli
from family_support import (FAMILIES, byte_level_tokenizer, make_family_folder, metaspace_tokenizer, reference,
                            reference_greedy)
from minigpt_tui.engine.core.config import settings_in_use
from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.analysis.generation import DecisionStepper
from minigpt_tui.engine.analysis.generation_rule import GenerationRule
from minigpt_tui.engine.models.hf_models import open_hf_model
from minigpt_tui.engine.analysis.lens import inspect_decision
from minigpt_tui.engine.core.library_tokenizer import LibraryTokenizer

PROMPT = "The json module: héllo wörld 🙂 — tabs\tand spaces, 12345"
STEPS = 8


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    made = {}
    for index, family in enumerate(FAMILIES):
        # Pythia pads its head past the tokenizer's ids; SmolLM ties its head.
        extra = {"tie_word_embeddings": True} if family == "llama" else {}
        made[family] = make_family_folder(family, root / family, seed=index,
                                          pad_rows=5 if family == "gpt_neox" else 0, **extra)
    return made


@pytest.mark.parametrize("family", FAMILIES)
def test_ids_logits_and_greedy_ids_equal_transformers(folders, family):
    ref, ref_tokenizer = reference(folders[family])
    ours = open_hf_model(folders[family])
    assert ours.config.family == family
    ids = ref_tokenizer(PROMPT).input_ids
    assert ours.tokenizer.encode_prompt(PROMPT) == ids
    with torch.no_grad():
        expected = ref(torch.tensor([ids])).logits[0]
        got = ours.model(torch.tensor([ids])).logits[0]
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)  # float32 rounding (rotary tables)
    generated = reference_greedy(ref, ids, STEPS)
    rule = GenerationRule("greedy", max_new_tokens=STEPS, forbidden_ids=())
    for cache in (False, True):
        stepper = DecisionStepper.from_portable(ours, PROMPT, rule, use_kv_cache=cache)
        # EOS would stop us where transformers (told no EOS) goes on: compare up to it.
        chosen = [d.chosen.id for d in stepper.run()]
        assert chosen == generated[: len(chosen)]
        assert len(chosen) == STEPS or chosen[-1] in ours.tokenizer.eos_ids


@pytest.mark.parametrize("family", FAMILIES)
def test_a_cached_decision_equals_the_whole_forward(folders, family):
    """One new query over the cache (grouped kv heads read in place for llama and qwen2)
    gives the logits of running the whole prefix again: to float64 rounding in float64
    (the explicit path), to float32 rounding (the kernel sums in its own order) in float32."""
    for dtype, tolerance in (("float64", 1e-12), ("float32", 3e-5)):
        _cached_equals_whole(open_hf_model(folders[family], dtype=dtype), tolerance)


def _cached_equals_whole(ours, tolerance: float) -> None:
    rule = GenerationRule("greedy", max_new_tokens=4, forbidden_ids=())
    stepper = DecisionStepper.from_portable(ours, PROMPT, rule, use_kv_cache=True)
    decisions = list(stepper.run())
    prefix = list(stepper.prompt_ids)
    for decision in decisions:
        with torch.no_grad():
            whole = ours.model(torch.tensor([prefix])).logits[0, -1].to(torch.float64)
        torch.testing.assert_close(decision.logits, whole, atol=tolerance, rtol=tolerance)
        prefix.append(decision.chosen.id)
    assert len(decisions) >= 2


LLAMA3 = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          # with head width 8 and base 500 the wavelengths are about 6, 30, 140 and 660: one
          # kept, one blended, two divided
          "original_max_position_embeddings": 32}


@pytest.mark.parametrize("family, scaling", [("llama", {"rope_type": "linear", "factor": 3.0}), ("llama", LLAMA3),
                                             ("gpt_neox", {"rope_type": "linear", "factor": 2.0})],
                         ids=["llama-linear", "llama-llama3", "gpt_neox-linear"])
def test_rope_scaling_equals_transformers_and_survives_export(tmp_path, capsys, family, scaling):
    folder = make_family_folder(family, tmp_path / "scaled", rope_scaling=scaling)
    ref, ref_tokenizer = reference(folder)
    ours = open_hf_model(folder)
    assert (ours.config.rope_scaling, ours.config.rope_factor) == (scaling["rope_type"], scaling["factor"])
    # The State panel lists the scaling settings its kind reads, and only those.
    shown = settings_in_use(ours.config.declared())
    assert shown["rope_scaling"] == scaling["rope_type"] and shown["rope_factor"] == scaling["factor"]
    assert ("rope_original_context" in shown) == (scaling["rope_type"] == "llama3")
    ids = ref_tokenizer(PROMPT).input_ids
    with torch.no_grad():
        expected = ref(torch.tensor([ids])).logits[0]
        got = ours.model(torch.tensor([ids])).logits[0]
        plain = make_family_folder(family, tmp_path / "plain")
        unscaled = open_hf_model(plain).model(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(got, expected, atol=3e-5, rtol=1e-5)  # float32 rounding (rotary tables)
    assert float((unscaled - expected).abs().max()) > 1e-3  # the scaling changes what is computed
    assert [d.chosen.id for d in DecisionStepper.from_portable(
        ours, PROMPT, GenerationRule("greedy", max_new_tokens=4, forbidden_ids=()), use_kv_cache=True).run()] == \
        reference_greedy(ref, ids, 4)[:4]
    code, _, err = run_cli(capsys, "export", "--model", str(folder), "--format", "hf", "--out", str(tmp_path / "out"))
    assert code == 0, err
    back, _ = reference(tmp_path / "out")
    with torch.no_grad():
        torch.testing.assert_close(back(torch.tensor([ids])).logits[0], expected, atol=3e-5, rtol=1e-5)


def test_linear_rope_scaling_travels_through_gguf(tmp_path, capsys):
    from minigpt_tui.engine.models.gguf_models import open_gguf_model

    folder = make_family_folder("llama", tmp_path / "scaled", rope_scaling={"rope_type": "linear", "factor": 3.0})
    out = tmp_path / "model.gguf"
    code, _, err = run_cli(capsys, "export", "--model", str(folder), "--format", "gguf", "--quant", "f32",
                           "--out", str(out))
    assert code == 0, err
    read = open_gguf_model(out)
    assert (read.config.rope_scaling, read.config.rope_factor) == ("linear", 3.0)
    ids = read.tokenizer.encode_prompt(PROMPT)
    with torch.no_grad():
        torch.testing.assert_close(read.model(torch.tensor([ids])).logits[0],
                                   open_hf_model(folder).model(torch.tensor([ids])).logits[0], atol=1e-6, rtol=1e-6)


def test_llama3_rope_scaling_is_refused_by_the_gguf_export_in_one_line(tmp_path, capsys):
    folder = make_family_folder("llama", tmp_path / "scaled", rope_scaling=LLAMA3)
    capsys.readouterr()  # what transformers printed while saving
    out = tmp_path / "model.gguf"
    code, _, err = run_cli(capsys, "export", "--model", str(folder), "--format", "gguf", "--out", str(out))
    assert code == 1 and "llama3 rope scaling" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_the_families_are_settings_of_the_parts(folders):
    parts = {f: open_hf_model(folders[f]).config for f in FAMILIES}
    assert parts["gpt_neox"].residual == "parallel" and parts["gpt_neox"].rotary_dims == 4
    assert not parts["gpt_neox"].tied_head and parts["llama"].tied_head and not parts["qwen2"].tied_head
    assert parts["gpt_neo"].attention_scale == "none" and parts["gpt_neo"].local_layers == (1,)
    assert parts["qwen2"].attention_bias == "qkv" and parts["gpt_neo"].attention_bias == "out"
    assert parts["llama"].kv_heads == 2 and parts["llama"].rope_base == 500.0


def test_gpt2_in_float64_equals_transformers_to_1e_10(tmp_path):
    folder = make_family_folder("gpt2", tmp_path / "gpt2", seed=7)
    ref, ref_tokenizer = reference(folder, torch.float64)
    ours = open_hf_model(folder, dtype="float64")
    ids = ref_tokenizer(PROMPT).input_ids
    with torch.no_grad():
        expected = ref(torch.tensor([ids])).logits[0]
        got = ours.model(torch.tensor([ids])).logits[0]
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, atol=1e-10, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_contributions_add_up_and_the_lens_ends_at_the_logits(folders, family):
    ours = open_hf_model(folders[family], dtype="float64")
    ids = ours.tokenizer.encode_prompt(PROMPT)
    with torch.no_grad():  # the last position alone through the head, as a decision puts it
        logits = ours.model(torch.tensor([ids]), last_only=True).logits[0, -1]
    chosen = int(logits.argmax())
    other = int(logits.argsort()[-2])
    insight = inspect_decision(ours.model, ours.tokenizer, ids, chosen, lens=True, contributions=True,
                               candidate_ids=[other], pattern=(1, 3))
    for part in insight.contributions:
        assert abs(part.total - part.logit) < 1e-9, (family, part.total, part.logit)
    assert torch.equal(insight.lens[-1].logits, logits.to(torch.float64))
    assert insight.pattern.weights.shape == (len(ids), len(ids))
    if family == "gpt_neo":  # the local block sees only the last 3 positions
        row = insight.pattern.weights[-1]
        assert float(row[:-3].abs().sum()) == 0.0 and abs(float(row[-3:].sum()) - 1) < 1e-12


def _random_text(rng: random.Random) -> str:
    alphabet = "abc XYZ 09 é ü 日本 🙂 \t\n'\".,;:!?-_" + "".join(chr(rng.randrange(32, 0x3000)) for _ in range(20))
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 60)))


@pytest.mark.parametrize("kind", ["byte-level", "split-regex", "metaspace"])
def test_tokenizers_encode_as_transformers_on_random_text(kind):
    import transformers as tr

    raw = metaspace_tokenizer() if kind == "metaspace" else byte_level_tokenizer(split_regex=kind == "split-regex")
    wrapped = tr.PreTrainedTokenizerFast(tokenizer_object=raw)
    ours = LibraryTokenizer.from_text(raw.to_str(), None, bos_id=None, eos_ids=(), source="tokenizer.json")
    rng = random.Random(5)
    for _ in range(200):
        text = _random_text(rng)
        ids = wrapped(text).input_ids
        assert ours.encode_prompt(text) == ids
        if kind != "metaspace":  # byte-level pieces are the text's bytes, exactly
            assert b"".join(ours.piece(i) for i in ids) == text.encode("utf-8")


def test_pieces_show_bytes_and_byte_fallback():
    raw = metaspace_tokenizer()
    ours = LibraryTokenizer.from_text(raw.to_str(), None, bos_id=1, eos_ids=(2,), source="t")
    fallback = raw.token_to_id("<0xF0>")
    assert ours.piece(fallback) == b"\xf0" and ours.piece_text(fallback) == "\\xf0"
    assert ours.piece_text(1) == "<s>" and ours.decode([1, raw.token_to_id("▁the")]).data == b" the"


def test_a_float16_folder_is_widened(tmp_path):
    folder = make_family_folder("llama", tmp_path / "half", dtype=torch.float16)
    ours = open_hf_model(folder)
    assert ours.model.token_embedding.weight.dtype == torch.float32
    ref, ref_tokenizer = reference(folder, torch.float32)
    ids = ref_tokenizer(PROMPT).input_ids
    with torch.no_grad():
        # float32 sums in another order than transformers': 1.5e-5 seen with AVX-512 kernels
        torch.testing.assert_close(ours.model(torch.tensor([ids])).logits, ref(torch.tensor([ids])).logits,
                                   atol=5e-5, rtol=5e-5)


def test_generate_and_infer_take_a_folder(folders, capsys):
    folder = folders["gpt2"]
    code, out, err = run_cli(capsys, "generate", "--model", str(folder), "--prompt", "The json", "--max-new-tokens",
                             "3", "--greedy", "--json", "--lens")
    assert code == 0, err
    trace = json.loads(out)
    assert trace["model"]["family"] == "gpt2" and len(trace["decisions"]) == 3
    assert trace["tokenizer"]["kind"] == "tokenizers"


def _refusal(folder: Path) -> str:
    with pytest.raises(CheckpointError) as caught:
        open_hf_model(folder)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_bad_folders_are_refused_in_one_line(folders, tmp_path):
    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(folders["llama"], target)
        return target

    no_weights = copy("no-weights")
    (no_weights / "model.safetensors").unlink()
    assert "no model.safetensors" in _refusal(no_weights)

    other = copy("other")
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "model_type": "mamba", "architectures": ["MambaForCausalLM"]}))
    assert "unsupported architecture 'MambaForCausalLM'" in _refusal(other)

    for key, value, named in (("rope_scaling", {"rope_type": "yarn", "factor": 2.0}, "rope scaling 'yarn'"),
                              ("num_local_experts", 8, "mixture of experts"),
                              ("hidden_act", "relu", "hidden_act 'relu'")):
        edited = copy(f"edited-{key}")
        config = json.loads((edited / "config.json").read_text())
        (edited / "config.json").write_text(json.dumps({**config, key: value}))
        assert named in _refusal(edited)

    wrong = copy("wrong-shape")
    config = json.loads((wrong / "config.json").read_text())
    (wrong / "config.json").write_text(json.dumps({**config, "intermediate_size": 40}))
    assert "blocks.0.ffn.gate_proj.weight" in _refusal(wrong)

    bad_tokenizer = copy("bad-tokenizer")
    (bad_tokenizer / "tokenizer.json").write_text('{"model": {"type": "Nonsense"}}')
    assert "the tokenizers library refuses" in _refusal(bad_tokenizer)
    before = sorted(p.name for p in bad_tokenizer.iterdir())
    _refusal(bad_tokenizer)
    assert sorted(p.name for p in bad_tokenizer.iterdir()) == before  # nothing written


def test_contrast_of_two_folders_that_share_a_tokenizer(tmp_path):
    """An instruct model against its base: two llama folders with one tokenizer."""
    from minigpt_tui.engine.analysis.contrast import contrast_models

    base = make_family_folder("llama", tmp_path / "base", seed=1)
    tuned = make_family_folder("llama", tmp_path / "tuned", seed=2)
    a, b = open_hf_model(base, dtype="float64"), open_hf_model(tuned, dtype="float64")
    result = contrast_models(a, b, PROMPT, rule=GenerationRule("greedy", max_new_tokens=4)).to_json()
    assert len(result["positions"]) == 4
    assert all(p["kl"] >= 0 for p in result["positions"])
    assert result["models"]["a"]["family"] == "llama" and result["models"]["b"]["path"] == str(tuned)
