"""``contrast``: two models on one path, in the engine and as a command."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cli_support import run_cli_wide
from lens_support import BYTES_ONLY, FAMILY_SHAPES, varied_model
from minigpt_tui.engine.analysis.contrast import contrast_models
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.analysis.generation import DecisionStepper, GenerationRule
from minigpt_tui.engine.models.model import MiniGPT
from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer

PROMPT = "Compare"


def as_portable(model, tokenizer=BYTES_ONLY, name="m"):
    return SimpleNamespace(model=model, tokenizer=tokenizer, identity=name, path=None)


def test_a_model_contrasted_with_itself_agrees_everywhere_with_kl_exactly_zero():
    model = varied_model("llama")
    result = contrast_models(as_portable(model), as_portable(model), PROMPT, rule=GenerationRule.greedy(6))
    assert len(result.positions) == 6
    assert all(p.kl == 0.0 for p in result.positions)
    assert all(p.top1_agree and p.rank_a == p.rank_b and p.probability_a == p.probability_b
               for p in result.positions)
    assert result.agreement == 1.0 and result.mean_kl == 0.0


def test_path_follows_as_choices_and_reports_each_position():
    a, b = varied_model("gpt2", seed=3), varied_model("gpt2", seed=8)
    rule = GenerationRule.greedy(5)
    result = contrast_models(as_portable(a, name="a"), as_portable(b, name="b"), PROMPT, rule=rule)
    stepper = DecisionStepper(a, BYTES_ONLY, PROMPT, rule)
    stepper.run()
    assert list(result.path_ids) == stepper.generated_ids and result.path_source == "a"
    assert [p.id for p in result.positions] == stepper.generated_ids
    assert all(p.rank_a == 1 for p in result.positions)  # greedy: A's own top choice
    assert all(p.kl > 0 for p in result.positions)
    # B's side is B's own forward: the same numbers its own decisions would show
    ids = list(stepper.prompt_ids)
    for position in result.positions:
        logits = b(torch.tensor([ids])).logits[0, -1].detach()
        assert position.probability_b == pytest.approx(float(torch.softmax(logits, -1)[position.id]), rel=1e-12)
        assert position.top1_b == int(logits.argmax())
        ids.append(position.id)
    largest = max(result.positions, key=lambda p: p.kl)
    assert result.most_changed == largest.step
    assert result.to_json()["positions"][0]["kl"] == result.positions[0].kl


def test_a_given_continuation_is_the_path():
    a, b = varied_model("llama", seed=3), varied_model("llama", seed=4)
    result = contrast_models(as_portable(a), as_portable(b), PROMPT, continuation=" it")
    assert result.path_source == "continuation" and result.rule is None
    assert [p.piece for p in result.positions] == [" ", "i", "t"]


def test_models_with_different_tokenizers_are_refused():
    merged = ByteBPETokenizer.train(["abababab cdcdcd"], 3)
    other = MiniGPT(FAMILY_SHAPES["llama"], merged.vocab_size, torch.float64)
    other.initialize(1)
    with pytest.raises(GenerationError, match="different tokenizers .* their ids cannot be compared"):
        contrast_models(as_portable(varied_model("llama")), as_portable(other, merged), PROMPT)


def test_a_path_longer_than_a_context_is_refused():
    model = varied_model("llama")
    with pytest.raises(GenerationError, match="does not fit model A's context of 32"):
        contrast_models(as_portable(model), as_portable(model), PROMPT, continuation="x" * 40)


# -- the command ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict[str, Path]:
    from minigpt_tui.engine.formats.portable import save_portable_model

    folder = tmp_path_factory.mktemp("contrast")
    files = {"a": folder / "a.safetensors", "b": folder / "b.safetensors", "other": folder / "other.safetensors"}
    save_portable_model(varied_model("gpt2", seed=3), BYTES_ONLY, files["a"])
    save_portable_model(varied_model("gpt2", seed=5), BYTES_ONLY, files["b"])
    merged = ByteBPETokenizer.train(["abababab cdcdcd"], 3)
    other = MiniGPT(FAMILY_SHAPES["gpt2"], merged.vocab_size, torch.float64)
    other.initialize(1)
    save_portable_model(other, merged, files["other"])
    return files


def test_contrast_json_and_out_file(model_files, tmp_path):
    out = tmp_path / "contrast.json"
    done = run_cli_wide(tmp_path, "contrast", "--model", str(model_files["a"]), "--model", str(model_files["b"]),
                   "--prompt", PROMPT, "--max-new-tokens", "4", "--json", "--out", str(out))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert json.loads(out.read_text()) == data
    assert data["format"] == "minigpt-tui-contrast" and data["path_source"] == "a"
    assert len(data["positions"]) == 4 and data["rule"]["label"] == "greedy"
    assert set(data["positions"][0]) >= {"kl", "top1_agree", "rank_a", "rank_b", "probability_a", "probability_b"}
    assert data["most_changed"] in range(1, 5)
    same = run_cli_wide(tmp_path, "contrast", "--model", str(model_files["a"]), "--model", str(model_files["a"]),
                   "--prompt", PROMPT, "--continuation", " abc")
    assert same.returncode == 0, same.stderr
    assert "top-1 agreement 100.0% · mean KL 0 nats" in same.stdout


@pytest.mark.parametrize(("models", "extra", "message"), [
    (("a",), [], "contrast takes exactly two --model options (A and B), got 1"),
    (("a", "other"), [], "different tokenizers"),
    (("a", "b"), ["--continuation", "x", "--temperature", "0.5"], "--continuation fixes the path"),
    (("a", "b"), ["--continuation", ""], "the continuation is empty"),
])
def test_contrast_refusals_are_one_line(model_files, tmp_path, models, extra, message):
    options = [item for key in models for item in ("--model", str(model_files[key]))]
    done = run_cli_wide(tmp_path, "contrast", *options, "--prompt", PROMPT, *extra)
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_a_second_opinion_on_each_decision_of_a_stepper():
    from minigpt_tui.engine.analysis.contrast import check_same_tokenizer, second_opinion

    a, b = varied_model("gpt2", seed=3), varied_model("gpt2", seed=5)
    stepper = DecisionStepper(a, BYTES_ONLY, PROMPT, GenerationRule.greedy(4))
    stepper.run()
    path = contrast_models(as_portable(a), as_portable(b), PROMPT, rule=GenerationRule.greedy(4))
    for decision, position in zip(stepper.decisions, path.positions):
        same = second_opinion(as_portable(a), decision)
        assert same.kl == 0.0 and same.top1_agree and same.rank_b == decision.chosen.rank
        other = second_opinion(as_portable(b), decision)
        assert other.kl == pytest.approx(position.kl, rel=1e-9, abs=1e-12)
        assert (other.rank_b, other.top1_b) == (position.rank_b, position.top1_b)
    merged = ByteBPETokenizer.train(["abababab cdcdcd"], 3)
    with pytest.raises(GenerationError, match="different tokenizers"):
        check_same_tokenizer(as_portable(a), as_portable(b, merged))


def test_the_contrast_table_at_80_columns_cuts_no_number(model_files, capsys, monkeypatch):
    from minigpt_tui.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    args = ["contrast", "--model", str(model_files["a"]), "--model", str(model_files["b"]), "--prompt", PROMPT,
            "--max-new-tokens", "6"]
    assert main([*args, "--json"]) == 0
    positions = json.loads(capsys.readouterr().out)["positions"]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert not [line for line in lines if "…" in line]
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines
            if line.startswith("│") and line.split("│")[1].strip()]
    assert [row[3] for row in rows] == [f"{p['kl']:.4g}" for p in positions]
    assert [row[7:] for row in rows] == [[f"{p['probability_a']:.3g}", f"{p['probability_b']:.3g}"] for p in positions]
