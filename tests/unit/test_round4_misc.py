"""Round four, smaller causes: ``--set`` of an unknown section or setting is one line naming
the known ones; a full disk under TensorBoard's event files is one line (a note in a run that
goes on, a refusal of an export) and no thread traceback; damaged lines of ``metrics.jsonl``
are skipped and counted by the export; an automatic thread count is no environment change on
resume; ``--quant`` with a transformers export is refused."""

from __future__ import annotations

import errno
import io
import json
import os
import threading
from pathlib import Path

import pytest
from cli_support import one_error_line
from conftest import run_cli

from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.core.errors import ConfigError
from minigpt_tui.engine.session import tensorboard as tensorboard_module
from minigpt_tui.engine.session.tensorboard import ScalarWriter
from minigpt_tui.engine.training.training_state import compared_keys, envelope_differences

TINY = ("train", "--preset", "tiny", "--steps", "4", "--set", "train.eval_every=2")


# -- --set and config files -----------------------------------------------------------------
def test_set_of_an_unknown_section_names_it_and_the_known_ones(tmp_path, capsys):
    code, out, err = run_cli(capsys, *TINY, "--set", "a.b=1", "--runs-dir", str(tmp_path / "runs"))
    line = one_error_line(err)
    assert code == 1 and out == ""
    assert "unknown config section 'a'" in line
    assert all(name in line for name in ("model", "tokenizer", "corpus", "seeds", "train"))
    assert not (tmp_path / "runs").exists()


def test_set_of_an_unknown_setting_suggests_a_near_one_or_lists_them(tmp_path, capsys):
    code, _, err = run_cli(capsys, *TINY, "--set", "train.stepz=3", "--runs-dir", str(tmp_path / "runs"))
    assert code == 1 and one_error_line(err).endswith("unknown setting train.stepz (did you mean train.steps?)")
    code, _, err = run_cli(capsys, *TINY, "--set", "seeds.qqq=3", "--runs-dir", str(tmp_path / "runs"))
    assert code == 1 and one_error_line(err).endswith(
        "unknown setting seeds.qqq (seeds has init, data, dropout, sampling, evaluation)")
    assert not (tmp_path / "runs").exists()


def test_unknown_sections_are_refused_wherever_settings_come_from(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown config section 'trian' \(the sections are model, "):
        load_config("tiny", overrides={"trian": {"steps": 3}})
    config_file = tmp_path / "c.toml"
    config_file.write_text("[trian]\nsteps = 3\n")
    with pytest.raises(ConfigError, match=r"c.toml: unknown config section 'trian' \(the sections are "):
        load_config("tiny", config_file)
    with pytest.raises(ConfigError, match="unknown config section 'trian'"):
        load_config("tiny").replace(trian={"steps": 3})


def test_a_value_past_its_limit_is_named_before_a_rule_it_breaks_by_size(tmp_path, capsys):
    code, _, err = run_cli(capsys, *TINY, "--width", "99999999999999999999", "--runs-dir", str(tmp_path / "runs"))
    assert code == 1 and "model.width is 99999999999999999999, above the limit of 16,384" in one_error_line(err)


# -- TensorBoard on a full disk -------------------------------------------------------------
class FillingDisk(io.RawIOBase):
    """A file on a disk with ``room`` bytes left: a write past it fails as a full disk does."""

    def __init__(self, room: int) -> None:
        self.room = room

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return len(data)


@pytest.fixture
def thread_tracebacks(monkeypatch):
    """The exceptions that escaped a thread (each would print a traceback)."""
    escaped: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value))
    return escaped


def test_a_disk_that_fills_during_a_run_stops_the_event_files_with_one_note(tmp_path, capsys, monkeypatch,
                                                                             thread_tracebacks):
    monkeypatch.setattr(tensorboard_module, "_new_event_file", lambda folder: io.BufferedWriter(FillingDisk(200)))
    monkeypatch.setattr(tensorboard_module, "FLUSH_SECONDS", 0)  # every record reaches the disk at once
    code, out, err = run_cli(capsys, *TINY, "--run", "r", "--runs-dir", str(tmp_path / "runs"),
                             "--tensorboard", str(tmp_path / "tb"), "--json")
    assert code == 0 and json.loads(out)["step"] == 4
    notes = [line for line in err.splitlines() if "TensorBoard" in line]
    assert len(notes) == 1 and "No space left on device" in notes[0] and "the run goes on" in notes[0]
    assert "Traceback" not in err and thread_tracebacks == []
    records = [json.loads(line) for line in (tmp_path / "runs" / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "update"] == [1, 2, 3, 4]


def test_the_writer_drops_what_follows_a_failed_write(tmp_path, monkeypatch, thread_tracebacks):
    monkeypatch.setattr(tensorboard_module, "_new_event_file", lambda folder: io.BufferedWriter(FillingDisk(120)))
    monkeypatch.setattr(tensorboard_module, "FLUSH_SECONDS", 0)
    writer = ScalarWriter(tmp_path / "events")
    for step in range(1, 20):
        writer.write({"kind": "update", "step": step, "loss": 1.0, "lr": 0.1})
    failure = writer.close()
    assert failure == f"cannot write TensorBoard event files in {tmp_path / 'events'}: No space left on device"
    assert thread_tracebacks == []


def test_an_export_to_a_full_disk_fails_in_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch,
                                                                       thread_tracebacks):
    run = tmp_path / "r"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"kind": "update", "step": 1, "loss": 2.0}) + "\n")
    monkeypatch.setattr(tensorboard_module, "_new_event_file", lambda folder: open("/dev/full", "wb"))
    code, out, err = run_cli(capsys, "export-tensorboard", str(run), "--out", str(tmp_path / "tb"))
    line = one_error_line(err)
    assert code == 1 and out == ""
    assert line.endswith(f"cannot write TensorBoard event files in {tmp_path / 'tb' / 'r'}: No space left on device")
    assert list((tmp_path / "tb").iterdir()) == [] and thread_tracebacks == []


