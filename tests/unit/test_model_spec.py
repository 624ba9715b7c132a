"""A model spec is parsed once: its kind, its path, its run and checkpoint, its refusals."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.session.model_spec import ModelSpec, SpecKind, foreign_spec, parse
from minigpt_tui.engine.session.opening import is_foreign_model, open_model, peek_model
from minigpt_tui.engine.session.runs import checkpoint_target, resolve_checkpoint, resolve_model_file

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-format1" / "step-000002"
LONG = "x" * 5000
LONG_MESSAGE = f"the checkpoint '{'x' * 40}…' is 5000 characters long: not a path or RUN:WHICH"


@pytest.fixture
def demo_runs(tmp_path: Path) -> Path:
    """A runs directory with run 'demo', whose one checkpoint is at step 2."""
    root = tmp_path / "runs"
    shutil.copytree(FIXTURE, root / "demo" / "checkpoints" / "step-000002")
    (root / "demo" / "config.json").write_text("{}")
    return root


def _transformers_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"")
    return path


def _empty_file(path: Path) -> Path:
    path.write_bytes(b"")
    return path


# -- every kind --------------------------------------------------------------------------------------
def test_an_existing_file_of_ours_is_a_model_file(demo_runs):
    model = demo_runs / "demo" / "checkpoints" / "step-000002" / "model.safetensors"
    spec = parse(str(model), demo_runs)
    assert (spec.kind, spec.path, spec.run, spec.which) == (SpecKind.MODEL_FILE, model, None, None)
    assert not spec.is_foreign


def test_checkpoint_and_run_folders_are_folders(demo_runs):
    for folder in (demo_runs / "demo", demo_runs / "demo" / "checkpoints" / "step-000002"):
        spec = parse(str(folder), demo_runs)
        assert (spec.kind, spec.path) == (SpecKind.FOLDER, folder)


@pytest.mark.parametrize("text, which, step", [
    ("demo", "latest", None), ("demo:", "latest", None), ("demo:latest", "latest", None),
    ("demo:best", "best", None), ("demo:7", "step", 7), ("demo:step-000007", "step", 7), ("demo:0", "step", 0),
])
def test_a_run_is_parsed_into_its_name_and_checkpoint(demo_runs, text, which, step):
    spec = parse(text, demo_runs)
    assert (spec.kind, spec.run, spec.which, spec.step) == (SpecKind.RUN, "demo", which, step)
    assert spec.path == demo_runs / "demo"


@pytest.mark.parametrize("name, kind", [
    ("hf", SpecKind.TRANSFORMERS), ("m.gguf", SpecKind.GGUF), ("M.GGUF", SpecKind.GGUF),
    ("ckpt.pt", SpecKind.NANOGPT), ("ckpt.pth", SpecKind.NANOGPT), ("ckpt.ckpt", SpecKind.NANOGPT),
])
def test_models_from_elsewhere_are_classified(tmp_path, demo_runs, name, kind):
    path = _transformers_folder(tmp_path / name) if kind is SpecKind.TRANSFORMERS else _empty_file(tmp_path / name)
    spec = parse(str(path), demo_runs)
    assert (spec.kind, spec.path, spec.is_foreign) == (kind, path, True)
    assert foreign_spec(str(path)) == spec
    assert is_foreign_model(str(path)) and is_foreign_model(spec)


def test_a_folder_named_like_a_file_from_elsewhere_is_a_folder(tmp_path, demo_runs):
    (tmp_path / "odd.gguf").mkdir()
    (tmp_path / "odd.pt").mkdir()
    assert parse(str(tmp_path / "odd.gguf"), demo_runs).kind is SpecKind.FOLDER
    assert parse(str(tmp_path / "odd.pt"), demo_runs).kind is SpecKind.FOLDER


# -- edge cases ---------------------------------------------------------------------------------------
def test_a_run_named_like_a_file_is_a_run_until_such_a_file_exists(tmp_path, demo_runs, monkeypatch):
    (demo_runs / "model.gguf").mkdir()
    (demo_runs / "model.gguf" / "config.json").write_text("{}")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    spec = parse("model.gguf:best", demo_runs)
    assert (spec.kind, spec.run, spec.which) == (SpecKind.RUN, "model.gguf", "best")
    _empty_file(work / "model.gguf")
    assert parse("model.gguf", demo_runs).kind is SpecKind.GGUF  # an existing path wins over a run


def test_a_folder_named_like_a_run_is_the_folder(tmp_path, demo_runs, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").mkdir()
    spec = parse("demo", demo_runs)
    assert (spec.kind, spec.path, spec.run) == (SpecKind.FOLDER, Path("demo"), None)


@pytest.mark.parametrize("junk", ["²", "newest", "-1", "1e3", "9" * 19, "step-", "3:4"])
def test_a_run_with_junk_after_the_colon_is_refused_in_one_line(demo_runs, junk):
    with pytest.raises(CheckpointError) as caught:
        parse(f"demo:{junk}", demo_runs)
    assert str(caught.value) == f"'{junk}' is not latest, best or a step number (in 'demo:{junk}')"


def test_a_missing_run_is_named_before_its_junk(demo_runs):
    with pytest.raises(CheckpointError) as caught:
        parse("ghost:²", demo_runs)
    assert str(caught.value) == f"no checkpoint 'ghost:²': no such path, and no run named 'ghost' in {demo_runs}"


def test_a_spec_longer_than_the_limit_is_one_line_everywhere(demo_runs):
    for call in (lambda: parse(LONG, demo_runs), lambda: resolve_checkpoint(LONG, demo_runs),
                 lambda: resolve_model_file(LONG, demo_runs), lambda: checkpoint_target(LONG, demo_runs),
                 lambda: open_model(LONG, demo_runs)):
        with pytest.raises(CheckpointError) as caught:
            call()
        assert str(caught.value) == LONG_MESSAGE
    assert foreign_spec(LONG) is None and not is_foreign_model(LONG) and peek_model(LONG) is None


def test_a_spec_at_the_limit_is_looked_up(demo_runs):
    text = "a" * 4096
    with pytest.raises(CheckpointError, match="no such path, and no run named"):
        parse(text, demo_runs)


def test_a_home_path_is_expanded_and_quoted_as_typed(tmp_path, demo_runs, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    model = _empty_file(tmp_path / "m.gguf")
    spec = parse("~/m.gguf", demo_runs)
    assert (spec.kind, spec.path, spec.text, str(spec)) == (SpecKind.GGUF, model, "~/m.gguf", "~/m.gguf")


def test_an_unknown_users_home_is_a_missing_path_not_a_traceback(demo_runs):
    text = "~no-such-user-here-at-all/m.safetensors"
    with pytest.raises(CheckpointError) as caught:
        parse(text, demo_runs)
    assert str(caught.value) == f"no checkpoint '{text}': no such path, and no run named '{text}' in {demo_runs}"


def test_a_missing_path_is_refused_naming_it(tmp_path, demo_runs):
    text = str(tmp_path / "nowhere" / "model.safetensors")
    with pytest.raises(CheckpointError) as caught:
        parse(text, demo_runs)
    assert str(caught.value) == f"no checkpoint '{text}': no such path, and no run named '{text}' in {demo_runs}"
    assert foreign_spec(text) is None


def test_a_broken_link_is_a_path_whose_problem_is_named(tmp_path, demo_runs):
    link = tmp_path / "gone.gguf"
    link.symlink_to(tmp_path / "absent")
    spec = parse(str(link), demo_runs)
    assert spec.kind is SpecKind.MODEL_FILE  # an entry exists, but no GGUF file
    with pytest.raises(CheckpointError, match="file not found"):
        resolve_model_file(spec)


def test_a_folder_that_is_both_opens_as_transformers_and_resolves_as_ours(demo_runs):
    both = demo_runs / "demo" / "checkpoints" / "step-000002"
    (both / "config.json").write_text("{}")  # with model.safetensors: a transformers folder too
    spec = parse(str(both), demo_runs)
    assert spec.kind is SpecKind.TRANSFORMERS
    assert resolve_checkpoint(spec) == both  # its manifest makes it a checkpoint of ours
    assert resolve_model_file(spec) == both / "model.safetensors"


def test_a_transformers_folder_is_no_checkpoint(tmp_path, demo_runs):
    folder = _transformers_folder(tmp_path / "hf")
    with pytest.raises(CheckpointError, match="is a transformers model folder, not a checkpoint"):
        resolve_checkpoint(parse(str(folder), demo_runs))


# -- what the later steps read ------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("demo", "step-000002"), ("demo:latest", "step-000002"), ("demo:2", "step-000002"),
    ("demo:step-000002", "step-000002"),
])
def test_a_parsed_spec_resolves_as_its_text_does(demo_runs, text, expected):
    checkpoint = demo_runs / "demo" / "checkpoints" / expected
    spec = parse(text, demo_runs)
    assert resolve_checkpoint(spec) == resolve_checkpoint(text, demo_runs) == checkpoint
    assert resolve_model_file(spec) == resolve_model_file(text, demo_runs) == checkpoint / "model.safetensors"
    assert checkpoint_target(spec) == checkpoint_target(text, demo_runs) == checkpoint


def test_a_step_the_run_does_not_hold_is_refused_when_resolved(demo_runs):
    spec = parse("demo:3", demo_runs)  # well formed: parsing accepts it
    with pytest.raises(CheckpointError) as caught:
        resolve_checkpoint(spec)
    assert str(caught.value) == "run 'demo' has no complete checkpoint at step 3 (its checkpoints: 2)"


def test_an_existing_path_is_its_own_inspection_target(demo_runs):
    model = demo_runs / "demo" / "checkpoints" / "step-000002" / "model.safetensors"
    assert checkpoint_target(parse(str(model), demo_runs)) == model


def test_a_spec_is_a_frozen_record():
    spec = ModelSpec("demo", SpecKind.RUN, Path("demo_runs/demo"), "demo", "latest")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.kind = SpecKind.FOLDER  # type: ignore[misc]


def test_text_needs_a_runs_directory():
    with pytest.raises(TypeError):
        resolve_checkpoint("demo")
