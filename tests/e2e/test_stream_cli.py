"""Stream mode from the command line: exact resume across processes, the verify stream
experiment, the cache commands, and every bad input (one line, exit 1, nothing written)."""

from __future__ import annotations

import json

import pytest

from minigpt_tui.engine.training.training_state import config_identity
from minigpt_tui.engine.core.config import load_config
from tests.checkpoint_support import snapshot
from tests.cli_support import run_cli_json, run_cli_subprocess

STREAM_TOML = """
[corpus]
source = "bundled:patterns.txt"
mode = "stream"
[train]
steps = 40
eval_every = 10
eval_batches = 2
save_every = 0
"""


@pytest.mark.slow  # four whole processes; the in-process resume tests run in make test
def test_stream_resume_in_a_new_process_equals_the_run_that_never_stopped(tmp_path):
    config = tmp_path / "stream.toml"
    config.write_text(STREAM_TOML, "utf-8")
    straight = run_cli_json(tmp_path, "train", "--preset", "mini", "--config", str(config), "--run", "straight")
    saved = run_cli_json(tmp_path, "train", "--preset", "mini", "--config", str(config), "--until", "15", "--run", "a")
    resumed = run_cli_json(tmp_path, "resume", "--checkpoint", "a:latest")
    assert saved["updates"] == straight["updates"][:15]
    assert resumed["updates"] == straight["updates"][15:]
    assert [e for e in resumed["evaluations"] if e["step"] > 15] == [e for e in straight["evaluations"] if e["step"] > 15]
    for key in ("weights_digest", "optimizer_digest", "state_digest", "progress", "best_step"):
        assert resumed[key] == straight[key], key
    # Windows at drawn offsets, every one full; the next batch continues the same stream.
    assert all(u["valid_targets"] == 8 * 64 for u in straight["updates"])
    # The run's metadata and inspect show the mode.
    inspected = run_cli_json(tmp_path, "inspect", "a:latest")
    assert '"mode": "stream"' in json.dumps(inspected)


@pytest.mark.slow
def test_verify_runs_the_stream_experiment(tmp_path):
    done = run_cli_subprocess(tmp_path, "verify", "--preset", "stream", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["all_equal"] is True and result["saved_after"] == 30


def test_cache_list_and_clear(tmp_path, capsys):
    from conftest import run_cli

    def in_process(*args: str) -> dict:
        code, out, err = run_cli(capsys, *args, "--json")
        assert code == 0, err
        return json.loads(out)

    assert in_process("cache", "list")["entries"] == []
    in_process("train", "--preset", "text", "--steps", "200", "--until", "1", "--run", "t")
    (entry,) = in_process("cache", "list")["entries"]
    assert entry["source"] == "bundled:patterns.txt" and entry["dtype"] == "uint16"
    code, listed, _ = run_cli(capsys, "cache", "list")
    assert code == 0 and entry["key"] in listed
    # Sizes in the app's decimal units: 123,604 bytes read "123.6 kB" here as in the runs tree.
    from minigpt_tui.engine.session.display import human_bytes

    assert f" {human_bytes(entry['bytes'])} " in listed and "kB" in human_bytes(entry["bytes"])
    cleared = in_process("cache", "clear")
    assert cleared["removed"] == 1 and cleared["bytes_freed"] >= entry["bytes"]
    assert [e["key"] for e in cleared["removed_entries"]] == [entry["key"]]
    assert in_process("cache", "list")["entries"] == []


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: _write(d / "empty.txt", b""), "has no records"),
        (lambda d: _write(d / "latin.txt", "caf\u00e9 au lait\n".encode("latin-1")), "not UTF-8 text (byte 3)"),
        (lambda d: _write(d / "short.txt", b"too short for a window\n"), "fewer than one window of 65"),
        (lambda d: (d / "empty-folder").mkdir() or d / "empty-folder", "has no text files"),
        (lambda d: _write(d / "val.txt", b"a long training paragraph, " * 20 + b"\n\n" + b"tiny\n"),
         "validation split has 6 tokens"),
    ],
)
def test_bad_input_is_one_line_exit_1_and_nothing_written(tmp_path, make, message):
    source = make(tmp_path)
    before = snapshot(tmp_path)
    done = run_cli_subprocess(tmp_path, "train", "--preset", "text", "--corpus", str(source), "--val-every", "2")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("minigpt-tui: error: ")
    assert message in done.stderr and "Traceback" not in done.stderr
    assert snapshot(tmp_path) == before  # no runs dir, no cache entry


def test_settings_added_later_leave_an_older_config_identity_unchanged():
    config = load_config("mini").to_dict()
    older = json.loads(json.dumps(config))
    del older["corpus"]["mode"], older["train"]["eval_batches"], older["seeds"]["evaluation"]
    assert config_identity(config) == config_identity(older)
    streamed = load_config("mini", overrides={"corpus": {"mode": "stream"}}).to_dict()
    assert config_identity(streamed) != config_identity(config)
