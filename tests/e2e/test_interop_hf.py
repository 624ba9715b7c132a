"""Export to transformers and back: the exported folder loads unchanged in transformers and
computes our logits, greedy ids and token ids; transformers folders (one file, sharded,
save_model-style) convert into our portable model; everything else is refused in one line.

transformers is a test-only dependency; nothing is downloaded (HF_HUB_OFFLINE).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: never reach the hub
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest
import torch
import transformers
from safetensors.torch import save_model
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from conftest import cli_command, cli_env
from minigpt_tui.engine.formats.inspect import inspect_path
from minigpt_tui.engine.formats.portable import save_portable_model
from minigpt_tui.engine.models.model_file import PortableModel, load_portable_model
from minigpt_tui.engine.formats.state_groups import StateGroup
from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.core.errors import WriteRefused, CheckpointError, TokenizerError
from minigpt_tui.engine.analysis.generation import DecisionStepper, GenerationRule
from minigpt_tui.engine.formats import hf_tokenizer
from minigpt_tui.engine.formats.hf_export import export_hf
from minigpt_tui.engine.models.hf_models import convert_hf
from minigpt_tui.engine.models.model import MiniGPT
from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

PROMPTS = {
    "tiny": ["the", "a b", "é!", "<bos>", "zz"],  # context 8: BOS + at most 6 ids
    "mini": ["the cat sat on", "Q: what is 2+2?", "naïve <eos> text", "x", "  spaces\tand tabs"],
}
# Largest |ours - transformers| allowed per (family, dtype); llama float64 is bounded by
# transformers computing RMSNorm and RoPE in float32 internally.
TOLERANCE = {
    ("gpt2", torch.float64): 1e-12,
    ("llama", torch.float64): 1e-6,
    ("gpt2", torch.float32): 1e-5,
    ("llama", torch.float32): 1e-5,
}


def trained_tokenizer(preset: str) -> ByteBPETokenizer:
    config = load_config(preset)
    return ByteBPETokenizer.train(load_corpus(config.corpus).train, config.tokenizer.merges)


def randomized_model(preset: str, dtype: torch.dtype, seed: int, tokenizer: ByteBPETokenizer) -> MiniGPT:
    """Every tensor random and far from its initial value, so that a wrong mapping of any
    one of them changes the logits well beyond the tolerances."""
    config = load_config(preset).model
    model = MiniGPT(config, tokenizer.vocab_size, dtype)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float64)
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.2 * noise)
            elif name.endswith(".bias"):
                param.copy_(0.1 * noise)
            else:
                param.copy_(0.2 * noise)
    return model


def portable(tmp: Path, preset: str, dtype: torch.dtype, seed: int = 7) -> PortableModel:
    tokenizer = trained_tokenizer(preset)
    path = tmp / f"{preset}-{str(dtype).removeprefix('torch.')}.safetensors"
    save_portable_model(randomized_model(preset, dtype, seed, tokenizer), tokenizer, path)
    return load_portable_model(path)


CASES = [("tiny", torch.float64), ("tiny", torch.float32), ("mini", torch.float64), ("mini", torch.float32)]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(preset, dtype) -> (our portable model, its export folder, transformers model, tokenizer)."""
    root = tmp_path_factory.mktemp("exports")
    out = {}
    for preset, dtype in CASES:
        ours = portable(root, preset, dtype)
        folder = root / f"hf-{preset}-{str(dtype).removeprefix('torch.')}"
        export_hf(ours, folder)
        model = AutoModelForCausalLM.from_pretrained(folder)
        model.eval()
        out[(preset, dtype)] = (ours, folder, model, AutoTokenizer.from_pretrained(folder))
    return out


# -- export -----------------------------------------------------------------------------------
def test_tiny_exports_to_a_tied_llama_with_29_tensors_and_1572_parameters(exported):
    ours, folder, model, _ = exported[("tiny", torch.float64)]
    assert isinstance(model, LlamaForCausalLM)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied, one tensor
    params = list(model.parameters())
    assert (len(params), sum(p.numel() for p in params)) == (29, 1572)
    config = json.loads((folder / "config.json").read_text())
    assert config["tie_word_embeddings"] is True
    assert (config["bos_token_id"], config["eos_token_id"]) == (0, 1)
    assert model.config.tie_word_embeddings and model.config.bos_token_id == 0 and model.config.eos_token_id == 1
    assert config["minigpt_tui"]["model_identity"] == ours.identity
    assert sorted(p.name for p in folder.iterdir()) == sorted([
        "config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
        "tokenizer.json", "tokenizer_config.json"])


