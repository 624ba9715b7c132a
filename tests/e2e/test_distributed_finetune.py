"""A fine-tune in two processes (``--nproc 2``): a llama folder made in the test, stopped,
saved and resumed by two new processes, equals the two-process run that never stopped."""

from __future__ import annotations

import pytest

from tests.cli_support import run_cli_json
from tests.family_support import make_family_folder, training_text


@pytest.mark.slow
def test_a_two_process_fine_tune_resumes_bit_for_bit(tmp_path):
    folder = make_family_folder("llama", tmp_path / "llama")
    corpus = tmp_path / "notes.txt"
    corpus.write_text("\n\n".join(training_text() * 3), encoding="utf-8")
    common = ("--preset", "finetune", "--precision", "exact", "--init-from", str(folder), "--corpus", str(corpus),
              "--steps", "4", "--nproc", "2")
    straight = run_cli_json(tmp_path, "train", *common, "--run", "straight")
    assert straight["world_size"] == 2
    first = run_cli_json(tmp_path, "train", *common, "--until", "2", "--save-every", "2", "--run", "stopped")
    resumed = run_cli_json(tmp_path, "resume", "--checkpoint", first["checkpoints"][-1], "--nproc", "2")
    assert resumed["world_size"] == 2
    assert resumed["state_digest"] == straight["state_digest"]
    assert [u["loss"] for u in resumed["updates"]] == [u["loss"] for u in straight["updates"][2:]]
    assert resumed["tokenizer_identity"] == straight["tokenizer_identity"]
