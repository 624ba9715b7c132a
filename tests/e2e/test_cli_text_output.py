"""The human-readable output of the subcommands reads as words and numbers: no Python repr
(a dict, True/False/None) reaches the terminal, help texts speak about the product, and a
wrong file names what it is."""

from __future__ import annotations

import json

import re
from pathlib import Path

import pytest

from minigpt_tui.cli import build_parser, main
from tests.conftest import run_cli

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny-format1" / "step-000002"
PYTHON_REPR = re.compile(r"(?<![=\w])(None|True|False)\b|\{'|\(\)")


def test_inspect_verify_says_what_was_verified_in_words(capsys):
    code, out, _ = run_cli(capsys, "inspect", str(FIXTURE), "--verify")
    assert code == 0
    verified = [line for line in out.splitlines() if line.startswith("verified:")]
    assert len(verified) == 1
    assert verified[0].startswith("verified: ok; model identity ")
    assert verified[0].endswith("; step 2")
    assert not PYTHON_REPR.search(verified[0])


def test_inspect_verify_of_a_model_file_names_the_tied_head(capsys):
    code, out, _ = run_cli(capsys, "inspect", str(FIXTURE / "model.safetensors"), "--verify")
    assert code == 0
    verified = next(line for line in out.splitlines() if line.startswith("verified:"))
    assert verified.endswith("; tied head yes")


def test_infer_prints_no_python_booleans(capsys):
    code, out, _ = run_cli(capsys, "infer", "--model", str(FIXTURE), "--prompt", "ab", "--tokens", "2")
    assert code == 0
    assert "tied_alias: yes" in out.splitlines()
    assert not [line for line in out.splitlines() if PYTHON_REPR.search(line)]


def test_no_subcommand_help_speaks_of_development_references():
    parser = build_parser()
    texts = [parser.format_help()]
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    texts += [sub.format_help() for sub in subparsers.choices.values()]
    texts += [choice.help or "" for choice in subparsers._choices_actions]
    assert not [t for t in texts if re.search(r"\bseed \d{3}\b", t)]


def test_a_training_state_given_as_a_model_says_where_the_model_is(capsys):
    code, _, err = run_cli(capsys, "generate", "--model", str(FIXTURE / "training.safetensors"), "--prompt", "a")
    assert code == 1
    assert err.strip().endswith(
        "not a minigpt-tui model file (it is a checkpoint's training state: give the model.safetensors "
        "beside it, or the checkpoint folder)")
    assert "{" not in err


@pytest.mark.parametrize("name", ["other-tool/model", "x"])
def test_a_foreign_format_record_is_named_not_printed_as_a_dict(tmp_path, name):
    from minigpt_tui.engine.formats.portable import read_model_records
    from minigpt_tui.engine.core.errors import CheckpointError

    with pytest.raises(CheckpointError) as err:
        read_model_records(tmp_path / "m.safetensors", {"format": f'{{"name": "{name}", "version": 1}}'})
    assert str(err.value) == f"{tmp_path / 'm.safetensors'}: not a minigpt-tui model file (its format is '{name}')"


def test_train_summary_at_80_columns_shows_the_whole_digest_and_no_evaluation_for_tiny(capsys, monkeypatch, tmp_path):
    import json

    monkeypatch.setenv("COLUMNS", "80")
    runs = str(tmp_path / "runs")
    code, out, _ = run_cli(capsys, "train", "--preset", "tiny", "--run", "a", "--runs-dir", runs, "--json")
    assert code == 0
    result = json.loads(out)
    assert result["evaluation_rule"] == "none scheduled (train.eval_every = 0)"
    code, out, _ = run_cli(capsys, "train", "--preset", "tiny", "--run", "b", "--runs-dir", runs)
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80
    folded = "".join(line.split("│")[2].strip() for line in out.splitlines()
                     if line.count("│") == 3 and line.split("│")[1].strip() in ("state digest", ""))
    assert result["state_digest"] in folded
    assert "…" not in out
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in out.splitlines() if line.count("│") == 3}
    assert rows["evaluation"] == "none scheduled (train.eval_every = 0)"
    assert rows["best step"] == "none (no evaluation yet)"
    # Which text was read, and the sizes written as the app writes them.
    assert result["corpus_source"] == "bundled:tiny.txt"
    assert rows["corpus"] == "bundled:tiny.txt: 3 train + 0 validation examples"
    assert rows["parameters"] == "1,572 in 29 tensors"


