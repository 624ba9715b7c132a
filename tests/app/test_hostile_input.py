"""Hostile and unlucky input: nothing overwritten, nothing exhausted, nothing injected, one
writer per run. Every case is built here; each refusal is one line of the project's error
family, and nothing on disk changes."""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch

from minigpt_tui.engine.training.checkpoints import Checkpointer, load_checkpoint, restore_trainer
from minigpt_tui.engine.formats.checkpoint_folder import MANIFEST, read_manifest
from minigpt_tui.engine.formats.inspect import inspect_path
from minigpt_tui.engine.formats.portable import MODEL_FILE, model_identity, read_portable, semantic_settings
from minigpt_tui.engine.models.model_file import load_portable_model
from minigpt_tui.engine.formats.safetensors_read import InvalidSafetensors, load_file, read_header
from minigpt_tui.engine.formats.state_groups import StateGroup
from minigpt_tui.engine.formats.checkpoint_folder import TRAINING_FILE
from minigpt_tui.engine.core.config import ModelConfig, load_config
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.core.errors import (
    CheckpointError,
    InputRefused,
    ResumeRefused,
    RunLocked,
    WriteRefused,
)
from minigpt_tui.engine.core.files import write_file
from minigpt_tui.engine.formats.record_walk import WALK_DEPTH
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.plans import ResumeRun, prepare
from minigpt_tui.engine.session.runs import RunDirectory, lock_run
from tests.checkpoint_support import data_offset, flip_bit, make_trainer, refresh_manifest, snapshot
from tests.cli_support import one_error_line
from tests.conftest import ROOT, cli_command, cli_env, run_cli

ESCAPES = "\x1b[2J\x1b[H\x1b]0;owned\x07"


@pytest.fixture(scope="module")
def saved_runs(tmp_path_factory) -> Path:
    """A runs directory with run 'good': tiny, saved after two updates (made in process)."""
    runs = tmp_path_factory.mktemp("hostile") / "runs"
    config = load_config("tiny")
    trainer = make_trainer("tiny", updates=2)
    run = RunDirectory.create(runs, "good", "tiny", {"config.json": config.to_dict()})
    Checkpointer(run).save(trainer, "manual")
    return runs


@pytest.fixture
def runs(saved_runs, tmp_path) -> Path:
    copy = tmp_path / "runs"
    shutil.copytree(saved_runs, copy)
    return copy


@pytest.fixture
def checkpoint(runs) -> Path:
    return runs / "good" / "checkpoints" / "step-000002"


# -- 1. outputs never overwrite --------------------------------------------------------------
def test_output_writer_refuses_existing_paths_and_anything_not_a_regular_file(tmp_path):
    existing = tmp_path / "existing.json"
    existing.write_text("keep me")
    with pytest.raises(WriteRefused, match="already exists.*--force"):
        write_file(existing, b"new")
    assert existing.read_text() == "keep me"
    write_file(existing, b"new", replace=True)
    assert existing.read_text() == "new"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(existing)
    for target in (fifo, tmp_path, link, Path("/dev/null")):
        with pytest.raises(WriteRefused, match="regular file or a new path"):
            write_file(target, b"x", replace=True)
    with pytest.raises(WriteRefused, match="does not exist"):
        write_file(tmp_path / "no-folder" / "out.json", b"x")
    assert existing.read_text() == "new" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.json", "fifo", "link"]


def test_generate_and_probes_never_replace_an_existing_file(runs, checkpoint, capsys):
    before = snapshot(runs)
    target = checkpoint / MODEL_FILE
    code, _, err = run_cli(capsys, "--runs-dir", str(runs), "generate", "--model", "good:latest", "--prompt", "a",
                       "--trace-out", str(target))
    assert code == 1 and "already exists" in one_error_line(err)
    code, _, err = run_cli(capsys, "--runs-dir", str(runs), "probes", "--model", "good:latest", "--out", str(target))
    assert code == 1 and "already exists" in one_error_line(err)
    assert snapshot(runs) == before
    out = runs.parent / "trace.json"
    assert run_cli(capsys, "--runs-dir", str(runs), "generate", "--model", "good:latest", "--prompt", "a",
               "--max-new-tokens", "1", "--trace-out", str(out))[0] == 0
    first = out.read_bytes()
    code, _, err = run_cli(capsys, "--runs-dir", str(runs), "generate", "--model", "good:latest", "--prompt", "b",
                       "--max-new-tokens", "1", "--trace-out", str(out))
    assert code == 1 and out.read_bytes() == first
    assert run_cli(capsys, "--runs-dir", str(runs), "generate", "--model", "good:latest", "--prompt", "b",
               "--max-new-tokens", "1", "--trace-out", str(out), "--force")[0] == 0
    assert out.read_bytes() != first


