"""The checkpoint commands: exact resume across processes, refusals, malformed files
(exit 1, one line, nothing changed on disk), inspection and the verify experiment."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess

import pytest
import safetensors.torch
import torch

from minigpt_tui.cli import main
from minigpt_tui.engine.formats.checkpoint_folder import MANIFEST
from minigpt_tui.engine.formats.portable import MODEL_FILE, save_portable_model
from minigpt_tui.engine.formats.safetensors_read import load_file
from minigpt_tui.engine.formats.checkpoint_folder import TRAINING_FILE
from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer
from tests.checkpoint_support import data_offset, flip_bit, make_trainer, refresh_manifest, snapshot
from tests.cli_support import run_cli_json
from tests.conftest import cli_command, cli_env


@pytest.mark.slow  # four whole processes; the in-process resume tests run in make test
def test_tiny_resume_in_a_new_process_equals_the_run_that_never_stopped(tmp_path):
    saved = run_cli_json(tmp_path, "train", "--preset", "tiny", "--until", "2", "--run", "a")
    resumed = run_cli_json(tmp_path, "resume", "--checkpoint", "a:latest", "--until", "4")
    straight = run_cli_json(tmp_path, "train", "--preset", "tiny", "--run", "c")
    assert [u["step"] for u in saved["updates"]] == [1, 2] and saved["checkpoints"][-1].endswith("step-000002")
    assert [u["step"] for u in resumed["updates"]] == [3, 4]
    assert resumed["updates"] == straight["updates"][2:]  # step, lr, loss, batch, scale, cursor, counters
    for key in ("weights_digest", "optimizer_digest", "state_digest", "progress", "best_step"):
        assert resumed[key] == straight[key], key
    assert resumed["continuation"] == {"bitwise_promised": True, "notes": []}
    # Seed 000's remaining updates: scale 8 grows to 16 after the third finite update.
    third, fourth = resumed["updates"]
    assert third["lr"] == 0.0003250000000000001 and fourth["lr"] == 0.0001
    assert third["batch"] == [[0], [1]]
    assert (third["loss_scale"], third["next_loss_scale"]) == (8.0, 16.0)
    assert (third["data_progress"]["cursor"], third["data_progress"]["epoch"]) == (0, 2)
    assert (fourth["data_progress"]["cursor"], fourth["data_progress"]["epoch"]) == (2, 2)
    assert (fourth["loss_scale"], fourth["next_loss_scale"]) == (16.0, 16.0)
    # A weights-only warm start from the same saved weights is a new history, and says so.
    warm = run_cli_json(tmp_path, "train", "--preset", "tiny", "--init-from", "a:step-2", "--until", "2", "--run", "w")
    assert "weights-only warm start" in warm["warm_start"]["note"]
    assert warm["updates"][0]["lr"] == 0.001 and warm["updates"][0]["batch"] == [[2], [0]]
    assert warm["weights_digest"] != resumed["weights_digest"]


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A tiny run saved after two updates, made once in this process through the CLI."""
    root = tmp_path_factory.mktemp("saved")
    code = main(["--runs-dir", str(root / "runs"), "train", "--preset", "tiny", "--until", "2", "--run", "a", "--json"])
    assert code == 0
    return root / "runs"


@pytest.fixture
def runs(saved_run, tmp_path):
    copy = tmp_path / "runs"
    shutil.copytree(saved_run, copy)
    return copy


def fails_cleanly(capsys, runs_root, argv, message):
    capsys.readouterr()
    before = snapshot(runs_root)
    code = main(["--runs-dir", str(runs_root), *argv])
    err = capsys.readouterr().err
    assert code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("minigpt-tui: error: "), err
    assert message in lines[0], lines[0]
    assert "Traceback" not in err
    assert snapshot(runs_root) == before  # a failed load changes nothing on disk
    return lines[0]


def _checkpoint(runs):
    return runs / "a" / "checkpoints" / "step-000002"


def test_a_truncated_model_file_in_a_checkpoint_is_refused(capsys, runs):
    model = _checkpoint(runs) / MODEL_FILE
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    fails_cleanly(capsys, runs, ["resume", "--checkpoint", "a:latest"], "truncated or changed")