@pytest.mark.parametrize("preset,dtype", CASES)
def test_export_keeps_the_dtype_and_class(exported, preset, dtype):
    _, _, model, _ = exported[(preset, dtype)]
    assert model.dtype == dtype
    assert all(p.dtype == dtype for p in model.parameters())
    assert isinstance(model, LlamaForCausalLM if preset == "tiny" else GPT2LMHeadModel)


@pytest.mark.parametrize("preset,dtype", CASES)
def test_exported_logits_match_ours(exported, preset, dtype):
    ours, _, model, _ = exported[(preset, dtype)]
    tolerance = TOLERANCE[(ours.config.family, dtype)]
    for prompt in PROMPTS[preset]:
        ids = torch.tensor([ours.tokenizer.encode_prompt(prompt)])
        with torch.no_grad():
            expected = ours.model(ids).logits
            got = model(ids).logits
        assert got.dtype == dtype
        assert expected.std() > 0.2  # the tolerance is small against what a wrong mapping changes
        assert (got - expected).abs().max().item() <= tolerance, prompt


@pytest.mark.parametrize("preset,dtype", CASES)
def test_greedy_generation_gives_the_same_ids(exported, preset, dtype):
    ours, _, model, _ = exported[(preset, dtype)]
    context = ours.config.context
    for prompt in PROMPTS[preset]:
        prompt_ids = ours.tokenizer.encode_prompt(prompt)
        budget = min(12, context - len(prompt_ids))  # prompt and generated ids inside the context
        stepper = DecisionStepper(ours.model, ours.tokenizer, prompt, GenerationRule.greedy(max_new_tokens=budget))
        stepper.run()
        ids = torch.tensor([prompt_ids])
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=budget, do_sample=False,
                                 suppress_tokens=[0], eos_token_id=1, pad_token_id=1)
        assert out[0, len(prompt_ids):].tolist() == stepper.generated_ids, prompt


@pytest.mark.parametrize("preset", ["tiny", "mini"])
def test_hf_tokenizer_encodes_to_our_ids(exported, preset):
    ours, _, _, tokenizer = exported[(preset, torch.float64)]
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1)
    assert len(tokenizer) == ours.tokenizer.vocab_size
    records = load_corpus(load_config(preset).corpus).train
    for text in PROMPTS[preset] + records:
        expected = ours.tokenizer.encode_prompt(text)  # BOS, the text, no EOS: a prompt to continue
        assert tokenizer(text)["input_ids"] == expected, text
        assert tokenizer.decode(expected, skip_special_tokens=True) == text


def _our_greedy(ours: PortableModel, prompt: str) -> tuple[list[int], int]:
    """Our greedy continuation of ``prompt`` and the budget that keeps it inside the context."""
    budget = min(12, ours.config.context - len(ours.tokenizer.encode_prompt(prompt)))
    stepper = DecisionStepper(ours.model, ours.tokenizer, prompt, GenerationRule.greedy(max_new_tokens=budget))
    stepper.run()
    return stepper.generated_ids, budget


@pytest.mark.parametrize("preset,dtype", CASES)
def test_generate_on_the_exported_tokenizer_output_gives_our_greedy_ids(exported, preset, dtype):
    """The usual call: ``model.generate(**tok(prompt, return_tensors="pt"))``, nothing else set."""
    ours, _, model, tokenizer = exported[(preset, dtype)]
    for prompt in PROMPTS[preset]:
        expected, budget = _our_greedy(ours, prompt)
        inputs = tokenizer(prompt, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=budget)
        prompt_length = inputs["input_ids"].shape[1]
        assert out[0, :prompt_length].tolist() == ours.tokenizer.encode_prompt(prompt)
        assert out[0, prompt_length:].tolist() == expected, prompt


@pytest.mark.parametrize("preset,dtype", CASES)
def test_text_generation_pipeline_on_the_export_gives_our_greedy_text(exported, preset, dtype):
    ours, folder, _, _ = exported[(preset, dtype)]
    generator = transformers.pipeline("text-generation", model=str(folder), dtype=dtype)
    for prompt in PROMPTS[preset]:
        expected, budget = _our_greedy(ours, prompt)
        expected_text = ours.tokenizer.decode(expected).data.decode("utf-8", errors="replace")
        result = generator(prompt, max_new_tokens=budget, return_full_text=False)
        assert result[0]["generated_text"] == expected_text, prompt