# -- 2. declared shapes are checked before anything is allocated -----------------------------------
def _resign_config(path: Path, **changes: int) -> None:
    """Edit the saved model config and recompute the model identity, as an attacker would."""
    loaded = load_file(path)
    records = {key: json.loads(text) for key, text in loaded.metadata.items()}
    records["model_config"].update(changes)
    config = ModelConfig(**records["model_config"])
    start = loaded.header.data_start
    tensors = [(e.name, e.dtype, e.shape, loaded.buffer[start + e.begin : start + e.end]) for e in loaded.header.entries]
    settings = semantic_settings(config, records["tokenizer"]["vocab_size"])
    records["identity"]["model"] = model_identity(
        settings, records["composition"], records["special_ids"], records["aliases"], tensors
    )
    named = [(e.name, loaded.tensor(e.name).clone()) for e in loaded.header.entries]
    from minigpt_tui.engine.formats.safetensors_write import json_metadata, write_safetensors

    write_safetensors(path, named, json_metadata(records))


@pytest.mark.parametrize("changes", [{"width": 4096, "heads": 1, "kv_heads": 1}, {"layers": 1000}, {"ffn": 2**31}])
def test_a_config_the_file_cannot_hold_is_refused_before_the_model_is_built(tmp_path, changes):
    trainer = make_trainer("tiny")
    from minigpt_tui.engine.formats.portable import save_portable_model

    path = tmp_path / MODEL_FILE
    save_portable_model(trainer.model, trainer.tokenizer, path)
    # The file loads before its config is changed; that first load also pays torch's one-time
    # set-up of the meta device the check lays the model out on (0.7 s idle, over 2 s on a
    # loaded machine), which is no part of the refusal timed below.
    load_portable_model(path)
    _resign_config(path, **changes)
    before = snapshot(tmp_path)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with pytest.raises(CheckpointError) as refused:
        load_portable_model(path)
    assert time.perf_counter() - start < 1.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 200 * 1024  # KiB: nothing allocated
    assert "\n" not in str(refused.value)
    assert snapshot(tmp_path) == before


# -- 3. content identity is verified whatever the manifest says --------------------------------------
@pytest.mark.parametrize("name", [MODEL_FILE, TRAINING_FILE])
def test_a_re_signed_edit_is_refused_by_every_load(checkpoint, runs, name):
    path = checkpoint / name
    flip_bit(path, data_offset(path) + 3, 2)  # one weight or state byte
    refresh_manifest(checkpoint)  # size and SHA-256 rewritten to match
    before = snapshot(runs)
    with pytest.raises(CheckpointError, match="mismatch|content digest|changed after saving"):
        load_checkpoint(checkpoint)
    with pytest.raises(CheckpointError):
        restore_trainer(checkpoint)
    if name == MODEL_FILE:
        with pytest.raises(CheckpointError, match="identity mismatch"):
            load_portable_model(path)
        with pytest.raises(CheckpointError, match="identity mismatch"):
            read_portable(checkpoint / MODEL_FILE)
    assert snapshot(runs) == before


# -- 4. the reader: bounded, type-checked, never a traceback -------------------------------------
def _file(tmp_path: Path, header: bytes, data: bytes = b"", name: str = "x.safetensors") -> Path:
    path = tmp_path / name
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


def _model_with_record(tmp_path: Path, key: str, text: str) -> Path:
    trainer = make_trainer("tiny")
    from minigpt_tui.engine.formats.portable import save_portable_model

    path = tmp_path / MODEL_FILE
    save_portable_model(trainer.model, trainer.tokenizer, path)
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    header["__metadata__"][key] = text
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + raw[8 + n :])
    return path


