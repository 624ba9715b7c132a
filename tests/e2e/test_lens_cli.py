"""``generate --lens --contributions --candidate --layer --head`` in subprocesses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_support import run_cli_wide
from lens_support import BYTES_ONLY, varied_model

PROMPT = "Lens"


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict[str, Path]:
    from minigpt_tui.engine.formats.portable import save_portable_model

    folder = tmp_path_factory.mktemp("models")
    paths = {}
    for family in ("llama", "gpt2"):
        paths[family] = folder / f"{family}.safetensors"
        save_portable_model(varied_model(family), BYTES_ONLY, paths[family])
    return paths


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_generate_json_carries_lens_contributions_and_pattern(model_files, tmp_path, family):
    done = run_cli_wide(tmp_path, "generate", "--model", str(model_files[family]), "--prompt", PROMPT,
                   "--max-new-tokens", "3", "--top", "4", "--lens", "--contributions", "--candidate", "70",
                   "--layer", "1", "--head", "2", "--full-logits", "--json")
    assert done.returncode == 0, done.stderr
    decisions = json.loads(done.stdout)["decisions"]
    assert len(decisions) == 3
    for decision in decisions:
        lens = decision["lens"]
        assert [row["layer"] for row in lens] == [0, 1, 2, 3]
        assert all(len(row["top"]) == 4 for row in lens)
        assert lens[-1]["chosen_rank"] == decision["chosen"]["rank"]
        assert lens[-1]["chosen_probability"] == decision["chosen"]["raw_probability"]
        parts = decision["contributions"]
        assert parts["id"] == decision["chosen"]["id"]
        assert abs(parts["total"] - decision["chosen"]["logit"]) < 1e-9
        assert set(parts) >= {"embedding", "heads", "ffn", "norm_bias", "total", "attention_bias"}
        assert len(parts["heads"]) == 3 and all(len(layer) == 4 for layer in parts["heads"])
        (picked,) = decision["candidate_contributions"]
        assert picked["id"] == 70 and abs(picked["total"] - decision["logits"][70]) < 1e-9
        pattern = decision["pattern"]
        length = decision["prefix_length"]
        assert (pattern["layer"], pattern["head"]) == (1, 2)
        assert [t["id"] for t in pattern["tokens"]] == decision["prefix_ids"]
        assert len(pattern["weights"]) == length and all(len(row) == length for row in pattern["weights"])


def test_generate_prints_lens_contributions_and_pattern_tables(model_files, tmp_path):
    done = run_cli_wide(tmp_path, "generate", "--model", str(model_files["gpt2"]), "--prompt", PROMPT,
                   "--max-new-tokens", "1", "--lens", "--contributions", "--layer", "0", "--head", "0")
    assert done.returncode == 0, done.stderr
    for phrase in ("lens · step 1", "block 2 resid", "embed: the embeddings", "contributions · step 1",
                   "sum of parts", "the 12 largest of 20 parts", "the other 8 parts", "final norm bias",
                   "attention · block 0 head 0", "query"):
        assert phrase in done.stdout


@pytest.mark.parametrize(("extra", "message"), [
    (["--layer", "3", "--head", "0"], "layer 3 does not exist: the model has blocks 0 to 2"),
    (["--layer", "0", "--head", "9"], "head 9 does not exist: each block has heads 0 to 3"),
    (["--layer", "1"], "--layer and --head go together"),
    (["--head", "x", "--layer", "0"], "--head must be a whole number, got 'x'"),
    (["--candidate", "300"], "candidate id 300 is outside the vocabulary of 258"),
])
def test_bad_views_are_refused_with_one_line(model_files, tmp_path, extra, message):
    done = run_cli_wide(tmp_path, "generate", "--model", str(model_files["llama"]), "--prompt", PROMPT, "--json", *extra)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