def test_tokenizer_with_two_merges_of_the_same_bytes_is_refused(tmp_path):
    a, b, c = (ord(ch) + 2 for ch in "abc")
    # 258 = ab, 259 = bc, 260 = (ab)c, 261 = a(bc): both "abc"
    tokenizer = ByteBPETokenizer(((a, b), (b, c), (258, c), (a, 259)))
    with pytest.raises(TokenizerError, match="merges 2 and 3 both produce the bytes b'abc'"):
        hf_tokenizer.tokenizer_json(tokenizer)
    config = load_config("tiny").model
    model = MiniGPT(config, tokenizer.vocab_size, torch.float64)
    model.initialize(1)
    save_portable_model(model, tokenizer, tmp_path / "dup.safetensors")
    result = subprocess.run(
        cli_command("export", "--model", str(tmp_path / "dup.safetensors"), "--format", "hf", "--out",
                    str(tmp_path / "out")),
        capture_output=True, text=True, env=cli_env(tmp_path), timeout=120)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "both produce the bytes" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dup.safetensors", "runs"] or \
        sorted(p.name for p in tmp_path.iterdir()) == ["dup.safetensors"]


def _two_merge_document() -> dict:
    a, b, c = (ord(ch) + 2 for ch in "abc")
    return hf_tokenizer.tokenizer_json(ByteBPETokenizer(((a, b), (258, c))))


def _edited(edit) -> dict:
    doc = _two_merge_document()
    edit(doc, doc["model"])
    return doc


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d, m: d.pop("model"), "not a tokenizer.json document (no model section)"),
        (lambda d, m: m.update(type="WordPiece"), "WordPiece tokenizers are not supported; only byte-level BPE"),
        (lambda d, m: m.update(byte_fallback=True),
         "SentencePiece-style BPE (byte_fallback) is not supported; only byte-level BPE"),
        (lambda d, m: d.update(pre_tokenizer=None),
         "unsupported tokenizer: no ByteLevel pre-tokenizer; only whole-text ByteLevel BPE is supported"),
        (lambda d, m: d.update(normalizer={"type": "NFC"}), "unsupported tokenizer: it normalizes text before encoding"),
        (lambda d, m: m.update(dropout=0.1), "unsupported tokenizer: BPE dropout is set"),
        (lambda d, m: m.update(ignore_merges=True), "unsupported tokenizer: BPE ignore_merges is set"),
        (lambda d, m: m.update(vocab=[]), "the BPE model has no vocab map or merges list"),
        (lambda d, m: m["vocab"].update(ab=2.5), "vocabulary id 2.5 is not a distinct integer"),
        (lambda d, m: d.update(added_tokens=[]), "id 0 is not a special token; this layout needs BOS at 0"),
        (lambda d, m: d["added_tokens"].append({"id": 300, "special": True}),
         "unsupported tokenizer: extra added token at id 300"),
        (lambda d, m: m["vocab"].update({"Ā": 3, "ā": 2}),
         "unsupported vocabulary layout: id 2 is not byte 0 (bytes must hold ids 2..257 in byte order)"),
        (lambda d, m: m.update(merges=[["a"], ["ab", "c"]]), "merge 0 is not a pair of strings"),
        (lambda d, m: m.update(merges=["a b", "ab zz"]), "merge 1 names a string that is not in the vocabulary"),
        (lambda d, m: m.update(merges=[["ab", "c"], ["a", "b"]]),
         "unsupported vocabulary layout: merge 0 produces id 259, not 258 (merges must take ids 258, 259, ... in "
         "rank order)"),
        (lambda d, m: m["vocab"].update(extra=260),
         "unsupported vocabulary layout: 261 entries for 2 special ids, 256 bytes and 2 merges"),
    ],
)
def test_a_tokenizer_document_outside_our_layout_is_refused_naming_the_first_fault(edit, message):
    with pytest.raises(TokenizerError) as err:
        hf_tokenizer.tokenizer_from_json(_edited(edit), "t.json")
    assert str(err.value) == f"t.json: {message}"


