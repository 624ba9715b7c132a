"""``generate``, ``probes`` and ``infer`` in subprocesses: outputs, files and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_support import run_cli_wide
from minigpt_tui.engine.core.config import load_config

PROMPT = "The key is red. Answer: "


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    """The mini preset trained 300 updates, saved as a portable model."""
    from minigpt_tui.engine.formats.portable import save_portable_model
    from minigpt_tui.engine.training.corpus import load_corpus
    from minigpt_tui.engine.training.trainer import TrainingSetup, Trainer, apply_precision

    config = load_config("mini").replace(train={"steps": 300, "eval_every": 0})
    apply_precision(config.train)
    trainer = Trainer(TrainingSetup.build(config, load_corpus(config.corpus)))
    while not trainer.finished:
        trainer.update()
    path = tmp_path_factory.mktemp("model") / "model.safetensors"
    save_portable_model(trainer.model, trainer.tokenizer, path)
    return path


def test_generate_prints_one_row_per_decision_and_the_stop(model_file, tmp_path):
    done = run_cli_wide(tmp_path, "generate", "--model", str(model_file), "--prompt", PROMPT)
    assert done.returncode == 0, done.stderr
    assert "stop: eos" in done.stdout
    assert 'output: "red."' in done.stdout
    for header in ("step", "id", "piece", "logit", "raw p", "selection p"):
        assert header in done.stdout
    assert '"<eos>"' in done.stdout


def test_generate_json_is_the_trace_and_trace_out_writes_it(model_file, tmp_path):
    out = tmp_path / "trace.json"
    done = run_cli_wide(tmp_path, "generate", "--model", str(model_file), "--prompt", PROMPT, "--temperature", "0.7",
                   "--top-k", "5", "--top-p", "0.9", "--seed", "7", "--top", "4", "--kv-cache",
                   "--json", "--trace-out", str(out))
    assert done.returncode == 0, done.stderr
    trace = json.loads(done.stdout)
    assert json.loads(out.read_text()) == trace
    assert trace["model"]["path"] == str(model_file) and len(trace["model"]["identity"]) == 64
    assert trace["rule"] == {"kind": "sample", "temperature": 0.7, "top_k": 5, "top_p": 0.9, "seed": 7,
                             "max_new_tokens": 24, "forbidden_ids": [], "label": "sample t=0.7 k=5 p=0.9 seed=7"}
    assert trace["use_kv_cache"] is True
    assert all(len(d["alternatives"]) == 4 for d in trace["decisions"])
    assert all(1 <= d["retained_count"] <= 5 and 0 < d["retained_mass"] <= 1 for d in trace["decisions"])
    assert all("logits" not in d and "retained_ids" not in d for d in trace["decisions"])  # only with --full-logits
    assert trace["stop_reason"] in ("eos", "budget", "context")
    assert trace["output"]["generated_ids"] == [d["chosen"]["id"] for d in trace["decisions"]]


def test_generate_full_logits_keeps_the_vectors_beside_the_same_record(model_file, tmp_path):
    args = ("generate", "--model", str(model_file), "--prompt", PROMPT, "--temperature", "0.7", "--top-p", "0.9",
            "--max-new-tokens", "2", "--json")
    compact, full = (json.loads(run_cli_wide(tmp_path, *args, *extra).stdout) for extra in ((), ("--full-logits",)))
    assert (compact["version"], compact["full_logits"], full["full_logits"]) == (2, False, True)
    for small, large in zip(compact["decisions"], full["decisions"], strict=True):
        assert {k: v for k, v in large.items() if k in small} == small
        vocab = len(large["logits"])
        assert len(large["raw_probabilities"]) == len(large["selection_probabilities"]) == vocab
        assert len(large["retained_ids"]) == small["retained_count"]
        assert len(large["ineligible_ids"]) == small["ineligible_count"]


def test_probes_json_and_out_file(model_file, tmp_path):
    out = tmp_path / "probes-result.json"
    done = run_cli_wide(tmp_path, "probes", "--model", str(model_file), "--greedy", "--temperature", "0.7", "1.2",
                   "--top-k", "5", "--max-new-tokens", "12", "--json", "--out", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert json.loads(out.read_text()) == result
    assert [r["label"] for r in result["rules"]] == [
        "greedy", "sample t=0.7 k=5 seed=31415", "sample t=1.2 k=5 seed=31415"]
    rows = {row["name"]: row for row in result["rows"]}
    assert rows["clue_key_red_trailing_space"]["results"][0]["completion"] == "red."
    assert rows["clue_key_red"]["prompt_last_token"]["piece"] == ":"


def test_probes_table_shows_the_prompts_last_token(model_file, tmp_path):
    done = run_cli_wide(tmp_path, "probes", "--model", str(model_file), "--max-new-tokens", "8")
    assert done.returncode == 0, done.stderr
    assert "probes · greedy · bundled:probes.json" in done.stdout
    assert '":"' in done.stdout and "last token" in done.stdout
    assert "match (exact bytes, then EOS)" in done.stdout


def test_infer_json_record(model_file, tmp_path):
    done = run_cli_wide(tmp_path, "infer", "--model", str(model_file), "--prompt", PROMPT, "--tokens", "8", "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["tied_alias"] is True and record["device"] == "cpu" and record["precision"] == "float64"
    assert record["prompt_ids"][0] == 0
    assert record["generated_ids"][-1] == 1 and record["stop_reason"] == "eos"
    assert bytes(record["generated_bytes"]) == b"red." and record["text"] == "red."
    assert record["parameter_scalars"] > 0 and len(record["model_id"]) == 64


def test_run_specs_resolve_latest_and_best(tmp_path):
    trained = run_cli_wide(tmp_path, "train", "--preset", "tiny", "--run", "t", "--until", "2", "--json")
    assert trained.returncode == 0, trained.stderr
    for spec in ("t:latest",):
        done = run_cli_wide(tmp_path, "infer", "--model", spec, "--prompt", "ab", "--json")
        assert done.returncode == 0, done.stderr
        record = json.loads(done.stdout)
        assert record["model_path"].endswith("step-000002/model.safetensors")
        assert len(record["generated_ids"]) == 3


BAD_INPUTS = [
    (("generate", "--temperature", "0"), "temperature must be a finite number above 0"),
    (("generate", "--temperature", "-1"), "temperature must be"),
    (("generate", "--temperature", "warm"), "--temperature must be a number"),
    (("generate", "--temperature", "1", "--top-k", "0"), "top-k must be an integer of at least 1"),
    (("generate", "--temperature", "1", "--top-p", "0"), "top-p must be in (0, 1]"),
    (("generate", "--temperature", "1", "--top-p", "1.5"), "top-p must be in (0, 1]"),
    (("generate", "--max-new-tokens", "0"), "budget must be at least 1"),
    (("generate", "--top-k", "3"), "give --temperature too"),
    (("generate", "--greedy", "--temperature", "1"), "either --greedy or --temperature"),
    (("generate", "--forbid", "1"), "EOS (id 1) cannot be forbidden"),
    (("generate", "--prompt-too-long",), "fills the context of 64"),
    (("generate", "--missing-model",), "no checkpoint"),
    (("generate", "--garbage-model",), "garbage"),
    (("infer", "--tokens", "0"), "budget must be at least 1"),
    (("probes", "--bad-prompts",), "not valid JSON"),
]


def test_bad_inputs_exit_1_with_one_line(model_file, tmp_path, capsys):
    # In this process (the command line's own main, which prints the error line and returns
    # the exit code); other tests run the command as a process of its own.
    from conftest import run_cli

    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a safetensors file at all")
    bad_prompts = tmp_path / "bad.json"
    bad_prompts.write_text("{oops")
    for args, message in BAD_INPUTS:
        command, *rest = args
        model, prompt, extra = str(model_file), PROMPT, list(rest)
        if rest == ["--prompt-too-long"]:
            prompt, extra = "x" * 200, []
        elif rest == ["--missing-model"]:
            model, extra = str(tmp_path / "absent"), []
        elif rest == ["--garbage-model"]:
            model, extra = str(garbage), []
        elif rest == ["--bad-prompts"]:
            extra = ["--prompts", str(bad_prompts)]
        full = [command, "--model", model, *([] if command == "probes" else ["--prompt", prompt]), *extra]
        code, stdout, stderr = run_cli(capsys, *full)
        assert code == 1, (args, stderr)
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("minigpt-tui: error: "), (args, stderr)
        assert message in lines[0], (args, lines[0])
        assert "Traceback" not in stderr and stdout == ""