def test_a_preset_warmup_scales_with_fewer_steps_and_a_chosen_one_longer_than_them_is_refused(capsys, tmp_path):
    code, out, err = run_cli(capsys, "train", "--preset", "text", "--steps", "20", "--until", "1", "--json",
                             "--runs-dir", str(tmp_path / "scaled"))
    assert code == 0, err
    (config,) = (tmp_path / "scaled").glob("*/config.json")
    assert json.loads(config.read_text())["train"]["warmup"] == 1  # 100 of 2000 updates: the same share of 20
    code, out, err = run_cli(capsys, "train", "--preset", "text", "--steps", "20", "--set", "train.warmup=100",
                             "--runs-dir", str(tmp_path / "runs"))
    assert code == 1 and out == ""
    assert err.strip() == (
        "minigpt-tui: error: train.warmup (100 updates) is longer than train.steps (20): train at least 100 "
        "updates, or set a shorter warmup ([train] warmup = N in a --config file)")
    assert not (tmp_path / "runs").exists()
    code, _, err = run_cli(capsys, "train", "--preset", "tiny", "--steps", "-3")
    assert code == 1 and err.strip() == "minigpt-tui: error: train.steps must be at least 1, got -3"


def test_verify_writes_learning_rates_as_numbers_not_float_reprs(capsys):
    from minigpt_tui.commands.checkpoints import print_verify

    print_verify({
        "saved_after": 2, "resumed_until": 4, "processes": 1, "preset": "tiny",
        "comparisons": [{"name": "final state digest", "equal": True}],
        "warm_start": {"first_update": {"lr": 0.001, "batch": [[2], [0]]},
                       "resumed_first_update": {"lr": 0.0003250000000000001, "batch": [[0], [1]]},
                       "note": "a weights-only warm start is a new training history"},
    })
    out = capsys.readouterr().out
    assert "warm start: first update lr 0.001 batch [[2], [0]]; resumed: lr 0.000325 batch [[0], [1]]" in out
    assert "  true   final state digest" in out.splitlines()


def test_a_transformers_folder_generates_as_it_is_and_resume_says_what_it_is(capsys, tmp_path):
    runs = str(tmp_path / "runs")
    assert run_cli(capsys, "train", "--preset", "tiny", "--run", "t", "--runs-dir", runs, "--json")[0] == 0
    exported = tmp_path / "exported"
    assert run_cli(capsys, "export", "--model", "t:latest", "--out", str(exported), "--runs-dir", runs)[0] == 0
    # Our own export opens with our tokenizer and continues exactly as the checkpoint does.
    outputs = []
    for model in (str(exported), "t:latest"):
        code, out, _ = run_cli(capsys, "infer", "--model", model, "--prompt", "a", "--json", "--runs-dir", runs)
        assert code == 0
        record = json.loads(out)
        outputs.append((record["prompt_ids"], record["generated_ids"]))
    assert outputs[0] == outputs[1]
    # A folder that is no supported model says so in one line.
    folder = tmp_path / "hf-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    code, _, err = run_cli(capsys, "generate", "--model", str(folder), "--prompt", "a")
    assert code == 1 and len(err.strip().splitlines()) == 1 and "unsupported architecture" in err
    code, _, err = run_cli(capsys, "resume", "--checkpoint", str(folder))
    assert code == 1 and "is a transformers model folder" in err
    # A folder that is neither keeps the plain refusal.
    (folder / "model.safetensors").unlink()
    code, _, err = run_cli(capsys, "generate", "--model", str(folder), "--prompt", "a")
    assert err.strip() == f"minigpt-tui: error: {folder} holds no complete checkpoint"