# -- damaged metrics --------------------------------------------------------------------------
def test_the_export_skips_damaged_metrics_lines_and_counts_them(tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "r"
    run.mkdir()
    lines = [
        json.dumps({"kind": "update", "step": 1, "loss": 2.0}).encode(),
        b'{"kind": "update", "step": \xff\xfe}',  # not UTF-8
        b"[1, 2, 3]",  # JSON, not a record
        b"",  # an empty line is no damage
        b'{"kind": "update", "step": 100000000000000000000000000000, "loss": 1.0}',  # no event's step
        b'{"kind": "update", "step": 3, "loss": 1' + b"0" * 400 + b"}",  # no float's value
        json.dumps({"kind": "update", "step": 4, "loss": 1.5}).encode(),
        '{"kind": "update", "step": 5, "loss": 0.5, "note": "a\u2028b\u0085c"}'.encode(),  # raw separators inside a string
        b'{"kind": "upd',  # torn last line, no newline: being written
    ]
    (run / "metrics.jsonl").write_bytes(b"\n".join(lines))
    code, out, err = run_cli(capsys, "export-tensorboard", str(run), "--out", str(tmp_path / "tb"), "--json")
    assert code == 0, err
    assert err.strip() == f"note: skipped 2 damaged lines of {run / 'metrics.jsonl'}; exported the rest"
    exported = json.loads(out)
    assert exported["skipped_lines"] == 2 and (exported["first_step"], exported["last_step"]) == (1, 5)
    accumulator = EventAccumulator(str(tmp_path / "tb" / "r"), size_guidance={"scalars": 0})
    accumulator.Reload()
    assert [(e.step, e.value) for e in accumulator.Scalars("loss/batch")] == [(1, 2.0), (4, 1.5), (5, 0.5)]


def test_a_metrics_log_that_is_a_fifo_is_refused_before_reading(tmp_path, capsys):
    run = tmp_path / "r"
    run.mkdir()
    os.mkfifo(run / "metrics.jsonl")
    code, _, err = run_cli(capsys, "export-tensorboard", str(run), "--out", str(tmp_path / "tb"))
    assert code == 1 and "is a FIFO (named pipe), not a metrics log" in one_error_line(err)
    assert not (tmp_path / "tb").exists()


# -- threads on resume ------------------------------------------------------------------------
def test_an_automatic_thread_count_is_no_environment_change():
    auto = load_config("tiny", overrides={"train": {"precision": "fast", "threads": 0}}).train
    fixed = load_config("tiny", overrides={"train": {"precision": "fast", "threads": 3}}).train
    exact = load_config("tiny").train
    saved = {"threads": 2, "device": "cpu"}
    assert envelope_differences(saved, {"threads": 0, "device": "cpu"}, compared_keys(auto)) == []
    assert envelope_differences(saved, {"threads": 3, "device": "cpu"}, compared_keys(fixed)) == [
        "threads: saved 2, now 3"]
    assert envelope_differences(saved, {"threads": 1, "device": "cpu"}, compared_keys(exact)) == [
        "threads: saved 2, now 1"]


def test_resuming_an_automatic_thread_run_notes_no_environment_change(tmp_path, capsys):
    runs = str(tmp_path / "runs")
    code, _, err = run_cli(capsys, *TINY, "--precision", "fast", "--threads", "auto", "--save-every", "2",
                           "--until", "2", "--run", "a", "--runs-dir", runs, "--json")
    assert code == 0, err
    code, out, err = run_cli(capsys, "resume", "--checkpoint", "a:latest", "--runs-dir", runs, "--json")
    assert code == 0, err
    notes = json.loads(out)["continuation"]["notes"]
    assert notes == ["fast precision makes no bitwise promise"]
    assert "environment changed" not in err


# -- export options ---------------------------------------------------------------------------
def test_quant_with_a_transformers_export_is_refused_and_gguf_defaults_to_f16(tmp_path, capsys):
    from family_support import make_family_folder

    folder = make_family_folder("llama", tmp_path / "llama")
    capsys.readouterr()  # what transformers printed while the folder was made
    code, out, err = run_cli(capsys, "export", "--model", str(folder), "--format", "hf", "--quant", "q8_0",
                             "--out", str(tmp_path / "hf"))
    assert code == 1 and out == ""
    assert one_error_line(err).endswith("--quant applies to --format gguf only: --format hf keeps the model's own dtype")
    assert not (tmp_path / "hf").exists()
    code, out, err = run_cli(capsys, "export", "--model", str(folder), "--format", "gguf",
                             "--out", str(tmp_path / "m.gguf"), "--json")
    assert code == 0, err
    assert json.loads(out)["quant"] == "f16" and (tmp_path / "m.gguf").is_file()