HOSTILE_HEADERS = {
    "nested 1000 deep": b'{"a":' + b"[" * 1000 + b"]" * 1000 + b"}",
    "integer of 5000 digits": b'{"a":{"dtype":"F32","shape":[' + b"1" * 5000 + b'],"data_offsets":[0,4]}}',
    "entry that is a string": b'{"a":"dtype F32"}',
    "zero elements, a dimension of 2**63": b'{"a":{"dtype":"F32","shape":[0,9223372036854775808],"data_offsets":[0,0]}}',
    "lone surrogate in a name": b'{"\\ud800":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    "duplicate names": b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    "leading whitespace": b' {"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
}


@pytest.mark.parametrize("case", sorted(HOSTILE_HEADERS))
def test_hostile_headers_are_named_violations(tmp_path, case):
    path = _file(tmp_path, HOSTILE_HEADERS[case], b"\0" * 4)
    before = snapshot(tmp_path)
    for call in (read_header, inspect_path, load_portable_model):
        with pytest.raises(InvalidSafetensors) as refused:
            call(path)
        assert "\n" not in str(refused.value)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "key, text",
    [
        ("parameters", "7"),
        ("identity", '"a string"'),
        ("model_config", "[" * 1000 + "]" * 1000),
        ("tokenizer", '{"identity": ' + "9" * 5000 + "}"),
        ("composition", '{"kind": "text-decoder", "encoder": "x"}'),
    ],
)
def test_hostile_metadata_records_give_one_line(tmp_path, key, text):
    path = _model_with_record(tmp_path, key, text)
    before = snapshot(tmp_path)
    inspect_path(path)  # header-only inspection shows what it can
    with pytest.raises(CheckpointError) as refused:
        load_portable_model(path)
    assert "\n" not in str(refused.value)
    assert snapshot(tmp_path) == before