def test_our_tokenizer_document_reads_back_with_either_merge_spelling():
    doc = _two_merge_document()
    assert hf_tokenizer.tokenizer_from_json(doc, "t.json").merges == ((99, 100), (258, 101))
    doc["model"]["merges"] = ["a b", "ab c"]
    assert hf_tokenizer.tokenizer_from_json(doc, "t.json").merges == ((99, 100), (258, 101))


def test_export_refuses_a_gpt2_with_grouped_kv_heads_and_writes_nothing(tmp_path):
    tokenizer = trained_tokenizer("tiny")
    config = load_config("mini").replace(model={"heads": 2, "kv_heads": 1}).model
    model = MiniGPT(config, tokenizer.vocab_size, torch.float64)
    model.initialize(3)
    save_portable_model(model, tokenizer, tmp_path / "gqa.safetensors")
    with pytest.raises(CheckpointError, match="no GPT2LMHeadModel form"):
        export_hf(load_portable_model(tmp_path / "gqa.safetensors"), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_export_never_overwrites(tmp_path, exported):
    ours, _, _, _ = exported[("tiny", torch.float64)]
    target = tmp_path / "taken"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(WriteRefused, match="already exists"):
        export_hf(ours, target)
    assert [p.name for p in target.iterdir()] == ["notes.txt"]


def test_export_and_convert_refuse_an_empty_folder_a_dangling_link_and_a_checkpoint_folder(tmp_path, exported):
    ours, folder, _, _ = exported[("tiny", torch.float64)]
    (tmp_path / "empty").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for name, kind in (("empty", "a folder"), ("dangling", "a symbolic link"), ("loop", "a symbolic link")):
        with pytest.raises(WriteRefused, match=rf"already exists \({kind}\)"):
            export_hf(ours, tmp_path / name)
        with pytest.raises(WriteRefused, match=rf"already exists \({kind}\)"):
            convert_hf(folder, tmp_path / name)
    assert (tmp_path / "dangling").is_symlink() and not (tmp_path / "nowhere").exists()
    checkpoint = tmp_path / "run" / "checkpoints" / "step-000004"  # a checkpoint folder's two marks
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_bytes(Path(ours.path).read_bytes())
    (checkpoint / "manifest.json").write_text("{}")
    before = sorted(p.name for p in checkpoint.iterdir())
    with pytest.raises(WriteRefused, match="inside the checkpoint folder"):
        export_hf(ours, checkpoint / "hf")
    with pytest.raises(WriteRefused, match="inside the checkpoint folder"):
        convert_hf(folder, checkpoint / "back.safetensors")
    assert sorted(p.name for p in checkpoint.iterdir()) == before


def test_a_stale_partial_export_of_a_dead_process_is_reclaimed(tmp_path, exported):
    import subprocess

    ours, _, _, _ = exported[("tiny", torch.float64)]
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".out.partial-{dead.pid}"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"x" * 1000)
    export_hf(ours, tmp_path / "out")
    assert not stale.exists() and (tmp_path / "out" / "config.json").is_file()


# -- import back ------------------------------------------------------------------------------
@pytest.mark.parametrize("preset,dtype", CASES)
def test_export_then_convert_gives_the_same_model_identity(exported, tmp_path, preset, dtype):
    ours, folder, _, _ = exported[(preset, dtype)]
    result = convert_hf(folder, tmp_path / "back.safetensors")
    assert result.model_identity == ours.identity
    assert result.to_json()["identity_matches_export"] is True
    back = load_portable_model(tmp_path / "back.safetensors")
    assert back.identity == ours.identity
    assert back.model.head_weight is back.model.token_embedding.weight  # one Parameter
    assert len(list(back.model.parameters())) == len(list(ours.model.parameters()))
    before = (tmp_path / "back.safetensors").read_bytes()
    with pytest.raises(WriteRefused, match="already exists"):
        convert_hf(folder, tmp_path / "back.safetensors")
    assert (tmp_path / "back.safetensors").read_bytes() == before


def _write_our_tokenizer(folder: Path, tokenizer: ByteBPETokenizer) -> None:
    (folder / "tokenizer.json").write_text(json.dumps(hf_tokenizer.tokenizer_json(tokenizer)))


