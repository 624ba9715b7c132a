"""Fine-tuning a model from elsewhere: a transformers folder of each family or a GGUF file,
made in the test with random weights, trained on text with the model's own tokenizer;
stopped, saved and resumed, it equals the run that never stopped, bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cli_support import run_cli_json_in_process
from conftest import run_cli
from family_support import FAMILIES, make_family_folder, training_text

from minigpt_tui.engine.models.model_file import load_portable_model
from minigpt_tui.engine.core.library_tokenizer import LibraryTokenizer
from minigpt_tui.engine.session.opening import open_model


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("\n\n".join(training_text() * 3), encoding="utf-8")
    return path


def _train_finetune(capsys, *args: str) -> dict:
    return run_cli_json_in_process(capsys, "train", "--preset", "finetune", "--precision", "exact", *args)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_fine_tune_stopped_and_resumed_equals_one_never_stopped(tmp_path, capsys, corpus, family):
    folder = make_family_folder(family, tmp_path / family)
    common = ("--init-from", str(folder), "--corpus", str(corpus), "--steps", "4")
    straight = _train_finetune(capsys, *common, "--run", "straight")
    first = _train_finetune(capsys, *common, "--until", "2", "--save-every", "2", "--run", "stopped")
    checkpoint = first["checkpoints"][-1]
    code, out, err = run_cli(capsys, "resume", "--checkpoint", checkpoint, "--json")
    assert code == 0, err
    resumed = json.loads(out)
    assert resumed["state_digest"] == straight["state_digest"]
    assert [r["loss"] for r in resumed["updates"]] == [r["loss"] for r in straight["updates"][2:]]

    # The run kept the model's architecture and tokenizer, and its weights moved.
    original = open_model(str(folder), tmp_path, dtype="float64")
    tuned = load_portable_model(Path(straight["checkpoints"][-1]))
    assert tuned.config.declared() == {**original.config.declared(), "dropout": 0.0}
    assert isinstance(tuned.tokenizer, LibraryTokenizer)
    assert tuned.tokenizer.identity == original.tokenizer.identity == straight["tokenizer_identity"]
    assert tuned.tied_alias == original.config.tied_head
    ids = torch.tensor([original.tokenizer.encode_prompt("The json module")])
    with torch.no_grad():
        before, after = original.model(ids).logits, tuned.model(ids).logits
    assert before.shape == after.shape and not torch.equal(before, after)
    window = straight["data"]["window"]
    assert window == 65  # the preset's 256 tokens, shortened to the model's context of 64

    # Back out: the family's own transformers class loads the export and computes as we do.
    from family_support import reference, reference_greedy

    code, out, err = run_cli(capsys, "export", "--model", straight["checkpoints"][-1], "--out",
                             str(tmp_path / "exported"), "--json")
    assert code == 0, err
    exported = json.loads(out)
    hf_model, hf_tokenizer = reference(tmp_path / "exported", dtype=torch.float64)
    assert exported["architecture"] == type(hf_model).__name__ == json.loads((folder / "config.json").read_text())["architectures"][0]
    text = "The json module: héllo 🙂"
    assert hf_tokenizer(text)["input_ids"] == tuned.tokenizer.encode_prompt(text)
    prompt = tuned.tokenizer.encode_prompt(text)
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits
        mine = tuned.model(torch.tensor([prompt])).logits
    # transformers computes rotary tables and GPT-Neo's attention scores in float32 whatever
    # the model's dtype (measured: up to 5e-6 apart); GPT-2 agrees to float64 rounding.
    assert torch.allclose(theirs, mine, rtol=0, atol=1e-12 if family == "gpt2" else 2e-5)
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(6):
            ids.append(int(tuned.model(torch.tensor([ids])).logits[0, -1].argmax()))
    assert reference_greedy(hf_model, prompt, 6) == ids[len(prompt):]


def test_a_gguf_file_fine_tunes_and_resumes_exactly(tmp_path, capsys, corpus):
    from gguf_support import family_gguf_file

    path = family_gguf_file(tmp_path, "llama", "Q8_0")
    common = ("--init-from", str(path), "--corpus", str(corpus), "--steps", "3")
    straight = _train_finetune(capsys, *common, "--run", "straight")
    first = _train_finetune(capsys, *common, "--until", "1", "--save-every", "1", "--run", "stopped")
    code, out, err = run_cli(capsys, "resume", "--checkpoint", first["checkpoints"][-1], "--json")
    assert code == 0, err
    assert json.loads(out)["state_digest"] == straight["state_digest"]
    code, out, err = run_cli(capsys, "generate", "--model", straight["checkpoints"][-1], "--prompt", "The json",
                             "--max-new-tokens", "3", "--json")
    assert code == 0, err
    assert len(json.loads(out)["decisions"]) == 3
    # The GGUF file itself exports to its transformers class, which computes as we do.
    from family_support import reference, reference_greedy

    code, out, err = run_cli(capsys, "export", "--model", str(path), "--out", str(tmp_path / "from-gguf"))
    assert code == 0, err
    hf_model, _ = reference(tmp_path / "from-gguf")
    ours = open_model(str(path), tmp_path)
    prompt = ours.tokenizer.encode_prompt("The json module")
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(5):
            ids.append(int(ours.model(torch.tensor([ids])).logits[0, -1].argmax()))
    assert type(hf_model).__name__ == "LlamaForCausalLM"
    assert reference_greedy(hf_model, prompt, 5) == ids[len(prompt):]


def test_refusals_name_the_problem_and_write_nothing(tmp_path, capsys, corpus):
    folder = make_family_folder("gpt2", tmp_path / "gpt2")
    capsys.readouterr()  # what transformers printed while saving it
    config = tmp_path / "wider.toml"
    config.write_text("[model]\nwidth = 48\n", encoding="utf-8")
    longer = tmp_path / "longer.toml"
    longer.write_text("[train]\ncontext = 128\n", encoding="utf-8")
    merges = tmp_path / "merges.toml"
    merges.write_text("[tokenizer]\nmerges = 12\n", encoding="utf-8")
    not_a_model = tmp_path / "notes.bin"
    not_a_model.write_bytes(b"\0" * 64)
    cases = [
        (("--config", str(config), "--init-from", str(folder)), "model.width = 48 would change the model"),
        (("--config", str(longer), "--init-from", str(folder)), "train.context = 128 is longer than the model's context of 64"),
        (("--config", str(merges), "--init-from", str(folder)), "tokenizer.merges = 12 would change the model's tokenizer"),
        ((), "the finetune preset trains a model you already have"),
        (("--init-from", str(not_a_model)), "notes.bin"),
    ]
    for extra, message in cases:
        code, out, err = run_cli(capsys, "train", "--preset", "finetune", "--corpus", str(corpus), *extra)
        assert code != 0, extra
        lines = err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (extra, err)
        assert "Traceback" not in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize("family, quant", [("llama", "f32"), ("qwen2", "q8_0"), ("gpt2", "f16")])
def test_a_fine_tune_exports_to_gguf_that_transformers_reads(tmp_path, capsys, corpus, family, quant):
    # transformers reads a GGUF GPT-2 as 1024 positions whatever the file says.
    folder = make_family_folder(family, tmp_path / family, **({"n_positions": 1024} if family == "gpt2" else {}))
    straight = _train_finetune(capsys, "--init-from", str(folder), "--corpus", str(corpus), "--steps", "2")
    checkpoint = straight["checkpoints"][-1]
    out = tmp_path / "tuned.gguf"
    code, printed, err = run_cli(capsys, "export", "--model", checkpoint, "--format", "gguf", "--quant", quant,
                                 "--out", str(out), "--json")
    assert code == 0, err
    assert json.loads(printed)["architecture"] == family
    tuned = load_portable_model(Path(checkpoint))
    back = open_model(str(out), tmp_path, dtype="float64")  # our reader
    text = "The json module: héllo 🙂"
    assert back.tokenizer.encode_prompt(text) == tuned.tokenizer.encode_prompt(text)
    assert back.config.declared() == {**tuned.config.declared(), "dropout": 0.0}
    prompt = tuned.tokenizer.encode_prompt(text)
    with torch.no_grad():
        mine, theirs = tuned.model(torch.tensor([prompt])).logits, back.model(torch.tensor([prompt])).logits
    tolerance = {"f32": 1e-5, "f16": 5e-2, "q8_0": 2e-1}[quant]  # the file's own rounding
    assert float((mine - theirs).abs().max()) < tolerance * float(mine.abs().max())

    # transformers' GGUF loader reads the file and continues as our reading of it does.
    import transformers as tr
    from family_support import reference_greedy

    hf_model = tr.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=out.name).eval()
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(5):
            ids.append(int(back.model(torch.tensor([ids])).logits[0, -1].argmax()))
    assert reference_greedy(hf_model, prompt, 5) == ids[len(prompt):]


def test_gguf_export_refusals_are_one_line_and_write_nothing(tmp_path, capsys):
    code, out, err = run_cli(capsys, "train", "--preset", "tiny", "--run", "ours", "--json")
    assert code == 0, err
    model = json.loads(out)["checkpoints"][-1]
    folder = make_family_folder("gpt_neox", tmp_path / "neox")
    capsys.readouterr()
    cases = [
        (model, "f16", "has no llama.cpp form"),
        (str(folder), "f16", "the gpt_neox family has no GGUF architecture here"),
        (str(folder), "q4_k", "--quant 'q4_k' is not supported"),
    ]
    for source, quant, message in cases:
        out_path = tmp_path / "out.gguf"
        code, _, err = run_cli(capsys, "export", "--model", source, "--format", "gguf", "--quant", quant,
                               "--out", str(out_path))
        lines = err.strip().splitlines()
        assert code != 0 and len(lines) == 1 and message in lines[0], (source, err)
        assert not out_path.exists() and not list(tmp_path.glob(".out.gguf*"))


def test_a_fine_tune_that_would_not_fit_is_refused_before_the_model_is_read(tmp_path, capsys, corpus, monkeypatch):
    import minigpt_tui.engine.models.hf_models as hf_models
    import minigpt_tui.engine.core.memory as memory

    folder = make_family_folder("llama", tmp_path / "llama")
    capsys.readouterr()
    monkeypatch.setattr(memory, "available_memory", lambda: memory.Available(64 * 2**20, "machine"))
    opened = []
    monkeypatch.setattr(hf_models, "_weights", lambda *a: opened.append(a) or (_ for _ in ()).throw(AssertionError))
    code, out, err = run_cli(capsys, "train", "--preset", "finetune", "--init-from", str(folder), "--corpus", str(corpus))
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1, err
    assert f"fine-tuning {folder} needs about" in lines[0] and "67 MB available (machine)" in lines[0], lines[0]
    assert not opened  # refused from config.json alone, before any weight was read
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.slow
def test_verify_has_a_finetune_experiment_that_holds(tmp_path, capsys):
    code, out, err = run_cli(capsys, "verify", "--preset", "finetune", "--json", "--keep", str(tmp_path / "kept"))
    assert code == 0, err
    result = json.loads(out)
    assert result["all_equal"] and len(result["comparisons"]) == 10
    tuned = load_portable_model(tmp_path / "kept" / "saved" / "checkpoints" / "step-000003")
    assert tuned.config.family == "gpt_neox" and not tuned.config.tied_head
    assert isinstance(tuned.tokenizer, LibraryTokenizer)