def _fuzz_tool():
    spec = importlib.util.spec_from_file_location("fuzz_reader", ROOT / "tools" / "fuzz_reader.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_differential_fuzz_against_safe_open(tmp_path):
    """300 mutations of a real model file (seed 7): our reader refuses all that safe_open
    refuses, raises only its one-line errors, takes under a second per case, stays under a
    memory bound and leaves the folder unchanged (``tools/fuzz_reader.py --fuzz N`` runs more)."""
    fuzz = _fuzz_tool()
    before = fuzz.peak_memory_bytes()
    results = fuzz.run_fuzz(300, 7, tmp_path)
    problems = [f"case {r.index} ({r.mutation}): {r.problems}" for r in results if r.problems]
    assert not problems, problems[:5]
    assert fuzz.peak_memory_bytes() - before < 512 * 2**20
    assert sum(not r.safe_open_accepts for r in results) > 100  # the mutations reach the refusals
    assert sum(r.safe_open_accepts and r.ours_accepts for r in results) > 50  # and the accepted paths


# -- 5. no terminal escapes in human-readable output ------------------------------------------------
def test_escape_controls_shows_every_control_character():
    assert escape_controls(ESCAPES + "ok\x9b\x7f\udcff") == "\\x1b[2J\\x1b[H\\x1b]0;owned\\x07ok\\x9b\\x7f\\udcff"
    assert escape_controls("plain · text") == "plain · text"


def test_inspect_prints_hostile_names_escaped(tmp_path, capsys):
    import safetensors.torch

    path = tmp_path / f"weights{ESCAPES}.safetensors"
    safetensors.torch.save_file({f"w{ESCAPES}": torch.zeros(2)}, str(path), metadata={f"k{ESCAPES}": f"[bold]{ESCAPES}"})
    code, out, err = run_cli(capsys, "inspect", str(path))
    assert code == 0 and "\x1b" not in out and "\x07" not in out
    assert "w\\x1b[2J" in out and "[bold]" in out
    code, _, err = run_cli(capsys, "inspect", str(path), "--tensor", f"missing{ESCAPES}")
    assert code == 1 and "\x1b" not in err and "missing\\x1b[2J" in one_error_line(err)
    code, out, _ = run_cli(capsys, "inspect", str(path), "--json")
    assert json.loads(out)["entries"][0]["name"] == f"w{ESCAPES}"  # JSON keeps the exact name


# -- 6. pickles: shared references and deep nesting --------------------------------------------------
def _zip_pickle(path: Path, program: bytes) -> None:
    """A torch zip archive whose data.pkl is ``program``."""
    import io

    buffer = io.BytesIO()
    torch.save([1], buffer)
    source = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    with zipfile.ZipFile(path, "w") as archive:
        for info in source.infolist():
            data = source.read(info.filename)
            archive.writestr(info, program if info.filename.endswith("data.pkl") else data)


def test_pickle_walks_are_bounded_and_say_what_was_cut(tmp_path):
    shared = [torch.zeros(2)]
    for _ in range(40):
        shared = [shared, shared]
    torch.save(shared, tmp_path / "shared.pt")
    depth = 100_000
    _zip_pickle(tmp_path / "deep.pt", b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b".")
    before = snapshot(tmp_path)
    start = time.perf_counter()
    shared_view = inspect_path(tmp_path / "shared.pt")
    deep_view = inspect_path(tmp_path / "deep.pt")
    assert time.perf_counter() - start < 10
    assert len(shared_view.entries) == 1  # the one tensor, once
    records = shared_view.state.get(StateGroup.RECORDS)
    assert any("the same object as" in str(v) for v in records.values())
    cut = deep_view.state.get(StateGroup.RECORDS)["(not shown)"]
    assert any(f"deeper than {WALK_DEPTH}" in note for note in cut)
    assert snapshot(tmp_path) == before


# -- 7. inputs that are not regular files ------------------------------------------------------------
def test_fifos_devices_and_link_loops_are_refused_before_reading(tmp_path, checkpoint):
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop")
    for call, target in ((read_header, fifo), (load_portable_model, fifo), (inspect_path, fifo), (read_header, loop)):
        with pytest.raises(InputRefused, match="FIFO|link loop"):
            call(target)
    for source in (str(fifo), "/dev/zero", str(loop)):
        with pytest.raises(InputRefused):
            load_corpus(load_config("tiny", overrides={"corpus": {"source": source}}).corpus)
    manifest = checkpoint / MANIFEST
    manifest.unlink()
    os.mkfifo(manifest)
    with pytest.raises(InputRefused, match="FIFO"):
        load_checkpoint(checkpoint)


# -- 8. one writer per run; a checkpoint belongs to its run -------------------------------------------
def test_a_second_writer_is_refused_naming_the_holder(runs, capsys):
    run = RunDirectory(runs / "good")
    metrics = run.metrics_path.read_bytes() if run.metrics_path.exists() else b""
    with lock_run(run.path) as lock:
        lock.announce()
        with pytest.raises(RunLocked, match=f"process {os.getpid()}"):
            lock_run(run.path)
        code, _, err = run_cli(capsys, "--runs-dir", str(runs), "resume", "--checkpoint", "good:latest", "--until", "3")
        assert code == 1 and f"in use by process {os.getpid()}" in one_error_line(err)
    assert (run.metrics_path.read_bytes() if run.metrics_path.exists() else b"") == metrics
    with lock_run(run.path):  # released: taken again at once
        pass


def test_a_lock_left_by_a_dead_process_is_stale(runs):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (runs / "good" / ".lock").write_text(json.dumps({"pid": int(dead.stdout), "host": "h", "since": 0}))
    before = snapshot(runs)
    with lock_run(runs / "good") as lock:
        assert lock.held
    assert snapshot(runs) == before  # taking and releasing an unannounced lock writes nothing


def test_two_resumes_at_once_one_is_refused(runs, tmp_path):
    env = cli_env(tmp_path)
    env["MINIGPT_TUI_RUNS_DIR"] = str(runs)
    command = cli_command("resume", "--checkpoint", "good:latest", "--json")
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in (first, second)]
    assert sorted(code for code, _, _ in results) == [0, 1], results
    refusal = one_error_line(next(err for code, _, err in results if code == 1))
    # Overlapping, the second is refused naming the first; after it, nothing is left to resume.
    assert "is in use by process" in refusal or "completed its schedule" in refusal
    records = RunDirectory(runs / "good").metrics()
    steps = [r["step"] for r in records if r["kind"] == "update"]
    assert steps == [3, 4] and [r["kind"] for r in records].count("resume") == 1