@pytest.fixture(scope="module")
def saved_by_transformers(tmp_path_factory):
    """Random tied llama and gpt2 models saved by transformers itself, sharded."""
    root = tmp_path_factory.mktemp("saved")
    tokenizer = trained_tokenizer("mini")
    torch.manual_seed(11)
    llama = LlamaForCausalLM(LlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=16, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-5,
        bos_token_id=0, eos_token_id=1, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0})).to(torch.float64).eval()
    gpt2 = GPT2LMHeadModel(GPT2Config(
        vocab_size=tokenizer.vocab_size, n_embd=16, n_layer=2, n_head=2, n_positions=32, n_inner=24,
        activation_function="gelu", bos_token_id=0, eos_token_id=1, tie_word_embeddings=True)).to(torch.float64).eval()
    with torch.no_grad():
        for model in (llama, gpt2):
            for param in model.parameters():
                param.add_(0.1 * torch.randn_like(param))
    llama.save_pretrained(root / "llama", max_shard_size="4KB")
    gpt2.save_pretrained(root / "gpt2", max_shard_size="4KB")
    _write_our_tokenizer(root / "gpt2", tokenizer)
    # The save_model way: one file, the shared head dropped and recorded in the metadata.
    (root / "gpt2-save-model").mkdir()
    shutil.copy(root / "gpt2" / "config.json", root / "gpt2-save-model" / "config.json")
    save_model(gpt2, str(root / "gpt2-save-model" / "model.safetensors"))
    _write_our_tokenizer(root / "gpt2-save-model", tokenizer)
    tokenizer_file = root / "tokenizer-source.safetensors"
    save_portable_model(randomized_model("mini", torch.float64, 1, tokenizer), tokenizer, tokenizer_file)
    return {"root": root, "llama": llama, "gpt2": gpt2, "tokenizer": tokenizer, "tokenizer_file": tokenizer_file}


def _max_logit_difference(ours: PortableModel, theirs, text: str) -> float:
    ids = torch.tensor([ours.tokenizer.encode_prompt(text)])
    with torch.no_grad():
        expected = ours.model(ids).logits
        assert expected.std() > 0.2  # large against the tolerance
        return (expected - theirs(ids).logits).abs().max().item()


def test_sharded_llama_saved_by_transformers_converts_with_tokenizer_from(saved_by_transformers, tmp_path):
    saved = saved_by_transformers
    folder = saved["root"] / "llama"
    assert (folder / "model.safetensors.index.json").is_file()
    shards = sorted(folder.glob("model-*.safetensors"))
    assert len(shards) > 1
    result = convert_hf(folder, tmp_path / "llama.safetensors", tokenizer_path=saved["tokenizer_file"])
    assert result.shards == len(shards)
    ours = load_portable_model(tmp_path / "llama.safetensors")
    assert ours.config.family == "llama" and ours.config.kv_heads == 2 and ours.config.rope_base == 500.0
    assert ours.model.head_weight is ours.model.token_embedding.weight
    assert sum(p.numel() for p in ours.model.parameters()) == sum(p.numel() for p in saved["llama"].parameters())
    for text in PROMPTS["mini"]:
        assert _max_logit_difference(ours, saved["llama"], text) <= 1e-6


@pytest.mark.parametrize("name", ["gpt2", "gpt2-save-model"])
def test_gpt2_saved_by_transformers_converts_exactly(saved_by_transformers, tmp_path, name):
    saved = saved_by_transformers
    convert_hf(saved["root"] / name, tmp_path / "gpt2.safetensors")
    ours = load_portable_model(tmp_path / "gpt2.safetensors")
    assert ours.config.family == "gpt2" and ours.config.gelu_approximation == "none" and ours.config.ffn == 24
    assert ours.tokenizer.identity == saved["tokenizer"].identity
    for text in PROMPTS["mini"]:
        assert _max_logit_difference(ours, saved["gpt2"], text) <= 1e-12


def _variant(source: Path, target: Path, config_changes: dict | None = None) -> Path:
    shutil.copytree(source, target)
    if config_changes:
        config = json.loads((target / "config.json").read_text())
        config.update(config_changes)
        (target / "config.json").write_text(json.dumps(config))
    return target