def test_a_flipped_header_bit_in_a_checkpoint_is_refused(capsys, runs):
    flip_bit(_checkpoint(runs) / TRAINING_FILE, 40, bit=1)
    fails_cleanly(capsys, runs, ["resume", "--checkpoint", "a:latest"], "does not match")


def test_a_flipped_data_bit_in_a_checkpoint_is_refused(capsys, runs):
    model = _checkpoint(runs) / MODEL_FILE
    flip_bit(model, data_offset(model) + 64, bit=5)
    fails_cleanly(capsys, runs, ["resume", "--checkpoint", "a:latest"], "the file changed after saving")


def test_a_manifest_that_does_not_match_is_refused(capsys, runs):
    manifest_path = _checkpoint(runs) / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["files"][TRAINING_FILE]["sha256"] = "0" * 64
    manifest_path.write_text(json.dumps(manifest))
    fails_cleanly(capsys, runs, ["resume", "--checkpoint", "a:latest"], "does not match")


def test_a_tokenizer_swapped_for_one_of_the_same_size_is_refused(capsys, runs):
    folder = _checkpoint(runs)
    trainer = make_trainer("tiny", updates=2)
    other = ByteBPETokenizer.train(["zzzz yyyy xxxx", "qqqq pppp oooo"], 8)
    assert other.vocab_size == trainer.tokenizer.vocab_size
    save_portable_model(trainer.model, other, folder / MODEL_FILE)
    refresh_manifest(folder)
    fails_cleanly(capsys, runs, ["resume", "--checkpoint", "a:latest"], "tokenizer")


def test_an_incomplete_checkpoint_is_refused(capsys, runs):
    folder = _checkpoint(runs)
    (folder / MANIFEST).unlink()
    fails_cleanly(capsys, runs, ["resume", "--checkpoint", str(folder)], "incomplete checkpoint")
    fails_cleanly(capsys, runs, ["resume", "--checkpoint", "a:latest"], "no complete checkpoint")


def test_resume_refuses_to_pass_the_saved_schedule(capsys, runs):
    line = fails_cleanly(capsys, runs, ["resume", "--checkpoint", "a:latest", "--until", "9"], "beyond the saved schedule")
    assert "train --init-from" in line
    fails_cleanly(capsys, runs, ["resume", "--checkpoint", "a:latest", "--until", "2"], "not after the checkpoint's step 2")


def _standalone(runs, tmp_path, name=MODEL_FILE):
    target = tmp_path / "loose" / name
    target.parent.mkdir(exist_ok=True)
    target.write_bytes((_checkpoint(runs) / name).read_bytes())
    return target


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncate", "truncated-data"),
        ("absurd-length", "header-too-large"),
        ("wrong-byte-length", "byte-length-mismatch"),
        ("not-safetensors", "not a valid safetensors file"),
        ("header-bit", "header-not-json"),
    ],
)
def test_inspecting_a_malformed_file_names_the_problem(capsys, runs, tmp_path, damage, message):
    path = _standalone(runs, tmp_path)
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    if damage == "truncate":
        path.write_bytes(data[:-100])
    elif damage == "absurd-length":
        path.write_bytes(struct.pack("<Q", 2**62) + data[8:])
    elif damage == "wrong-byte-length":
        header = data[8 : 8 + length].replace(b'"shape":[8,2]', b'"shape":[9,2]', 1)
        assert header != data[8 : 8 + length]
        path.write_bytes(data[:8] + header + data[8 + length :])
    elif damage == "not-safetensors":
        path.write_bytes(b"PK\x03\x04 this is a zip file, or a pickle, or anything else entirely")
    elif damage == "header-bit":
        flip_bit(path, 9, bit=1)  # the first quote becomes another character
    fails_cleanly(capsys, tmp_path, ["inspect", str(path)], message)


