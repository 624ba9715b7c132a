"""Hostile and unlucky input, round three: a corpus folder's links that leave it, path names
too long for the system, error lines that would echo unbounded values."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_support import refused_in_one_line, run_cli_subprocess


def _text_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i}.txt").write_text(f"note {i}: the key is red. Answer: red.\n" * 4)
    return folder


def test_a_corpus_folder_link_that_leaves_the_folder_is_refused_unless_asked(tmp_path):
    folder = _text_folder(tmp_path)
    outside = tmp_path / "secret.txt"
    outside.write_text("the password is swordfish\n" * 10)
    (folder / "secret.txt").symlink_to(outside)
    line = refused_in_one_line(run_cli_subprocess(tmp_path, "train", "--preset", "mini", "--steps", "2",
                                                  "--corpus", str(folder), "--val-every", "0"))
    assert "secret.txt is a link to" in line and "outside the folder" in line and "--follow-links" in line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    followed = run_cli_subprocess(tmp_path, "train", "--preset", "mini", "--steps", "2", "--corpus", str(folder),
                                  "--val-every", "0", "--follow-links", "--until", "1", "--json")
    assert followed.returncode == 0, followed.stderr


def test_a_link_that_stays_inside_the_folder_is_read(tmp_path):
    folder = _text_folder(tmp_path)
    (folder / "again.txt").symlink_to(folder / "0.txt")
    done = run_cli_subprocess(tmp_path, "train", "--preset", "mini", "--steps", "2", "--corpus", str(folder),
                              "--val-every", "0", "--until", "1")
    assert done.returncode == 0, done.stderr


LONG = "a" * 300


@pytest.mark.parametrize("args", [
    ("train", "--preset", "tiny", "--corpus", f"/tmp/{LONG}"),
    ("convert", "--hf", f"/tmp/{LONG}", "--out", "OUT"),
    ("export", "--model", f"/tmp/{LONG}", "--out", "OUT"),
    ("cache", "--cache-dir", f"/tmp/{LONG}", "list"),
    ("attach", f"/tmp/{LONG}"),
    ("inspect", f"/tmp/{LONG}"),
])
def test_a_path_name_too_long_is_one_line_naming_it_shortened(tmp_path, args):
    args = tuple(str(tmp_path / "out") if a == "OUT" else a for a in args)
    line = refused_in_one_line(run_cli_subprocess(tmp_path, *args))
    assert len(line) <= 650 and "aaa" in line


def test_an_error_never_echoes_an_unbounded_value(tmp_path):
    config = tmp_path / "big.toml"
    config.write_text('[model]\nfamily = "' + "x" * 10_000_000 + '"\n')
    line = refused_in_one_line(run_cli_subprocess(tmp_path, "train", "--preset", "tiny", "--config", str(config)))
    assert len(line) <= 700 and "model.family" in line and "…" in line


def _weights_only_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "hf"
    folder.mkdir()
    from safetensors.numpy import save_file
    import numpy as np

    save_file({"transformer.wte.weight": np.zeros((4, 2), dtype=np.float32)}, str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize("config", ["deep", "huge-number", "fifo", "dev-zero"])
@pytest.mark.parametrize("command", ["convert", "inspect"])
def test_other_tools_json_is_read_bounded_and_never_blocks(tmp_path, config, command):
    import os

    folder = _weights_only_folder(tmp_path)
    target = folder / "config.json"
    if config == "deep":
        target.write_text("[" * 100_000 + "]" * 100_000)
    elif config == "huge-number":
        target.write_text('{"vocab_size": ' + "9" * 5000 + "}")
    elif config == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    args = (("convert", "--hf", str(folder), "--out", str(tmp_path / "out.safetensors")) if command == "convert"
            else ("inspect", str(folder)))
    done = run_cli_subprocess(tmp_path, *args)
    assert "Traceback" not in done.stderr
    if done.returncode == 0:  # inspect shows the folder with its unreadable config named
        assert command == "inspect"
    else:
        line = refused_in_one_line(done)
        assert "config.json" in line
    assert sorted(p.name for p in tmp_path.rglob("*") if p.name != "runs") == [n for n in before if n != "runs"]


def test_a_run_too_large_for_memory_is_refused_before_anything_is_allocated(tmp_path):
    config = tmp_path / "big-batch.toml"
    config.write_text("[train]\nbatch_size = 65536\n")
    line = refused_in_one_line(run_cli_subprocess(tmp_path, "train", "--preset", "mini", "--config", str(config)))
    assert "this run needs about" in line and "GB available" in line and "batch_size = " in line
    assert not (tmp_path / "runs").exists()


def test_too_many_processes_for_memory_are_refused_before_any_starts(tmp_path):
    import time

    started = time.monotonic()
    line = refused_in_one_line(run_cli_subprocess(tmp_path, "train", "--preset", "tiny", "--nproc", "4096"))
    assert time.monotonic() - started < 20  # no process was started
    assert "(4096 processes)" in line and "try --nproc" in line


def test_the_memory_estimate_reads_a_cgroup_limit(tmp_path, monkeypatch):
    from minigpt_tui.engine.core import memory

    root = tmp_path / "cgroup"
    (root / "box").mkdir(parents=True)
    (root / "box" / "memory.max").write_text("1000000000\n")
    (root / "box" / "memory.current").write_text("250000000\n")
    real_read = memory._read

    def fake_read(path):  # type: ignore[no-untyped-def]
        return "0::/box\n" if str(path) == "/proc/self/cgroup" else real_read(path)

    monkeypatch.setattr(memory, "_read", fake_read)
    assert memory._cgroup_room(root) == 750_000_000


def test_inspect_of_an_index_with_a_million_entries_is_bounded_and_linear(tmp_path):
    import json
    import time

    folder = _weights_only_folder(tmp_path)
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    weight_map = {f"layer.{i}.weight": f"model-{i % 50_000:05d}.safetensors" for i in range(1_000_000)}
    weight_map["transformer.wte.weight"] = "model.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    started = time.monotonic()
    done = run_cli_subprocess(tmp_path, "inspect", str(folder))
    seconds = time.monotonic() - started
    assert "Traceback" not in done.stderr and seconds < 100, (seconds, done.stderr[-400:])
    assert len(done.stdout.splitlines()) < 20_000  # a declared number of rows, not a million


def test_convert_counts_parameters_with_the_tokenizers_vocabulary_before_allocating():
    from minigpt_tui.engine.core.config import ModelConfig
    from minigpt_tui.engine.core.errors import CheckpointError
    from minigpt_tui.engine.formats.hf_import import require_room_for

    config = ModelConfig(family="llama", width=4096, heads=32, kv_heads=8, ffn=11008, layers=1, context=64)
    require_room_for(config, 258, 4, "small.hf")  # a few hundred million scalars at most: fits the limit
    with pytest.raises(CheckpointError, match=r"about [\d,]+ parameters with the tokenizer's 1,000,258 ids"):
        require_room_for(config, 1_000_258, 4, "big.hf")


def test_a_corpus_too_large_to_read_in_memory_is_refused_before_reading_it(tmp_path, monkeypatch):
    from minigpt_tui.engine.core import memory
    from minigpt_tui.engine.core.config import CorpusConfig
    from minigpt_tui.engine.training.corpus import load_corpus
    from minigpt_tui.engine.core.errors import ConfigError

    text = tmp_path / "book.txt"
    text.write_text("a line of the book\n" * 50_000)  # about 1 MB
    monkeypatch.setattr(memory, "available_memory", lambda: memory.Available(2_000_000, "cgroup limit"))
    with pytest.raises(ConfigError, match=r"reading the corpus .*book.txt needs about 8 MB of memory; 2 MB available \(cgroup limit\)"):
        load_corpus(CorpusConfig(source=str(text), val_every=10, mode="stream"))
    monkeypatch.setattr(memory, "available_memory", lambda: memory.Available(100_000_000, "machine"))
    assert load_corpus(CorpusConfig(source=str(text), val_every=10, mode="stream")).counts.records == 50_000