def test_a_checkpoint_copied_into_another_run_is_refused_unless_forked(runs, checkpoint):
    config = load_config("tiny")
    other = RunDirectory.create(runs, "other", "tiny", {"config.json": config.to_dict()})
    copied = other.checkpoints / checkpoint.name
    shutil.copytree(checkpoint, copied)
    before = snapshot(runs)
    with pytest.raises(ResumeRefused, match="saved by another run.*--fork"):
        prepare(ResumeRun(copied, runs))
    assert snapshot(runs) == before
    forked = prepare(ResumeRun(copied, runs, fork=True))
    forked.release()
    new = forked.run.name.startswith("resumed-tiny-") and forked.run.path.parent == runs
    assert new and forked.run.path != other.path and forked.run.run_id != other.run_id
    same = prepare(ResumeRun(checkpoint, runs))
    same.release()
    assert same.run.path == runs / "good"


@pytest.mark.parametrize("field, value", [("best_step", "x"), ("saved_at", "never"), ("reason", 5),
                                          ("model_identity", "abc"), ("step", True)])
def test_manifest_fields_are_type_checked(checkpoint, field, value):
    manifest = json.loads((checkpoint / MANIFEST).read_text())
    manifest[field] = value
    (checkpoint / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="manifest"):
        read_manifest(checkpoint)


def test_a_hidden_work_folder_never_loads(checkpoint, capsys, runs):
    hidden = checkpoint.parent / ".step-000002.partial-1-abcdef12"
    shutil.copytree(checkpoint, hidden)
    before = snapshot(runs)
    with pytest.raises(CheckpointError, match="hidden work folder"):
        load_checkpoint(hidden)
    code, _, err = run_cli(capsys, "infer", "--model", str(hidden / MODEL_FILE), "--prompt", "a")
    assert code == 1 and "hidden work folder" in one_error_line(err)
    assert snapshot(runs) == before


# -- 9. write failures: one line, no half-made run folder --------------------------------------------
def test_a_run_folder_is_made_whole_or_not_at_all(tmp_path):
    runs = tmp_path / "runs"

    class Unwritable:
        def __repr__(self) -> str:  # json.dumps fails on this value while the folder is staged
            return "unwritable"

    with pytest.raises(TypeError):
        RunDirectory.create(runs, "half", "tiny", {"config.json": {"a": 1}, "identities.json": Unwritable()})
    assert list(runs.iterdir()) == []
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(WriteRefused, match="cannot create the runs directory"):
        RunDirectory.create(blocked / "runs", None, "tiny")


def test_metrics_that_cannot_be_written_stop_the_run_and_save(tmp_path):
    from minigpt_tui.engine.session.events import Refused, Saved
    from minigpt_tui.engine.session.plans import PreparedRun
    from minigpt_tui.engine.session.training import TrainingSession

    config = load_config("tiny")
    run = RunDirectory.create(tmp_path / "runs", "r", "tiny", {"config.json": config.to_dict()})
    run.metrics_path.mkdir()  # appending to it fails
    events: list = []
    session = TrainingSession(lambda: PreparedRun(make_trainer("tiny"), run, Checkpointer(run)), events.append)
    finished = session.run()
    assert finished.step == 1 and isinstance(session.write_failure, WriteRefused)
    refusals = [e for e in events if isinstance(e, Refused)]
    assert [r.action for r in refusals] == ["metrics"] and "metrics.jsonl" in refusals[0].message
    assert [(e.step, e.reason) for e in events if isinstance(e, Saved)] == [(1, "stop")]
    assert [p.name for p in run.checkpoints.iterdir()] == ["step-000001"]


def test_a_deleted_run_folder_is_never_recreated_by_a_save(tmp_path):
    config = load_config("tiny")
    run = RunDirectory.create(tmp_path / "runs", "gone", "tiny", {"config.json": config.to_dict()})
    checkpointer = Checkpointer(run)
    shutil.rmtree(run.path)
    with pytest.raises(CheckpointError, match="no longer exists"):
        checkpointer.save(make_trainer("tiny", updates=1), "manual")
    assert not run.path.exists()