def test_generate_at_80_columns_cuts_no_header_and_no_runner_up(capsys, monkeypatch):
    import json

    monkeypatch.setenv("COLUMNS", "80")
    args = ["generate", "--model", str(FIXTURE), "--prompt", "ab", "--max-new-tokens", "3"]
    assert main([*args, "--json"]) == 0
    trace = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out and "runner-ups" in out
    cells = [line.split("│")[8].strip() for line in out.splitlines() if line.count("│") == 9]
    for decision in trace["decisions"]:
        for runner_up in decision["alternatives"]:
            if runner_up["id"] != decision["chosen"]["id"]:
                assert any(cell.endswith(f"{runner_up['raw_probability']:.4f}") for cell in cells), runner_up


def test_a_step_the_run_has_no_checkpoint_at_lists_the_steps_it_has(capsys, tmp_path):
    runs = tmp_path / "runs"
    assert main(["train", "--preset", "tiny", "--until", "2", "--run", "r", "--runs-dir", str(runs), "--json"]) == 0
    capsys.readouterr()
    code, _, err = run_cli(capsys, "inspect", "r:3", "--runs-dir", str(runs))
    assert code == 1
    assert err.strip() == "minigpt-tui: error: run 'r' has no complete checkpoint at step 3 (its checkpoints: 2)"


def test_many_checkpoints_are_listed_by_their_ends():
    from minigpt_tui.engine.session.runs import _steps_held

    assert _steps_held([]) == "it has none"
    assert _steps_held(list(range(100, 1100, 100))) == "its checkpoints: 100, 200, 300, …, 1000 (10 in all)"


def test_the_usual_hyperparameters_are_flags_and_any_setting_is_a_set(capsys, tmp_path):
    code, _, err = run_cli(capsys, "train", "--preset", "mini", "--batch-size", "4", "--lr", "0.003", "--width", "32",
                           "--layers", "2", "--heads", "4", "--context", "32", "--dropout", "0.1", "--eval-every", "5",
                           "--steps", "10", "--set", "train.weight_decay=0.05", "--set", "seeds.init=7",
                           "--set", "model.family=gpt2", "--json", "--runs-dir", str(tmp_path / "runs"))
    assert code == 0, err
    (config_file,) = (tmp_path / "runs").glob("*/config.json")
    config = json.loads(config_file.read_text())
    assert {k: config["model"][k] for k in ("width", "layers", "heads", "kv_heads", "context", "dropout")} == {
        "width": 32, "layers": 2, "heads": 4, "kv_heads": 4, "context": 32, "dropout": 0.1}
    assert (config["train"]["batch_size"], config["train"]["lr"], config["train"]["eval_every"]) == (4, 0.003, 5)
    assert config["train"]["weight_decay"] == 0.05 and config["seeds"]["init"] == 7
    for args, message in ((("--set", "train.stepz=3"), "unknown setting train.stepz (did you mean train.steps?)"),
                          (("--set", "model.width=abc"), "model.width must be an integer, got 'abc'"),
                          (("--set", "width"), "--set takes SECTION.FIELD=VALUE, got 'width'"),
                          (("--heads", "3"), "model.width must be a multiple of model.heads (or model.head_dim_override set)")):
        code, _, err = run_cli(capsys, "train", "--preset", "mini", *args, "--runs-dir", str(tmp_path / "refused"))
        assert code == 1 and err.strip() == f"minigpt-tui: error: {message}"
    assert not (tmp_path / "refused").exists()


def test_piped_output_never_wraps_a_path(tmp_path):
    import subprocess

    from tests.conftest import cli_command, cli_env

    name = "a-run-whose-name-is-long-" + "x" * 70
    env = {k: v for k, v in cli_env(tmp_path).items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run(cli_command("train", "--preset", "tiny", "--run", name), capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    checkpoint = str(tmp_path / "runs" / name / "checkpoints" / "step-000004")
    assert any(checkpoint in line for line in done.stdout.splitlines()), done.stdout