def test_a_flipped_data_bit_in_a_loose_file_is_found_by_inspect_verify(capsys, runs, tmp_path):
    model = _standalone(runs, tmp_path)
    flip_bit(model, data_offset(model) + 8, bit=2)
    assert main(["inspect", str(model), "--json"]) == 0  # header-only: the header is intact
    fails_cleanly(capsys, tmp_path, ["inspect", str(model), "--verify"], "model identity mismatch")
    state = _standalone(runs, tmp_path, TRAINING_FILE)
    flip_bit(state, data_offset(state) + 8, bit=2)
    fails_cleanly(capsys, tmp_path, ["inspect", str(state), "--verify"], "content digest mismatch")


def test_inspect_shows_entries_aliases_grouped_state_and_integrity(capsys, runs):
    capsys.readouterr()
    assert main(["--runs-dir", str(runs), "inspect", "a:latest", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["kind"] == "checkpoint-dir"
    model_entries = [e for e in result["entries"] if e["file"] == MODEL_FILE]
    assert len(model_entries) == 31
    table = next(e for e in model_entries if e["name"] == "token_embedding.weight")
    assert (table["dtype"], table["shape"], table["elements"], table["bytes"]) == ("F64", [266, 4], 1064, 8512)
    assert table["end"] - table["begin"] == 8512
    assert result["aliases"][0]["target"] == "token_embedding.weight"
    for group in ("optimizer", "schedule", "data_progress", "randomness", "loss_scaling", "accumulation", "identities", "envelope"):
        assert result["state"][group], group
    assert result["state"]["schedule"]["step"] == 2 and result["state"]["data_progress"]["cursor"] == 1
    assert result["state"]["randomness"]["dropout_seed"] == 18446744073709551613
    assert set(result["metadata"]) == {MODEL_FILE, TRAINING_FILE}
    assert result["integrity"]["ok"] is True
    # Without --json: rich tables; --tensor NAME prints that tensor's statistics alone.
    assert main(["--runs-dir", str(runs), "inspect", "a:latest", "--verify"]) == 0
    text = capsys.readouterr().out
    assert "alias records" in text and "state: optimizer" in text and "statistics:" not in text
    assert main(["--runs-dir", str(runs), "inspect", "a:latest", "--tensor", "final_norm.weight", "--verify"]) == 0
    text = capsys.readouterr().out
    assert "statistics: final_norm.weight" in text
    assert "alias records" not in text and "state: optimizer" not in text and "files" not in text


def test_piped_inspect_never_cuts_a_value(runs):
    """stdout is a pipe, not a terminal: every state value is printed whole, on one line."""
    done = subprocess.run(cli_command("--runs-dir", str(runs), "inspect", "a:latest"), capture_output=True, text=True,
                          env=cli_env(runs.parent), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout and "..." not in done.stdout.replace("..", "")  # offsets print as A..B
    assert "18446744073709551613" in done.stdout


def test_help_names_the_runs_directory_plainly(capsys):
    with pytest.raises(SystemExit):
        main(["inspect", "--help"])
    text = capsys.readouterr().out
    assert "--runs-dir DIR" in text and "RUNS_DIR_SUB" not in text


def test_train_summary_lists_only_checkpoints_on_disk(tmp_path):
    done = run_cli_json(tmp_path, "train", "--preset", "tiny", "--save-every", "1", "--keep-last", "1", "--run", "k")
    assert done["checkpoints"], done
    from pathlib import Path

    assert all(Path(path).is_dir() for path in done["checkpoints"]), done["checkpoints"]


def test_one_tensor_statistics_and_a_comparison(capsys, runs, tmp_path):
    assert main(["--runs-dir", str(runs), "resume", "--checkpoint", "a:latest", "--json"]) == 0
    capsys.readouterr()
    assert main(["--runs-dir", str(runs), "inspect", "a:2", "--tensor", "blocks.0.ffn.up_proj.weight", "--bins", "4",
                 "--compare", "a:latest", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    stats = result["statistics"]
    values = load_file(_checkpoint(runs) / MODEL_FILE).tensor("blocks.0.ffn.up_proj.weight")
    assert stats["min"] == float(values.min()) and stats["max"] == float(values.max())
    assert stats["mean"] == pytest.approx(float(values.mean()), abs=1e-15)
    assert stats["std"] == pytest.approx(float(values.std(correction=0)), abs=1e-15)
    assert sum(stats["histogram"]["counts"]) == 32 and len(stats["histogram"]["edges"]) == 5
    assert stats["bytes_read"] == 32 * 8
    comparison = result["comparison"]
    assert f"{MODEL_FILE}:token_embedding.weight" in comparison["changed"]
    changed = {t["name"]: t for t in comparison["tensors"] if t["status"] == "changed"}
    assert changed["token_embedding.weight"]["max_abs_diff"] > 0
    assert {d["group"] for d in comparison["state_differences"]} >= {"schedule", "data_progress", "randomness"}


def test_inspect_opens_any_safetensors_file(capsys, tmp_path):
    path = tmp_path / "foreign.safetensors"
    safetensors.torch.save_file({"w": torch.arange(6.0).reshape(2, 3), "b": torch.zeros(3)}, path, metadata={"format": "pt"})
    capsys.readouterr()
    assert main(["inspect", str(path), "--json", "--tensor", "w", "--verify"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["kind"] == "safetensors" and {e["name"] for e in result["entries"]} == {"w", "b"}
    assert result["metadata"] == {"format": "pt"} and result["aliases"] == [] and result["integrity"] is None
    assert result["statistics"]["max"] == 5.0 and result["statistics"]["zero_fraction"] == pytest.approx(1 / 6)


@pytest.mark.slow
def test_verify_runs_the_mini_experiment_with_evaluations_in_fresh_processes(tmp_path):
    """Seed 003's experiment: 300 -> 600 with evaluation every 50, and the next batch."""
    done = subprocess.run(cli_command("verify", "--preset", "mini", "--json"), capture_output=True, text=True,
                          env=cli_env(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["all_equal"] is True
    names = {c["name"]: c["equal"] for c in result["comparisons"]}
    assert names["updates 301..600: resumed = uninterrupted"]
    assert names["evaluations after step 300: resumed = uninterrupted"]
    assert names["next batch after update 600"]
    assert names["weights-only warm start ends with different weights"]
    assert result["warm_start"]["first_update"]["batch"] != result["warm_start"]["resumed_first_update"]["batch"]


def test_statistics_count_non_finite_values_and_leave_them_out(tmp_path):
    from minigpt_tui.engine.formats.inspect import tensor_statistics
    from minigpt_tui.engine.formats.safetensors_write import write_safetensors

    path = tmp_path / "odd.safetensors"
    values = torch.tensor([0.0, 1.0, float("nan"), float("inf"), -1.0, 0.0], dtype=torch.float32)
    write_safetensors(path, [("odd", values), ("empty", torch.zeros(0)), ("ids", torch.tensor([2**64 - 1], dtype=torch.uint64))])
    stats = tensor_statistics(path, "odd", bins=2)
    assert (stats["nan"], stats["inf"]) == (1, 1)
    assert (stats["min"], stats["max"], stats["mean"]) == (-1.0, 1.0, 0.0)
    assert stats["zero_fraction"] == pytest.approx(2 / 6)
    assert stats["histogram"]["counts"] == [1, 3]
    assert tensor_statistics(path, "empty")["min"] is None
    assert tensor_statistics(path, "ids")["max"] == float(2**64 - 1)


def test_statistics_of_a_constant_and_of_a_complex_tensor_say_what_they_are(capsys, tmp_path):
    path = tmp_path / "w.safetensors"
    safetensors.torch.save_file({"c": torch.full((8,), 3.515), "z": torch.tensor([3 + 4j, 0j])}, path)
    capsys.readouterr()
    assert main(["inspect", str(path), "--tensor", "c"]) == 0
    text = capsys.readouterr().out
    assert "every finite value equals 3.515 (8 values)" in text and "[ 3.515,  3.515)" not in text
    assert main(["inspect", str(path), "--tensor", "z"]) == 0
    assert "of its magnitudes |z|" in capsys.readouterr().out