def test_unsupported_folders_are_refused_naming_what_is_unsupported(exported, saved_by_transformers, tmp_path):
    _, folder, _, _ = exported[("tiny", torch.float64)]
    saved = saved_by_transformers
    sentencepiece = _variant(folder, tmp_path / "sp")
    (sentencepiece / "tokenizer.json").unlink()
    (sentencepiece / "tokenizer.model").write_bytes(b"\x0a\x05hello")
    unigram = _variant(folder, tmp_path / "unigram")
    doc = json.loads((unigram / "tokenizer.json").read_text())
    doc["model"] = {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0]]}
    (unigram / "tokenizer.json").write_text(json.dumps(doc))
    regex = _variant(folder, tmp_path / "regex")
    doc = json.loads((regex / "tokenizer.json").read_text())
    doc["pre_tokenizer"]["use_regex"] = True
    (regex / "tokenizer.json").write_text(json.dumps(doc))
    cases = {
        sentencepiece: "SentencePiece",
        unigram: "SentencePiece (Unigram)",
        regex: "use_regex=true",
        _variant(folder, tmp_path / "falcon", {"model_type": "falcon", "architectures": ["FalconForCausalLM"]}):
            "unsupported architecture 'FalconForCausalLM'",
        _variant(folder, tmp_path / "scaled", {"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}):
            "rope scaling 'yarn'",
        _variant(folder, tmp_path / "bos", {"bos_token_id": 5}): "bos_token_id 5",
        saved["root"] / "llama": "no tokenizer.json",
    }
    for source, message in cases.items():
        out = tmp_path / f"{source.name}.safetensors"
        with pytest.raises(CheckpointError, match=None) as caught:
            convert_hf(source, out)
        assert message in str(caught.value), (source.name, str(caught.value))
        assert "\n" not in str(caught.value)
        assert not out.exists()


def test_untied_head_saved_by_transformers_converts_by_the_cli(tmp_path, saved_by_transformers):
    tokenizer = saved_by_transformers["tokenizer"]
    torch.manual_seed(5)
    untied = LlamaForCausalLM(LlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=2, max_position_embeddings=16, bos_token_id=0, eos_token_id=1,
        tie_word_embeddings=False)).eval()
    untied.save_pretrained(tmp_path / "untied")
    _write_our_tokenizer(tmp_path / "untied", tokenizer)
    out = tmp_path / "m.safetensors"
    result = subprocess.run(cli_command("convert", "--hf", str(tmp_path / "untied"), "--out", str(out), "--json"),
                            capture_output=True, text=True, env=cli_env(tmp_path), timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["tied_alias"] is False
    ours = load_portable_model(out)
    assert not ours.config.tied_head and ours.model.head_weight is not ours.model.token_embedding.weight
    ids = torch.tensor([[0, 5, 9, 3]])
    with torch.no_grad():
        torch.testing.assert_close(ours.model(ids).logits, untied(ids).logits, atol=1e-5, rtol=1e-5)


def test_cli_export_convert_and_generate_on_the_converted_model(exported, tmp_path):
    ours, _, _, _ = exported[("mini", torch.float64)]
    env = cli_env(tmp_path)
    run = lambda *args: subprocess.run(cli_command(*args), capture_output=True, text=True, env=env, timeout=180)  # noqa: E731
    exported_cli = run("export", "--model", str(ours.path), "--format", "hf", "--out", str(tmp_path / "hf"), "--json")
    assert exported_cli.returncode == 0, exported_cli.stderr
    report = json.loads(exported_cli.stdout)
    assert report["architecture"] == "GPT2LMHeadModel" and report["dtype"] == "float64"
    converted = run("convert", "--hf", str(tmp_path / "hf"), "--out", str(tmp_path / "back.safetensors"), "--json")
    assert converted.returncode == 0, converted.stderr
    assert json.loads(converted.stdout)["model_identity"] == ours.identity
    generated = run("generate", "--model", str(tmp_path / "back.safetensors"), "--prompt", "the cat",
                    "--max-new-tokens", "5", "--json")
    assert generated.returncode == 0, generated.stderr
    stepper = DecisionStepper(ours.model, ours.tokenizer, "the cat", GenerationRule.greedy(max_new_tokens=5))
    stepper.run()
    assert json.loads(generated.stdout)["output"]["generated_ids"] == stepper.generated_ids


# -- inspect ----------------------------------------------------------------------------------
def test_inspect_a_sharded_transformers_folder(saved_by_transformers):
    saved = saved_by_transformers
    folder = saved["root"] / "llama"
    for target in (folder, folder / "model.safetensors.index.json"):
        inspection = inspect_path(target)
        assert inspection.kind == "hf-model"
        assert len({e.file for e in inspection.entries}) == len(list(folder.glob("model-*.safetensors"))) > 1
        names = {e.name for e in inspection.entries}
        assert names == {n for n, _ in saved["llama"].named_parameters()}  # the tied head is not stored
        totals = inspection.state.get(StateGroup.PARAMETERS)
        assert totals["F64"]["scalars"] == sum(p.numel() for p in saved["llama"].parameters())
        assert totals["F64"]["tensors"] == len(names)
        assert inspection.state.get(StateGroup.CONFIG)["num_key_value_heads"] == 2
        assert inspection.state.get(StateGroup.MODEL)["architecture"] == "LlamaForCausalLM"
        assert inspection.integrity.ok is True
        assert [(a["name"], a["target"]) for a in inspection.aliases] == [("lm_head.weight", "model.embed_tokens.weight")]
    json.dumps(inspection.to_json())


def test_inspect_shows_save_model_dropped_aliases(saved_by_transformers):
    folder = saved_by_transformers["root"] / "gpt2-save-model"
    inspection = inspect_path(folder)
    assert inspection.kind == "hf-model"
    aliases = [a for a in inspection.aliases if "save_model" in a["source"]]
    assert len(aliases) == 1
    alias = aliases[0]
    assert {alias["name"], alias["target"]} == {"lm_head.weight", "transformer.wte.weight"}
    assert alias["target"] in {e.name for e in inspection.entries}
    assert alias["name"] not in {e.name for e in inspection.entries}
    assert inspection.state.get(StateGroup.MODEL)["convertible"] is True
    assert inspection.state.get(StateGroup.TOKENIZER)["model"] == "BPE"


def test_inspect_reports_an_index_that_disagrees_with_its_shards(saved_by_transformers, tmp_path):
    folder = _variant(saved_by_transformers["root"] / "llama", tmp_path / "broken")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    moved = next(iter(index["weight_map"]))
    index["weight_map"]["model.ghost.weight"] = index["weight_map"][moved]
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    inspection = inspect_path(folder)
    assert inspection.integrity.ok is False
    assert any("model.ghost.weight" in p for p in inspection.integrity.problems)
    with pytest.raises(CheckpointError, match="model.ghost.weight"):
        convert_hf(folder, tmp_path / "out.safetensors")
    assert not (tmp_path / "out.safetensors").exists()


def test_an_index_whose_metadata_is_not_an_object_is_read_for_its_weight_map(saved_by_transformers, tmp_path):
    folder = _variant(saved_by_transformers["root"] / "llama", tmp_path / "odd-metadata")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["metadata"] = ["not", "an", "object"]
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    inspection = inspect_path(folder)
    assert inspection.integrity.ok is True
    assert inspection.state.get(StateGroup.INDEX)["metadata"] == ["not", "an", "object"]


def test_export_run_best_of_a_trained_run(tmp_path):
    env = cli_env(tmp_path)
    trained = subprocess.run(cli_command("train", "--preset", "mini", "--steps", "50", "--run", "r", "--json"),
                             capture_output=True, text=True, env=env, timeout=300)
    assert trained.returncode == 0, trained.stderr
    result = subprocess.run(cli_command("export", "--model", "r:best", "--out", str(tmp_path / "hf"), "--json"),
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert Path(report["source"]).parent.name == "step-000050"
    ours = load_portable_model(report["source"])
    assert report["model_identity"] == ours.identity
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    for text in PROMPTS["mini"]:
        ids = torch.tensor([ours.tokenizer.encode_prompt(text)])
        with torch.no_grad():
            assert (model(ids).logits - ours.model(ids).logits).abs().max().item() <= 1e-12


def test_a_shared_tensor_in_a_pickle_compares_equal_to_the_alias_record_of_safetensors(saved_by_transformers, tmp_path):
    """The .bin lists the tied head as a shared tensor, the safetensors folder as an alias of
    the token table: both are the same tensor, so nothing is reported as only in one side."""
    from minigpt_tui.engine.formats.compare import compare_checkpoints

    folder = tmp_path / "gpt2-bin"
    folder.mkdir()
    shutil.copy(saved_by_transformers["root"] / "gpt2" / "config.json", folder / "config.json")
    torch.save(saved_by_transformers["gpt2"].state_dict(), folder / "pytorch_model.bin")
    comparison = compare_checkpoints(folder, saved_by_transformers["root"] / "gpt2")
    statuses = {t["name"]: t["status"] for t in comparison["tensors"]}
    assert statuses["lm_head.weight"] == "same"
    assert comparison["changed"] == [], comparison["changed"]