def test_a_file_size_limit_gives_one_line_and_no_run_folder(tmp_path):
    def limit() -> None:
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))

    done = subprocess.run(cli_command("train", "--preset", "tiny", "--run", "big"), env=cli_env(tmp_path),
                          capture_output=True, text=True, preexec_fn=limit, timeout=300)
    assert done.returncode == 1
    assert "File too large" in one_error_line(done.stderr)
    runs = tmp_path / "runs"
    assert not runs.exists() or list(runs.iterdir()) == []  # no run folder, not even a hidden one


# -- 10. command-line values are validated where they enter ---------------------------------------------
@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--preset", "tiny", "--steps", "99999999999999999999", "--until", "1"], "train.steps"),
        (["train", "--preset", "tiny", "--config", "{toml_inf}"], "finite"),
        (["train", "--preset", "tiny", "--config", "{toml_wide}"], "model.width"),
        (["train", "--preset", "tiny", "--runs-dir", "/dev/null"], "not a folder"),
        (["verify", "--keep", "{a_file}"], "not a folder"),
        (["resume", "--checkpoint", "good:²"], "not latest, best or a step"),
        (["resume", "--checkpoint", "x" * 5000], "5000 characters"),
        (["inspect", "good:latest", "--tensor", "constants", "--bins", "1000000000"], "bins must be between"),
        (["generate", "--model", "good:latest", "--prompt", "\udcff"], "not valid UTF-8"),
        (["infer", "--model", "good:latest", "--prompt", "\udcff"], "not valid UTF-8"),
    ],
)
def test_bad_values_give_one_line_and_leave_no_run_folder(runs, tmp_path, capsys, args, message):
    (tmp_path / "inf.toml").write_text("[train]\nlr = inf\n")
    (tmp_path / "wide.toml").write_text("[model]\nwidth = 1000000000\n")
    (tmp_path / "a_file").write_text("")
    names = {"{toml_inf}": str(tmp_path / "inf.toml"), "{toml_wide}": str(tmp_path / "wide.toml"),
             "{a_file}": str(tmp_path / "a_file")}
    args = [names.get(a, a) for a in args]
    before = snapshot(runs)
    code, _, err = run_cli(capsys, "--runs-dir", str(runs), *args)
    assert code == 1 and message in one_error_line(err)
    assert snapshot(runs) == before


# -- 11. a run folder inspects and verifies as its latest checkpoint ----------------------------------
def test_inspect_a_run_folder_with_verify(runs, capsys):
    code, out, err = run_cli(capsys, "inspect", str(runs / "good"), "--verify", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["verified"]["ok"] and result["verified"]["step"] == 2
    assert result["path"].endswith("step-000002")


def test_app_notifications_show_control_characters_escaped(tmp_path):
    from tests.app_support import make_app, run_async

    @run_async
    async def scenario() -> None:
        app = make_app(tmp_path / "runs")
        async with app.run_test(size=(80, 24)) as pilot:
            app.notify(f"bad name {ESCAPES}[b]x[/b]", title=f"t{ESCAPES}")
            await pilot.pause()
            shown = list(app._notifications)[-1]
            assert "\x1b" not in shown.message and "\\x1b[2J" in shown.message
            assert "[b]x[/b]" in shown.message and not shown.markup
            assert "\x1b" not in shown.title

    scenario()


def test_a_file_larger_than_memory_is_refused_before_it_is_read(tmp_path):
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    elements = physical // 8 + 1  # one F64 tensor just larger than the machine's memory
    header = json.dumps({"big": {"dtype": "F64", "shape": [elements], "data_offsets": [0, elements * 8]}}).encode()
    path = tmp_path / "sparse.safetensors"
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header)
        fh.truncate(8 + len(header) + elements * 8)  # sparse: no disk blocks, any size
    read_header(path)  # the header is valid and covers the file exactly
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match="more than this machine's"):
        load_file(path)
    from minigpt_tui.engine.formats.inspect import tensor_statistics

    with pytest.raises(CheckpointError, match="more than this machine's"):
        tensor_statistics(path, "big")
    assert time.perf_counter() - start < 1.0
