"""The runs directory as one store (scan, resolve, rename, delete, saved tokenizer, shown
paths) and the shared reading of typed values into numbers and a run config."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file

from minigpt_tui.engine.core.config import SeedConfig, load_config
from minigpt_tui.engine.core.errors import CheckpointError, ConfigError, CorpusError, GenerationError
from minigpt_tui.engine.session.inputs import RunChoices, parse_number
from minigpt_tui.engine.session.plans import NewRun
from minigpt_tui.engine.session.run_store import RunStore
from minigpt_tui.engine.session.saved_tokenizer import read_saved_tokenizer
from minigpt_tui.engine.session.training import TrainingSession


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> RunStore:
    root = tmp_path_factory.mktemp("store") / "runs"
    TrainingSession(NewRun(load_config("tiny"), root, "kept", until=2), lambda e: None).run()
    return RunStore(root)


def test_scan_lists_runs_with_their_checkpoints_and_resolve_finds_them(store):
    (listing,) = store.scan()
    assert listing.name == "kept" and listing.preset == "tiny" and listing.disk_bytes > 0
    assert [c.step for c in listing.checkpoints] == [2] and listing.complete_checkpoints == 1
    assert store.resolve("kept:latest") == listing.checkpoints[0].path == store.resolve("kept:2")
    with pytest.raises(CheckpointError, match="no complete checkpoint at step 9"):
        store.resolve("kept:9")


def test_the_saved_tokenizer_is_the_one_the_run_trained(store):
    saved = read_saved_tokenizer(store.resolve("kept") / "model.safetensors")
    identities = (store.root / "kept" / "identities.json").read_text()
    assert saved.note == "" and saved.tokenizer.identity in identities


def test_a_path_inside_the_runs_directory_is_shown_relative_to_it(store):
    assert store.display(store.root / "kept" / "checkpoints") == "kept/checkpoints"
    assert store.display("/elsewhere/model.safetensors") == "/elsewhere/model.safetensors"


def test_rename_refuses_bad_or_taken_names_and_delete_only_takes_run_folders(tmp_path):
    root = tmp_path / "runs"
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        (root / name / "config.json").write_text("{}")
    store = RunStore(root)
    with pytest.raises(ConfigError, match="invalid run name"):
        store.rename(root / "a", "bad name!")
    with pytest.raises(ConfigError, match="already exists"):
        store.rename(root / "a", "b")
    assert store.rename(root / "a", "c") == root / "c" and (root / "c").is_dir() and not (root / "a").exists()
    (tmp_path / "loose").mkdir()
    with pytest.raises(ConfigError, match="not a run folder"):
        store.delete(tmp_path / "loose")
    (root / "b" / "config.json").unlink()
    with pytest.raises(ConfigError, match="not a run folder"):
        store.delete(root / "b")
    store.delete(root / "c")
    assert not (root / "c").exists() and (tmp_path / "loose").is_dir() and (root / "b").is_dir()


def test_delete_refuses_a_run_folder_holding_files_it_did_not_write(store, tmp_path):
    from minigpt_tui.engine.session.run_store import RunStoreError

    run = store.root / "kept"
    (run / "my-notes.txt").write_text("what I saw at step 2")
    (run / "checkpoints" / "favourite").mkdir()
    try:
        with pytest.raises(RunStoreError, match=r"my-notes.txt, checkpoints/favourite\).*nothing was deleted"):
            store.delete(run)
        assert (run / "my-notes.txt").is_file() and (run / "checkpoints" / "step-000002").is_dir()
    finally:
        (run / "my-notes.txt").unlink()
        (run / "checkpoints" / "favourite").rmdir()


@pytest.mark.parametrize(("text", "kind", "expected"), [("12", int, 12), ("10_000", int, 10000), (" 0.5 ", float, 0.5),
                                                         ("", int, None), (None, float, None)])
def test_numbers_read_the_same_everywhere(text, kind, expected):
    assert parse_number(text, "x", kind) == expected


def test_a_malformed_number_names_its_field_in_the_callers_error_family():
    with pytest.raises(ConfigError, match="^updates must be a whole number, got 'abc'$"):
        parse_number("abc", "updates", int)
    with pytest.raises(GenerationError, match="^--temperature must be a number, got 'warm'$"):
        parse_number("warm", "--temperature", float, error=GenerationError)


def test_run_choices_override_the_preset_and_derive_stream_seeds_from_one_seed():
    config = RunChoices("tiny", steps=3, save_every=1, precision="exact", seed=5).resolve()
    assert (config.train.steps, config.train.save_every) == (3, 1)
    assert config.seeds.init == SeedConfig.derive(5).init
    assert RunChoices("tiny").resolve() == load_config("tiny")
    with pytest.raises(ConfigError, match="^--seed must be an unsigned 64-bit integer$"):
        RunChoices("tiny", seed=-3, seed_label="--seed").resolve()
    with pytest.raises(ConfigError, match="not both"):
        RunChoices("tiny", seed=1, stream_seeds={"init": 2}).resolve()
    with pytest.raises(CorpusError, match="corpus not found"):
        RunChoices("tiny", corpus="/no/such/corpus.txt").resolve()


def test_a_generation_session_gives_typed_views_with_ranks_and_probabilities(store):
    import math

    from minigpt_tui.engine.session.generation import GenerationSession, parse_settings

    session = GenerationSession(store.root)
    session.load("kept")
    session.configure(parse_settings("ab", "greedy", "", "", "", "", "3"))
    session.step()
    view = session.view()
    (decision,) = view.decisions
    ranks = [c.rank for c in decision.candidates]
    assert ranks == sorted(ranks) and ranks[0] == 1 and decision.chosen.rank == 1
    logits = [c.logit for c in decision.candidates]
    assert logits == sorted(logits, reverse=True)
    # The raw probabilities are the softmax of the logits over the whole vocabulary.
    top, second = decision.candidates[0], decision.candidates[1]
    assert math.isclose(top.raw_probability / second.raw_probability, math.exp(top.logit - second.logit), rel_tol=1e-9)
    # Selection renormalizes over the eligible ids (BOS is never eligible): at least the raw share.
    assert decision.chosen.selection_probability >= decision.chosen.raw_probability
    assert all(c.selection_probability == 0.0 for c in decision.candidates if not c.eligible)
    assert view.generated[0].id == decision.chosen.id and not view.finished


def test_a_model_that_keeps_a_library_tokenizer_is_told_apart_from_one_without(tmp_path):
    library = tmp_path / "library.safetensors"
    save_file({"tokenizer.json": np.frombuffer(b'{"model": {}}', dtype=np.uint8).copy(),
               "w": np.zeros((2, 2), dtype=np.float32)}, str(library))
    bare = tmp_path / "bare.safetensors"
    save_file({"w": np.zeros((2, 2), dtype=np.float32)}, str(bare))
    with pytest.raises(CheckpointError) as kept:
        read_saved_tokenizer(library)
    assert "keeps its tokenizer as tokenizer.json" in str(kept.value)
    with pytest.raises(CheckpointError) as none:
        read_saved_tokenizer(bare)
    assert "holds no tokenizer" in str(none.value)
