"""The token cache deletes only what it made: ``cache clear`` refuses a folder that holds
anything else (other people's folders, a runs directory), removing nothing; damaged and
interrupted entries are reclaimed file by file; two writers of one key give one entry; the
records it reads are bounded, regular files."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from minigpt_tui.engine.core.errors import CacheError
from minigpt_tui.engine.training.stream import TokenStream
from minigpt_tui.engine.training.token_cache import TAG_FILE, TokenCache, entry_key
from tests.cli_support import run_cli_subprocess
from tests.conftest import cli_env


def stream(seed: int = 0) -> TokenStream:
    rng = np.random.default_rng(seed)
    return TokenStream(rng.integers(0, 258, 5000, dtype=np.uint16), rng.integers(0, 258, 700, dtype=np.uint16))


def tree_bytes(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a folder)."""
    return {str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


def test_cache_clear_on_a_folder_of_other_things_refuses_and_removes_nothing(tmp_path):
    home = tmp_path / "home"
    (home / "projects").mkdir(parents=True)
    (home / "projects" / "thesis.tex").write_text("chapter one")
    (home / "photos").mkdir()
    (home / "photos" / "cat.jpg").write_bytes(b"\xff\xd8 not really")
    before = tree_bytes(home)
    done = run_cli_subprocess(tmp_path, "cache", "--cache-dir", str(home), "clear")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert "photos/" in lines[0] and "projects/" in lines[0] and "nothing was removed" in lines[0]
    assert tree_bytes(home) == before


def test_cache_clear_pointed_at_the_runs_folder_keeps_every_run(tmp_path):
    trained = run_cli_subprocess(tmp_path, "train", "--preset", "tiny", "--run", "precious", "--json")
    assert trained.returncode == 0, trained.stderr
    runs = tmp_path / "runs"
    before = tree_bytes(runs)
    env = {**cli_env(tmp_path), "MINIGPT_TUI_CACHE_DIR": str(runs)}
    done = run_cli_subprocess(tmp_path, "cache", "clear", env=env)
    assert done.returncode == 1 and "precious/" in done.stderr and "Traceback" not in done.stderr
    assert tree_bytes(runs) == before


def test_a_real_entry_beside_a_foreign_folder_is_kept_too(tmp_path):
    root = tmp_path / "cache"
    cache = TokenCache(root)
    cache.store("c" * 64, "t" * 64, "text.txt", stream())
    (root / "mine").mkdir()
    before = tree_bytes(root)
    with pytest.raises(CacheError, match="mine/"):
        cache.clear()
    assert tree_bytes(root) == before


def test_a_folder_named_like_an_entry_with_a_file_of_someone_elses_is_not_an_entry(tmp_path):
    root = tmp_path / "cache"
    cache = TokenCache(root)
    cache.store("c" * 64, "t" * 64, "text.txt", stream())
    imposter = root / ("0" * 32)
    imposter.mkdir()
    (imposter / "notes.txt").write_text("mine")
    with pytest.raises(CacheError, match="0" * 32):
        cache.clear()
    assert (imposter / "notes.txt").read_text() == "mine"


def test_clear_removes_entries_the_index_and_dead_partials_and_lists_them(tmp_path):
    root = tmp_path / "cache"
    cache = TokenCache(root)
    kept = cache.store("c" * 64, "t" * 64, "text.txt", stream())
    assert kept.tokens == 5700 and (root / TAG_FILE).read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    dead = subprocess.Popen(["true"])
    dead.wait()
    partial = root / f".partial-{entry_key('d' * 64, 't' * 64)}-{dead.pid}"
    partial.mkdir()
    (partial / "train.npy").write_bytes(b"x" * 1000)
    listed = json.loads(run_cli_subprocess(tmp_path, "cache", "--cache-dir", str(root), "list", "--json").stdout)
    assert listed["partials"] == [{"path": str(partial), "writer_alive": False, "bytes": 1000}]
    assert listed["bytes"] == sum(e["bytes"] for e in listed["entries"]) + 1000
    done = run_cli_subprocess(tmp_path, "cache", "--cache-dir", str(root), "clear")
    assert done.returncode == 0, done.stderr
    assert f"removed {entry_key('c' * 64, 't' * 64)}" in done.stdout and "text.txt" in done.stdout
    assert "an interrupted write" in done.stdout and "removed 1 entry," in done.stdout
    assert sorted(p.name for p in root.iterdir()) == [TAG_FILE]


def test_a_stale_partial_is_reclaimed_by_the_next_write_and_a_live_ones_is_not(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = root / f".partial-{'a' * 32}-{dead.pid}"
    live = root / f".partial-{'b' * 32}-{os.getpid()}"
    for folder in (stale, live):
        folder.mkdir()
        (folder / "validation.npy").write_bytes(b"y" * 10)
    TokenCache(root).store("c" * 64, "t" * 64, "text.txt", stream())
    assert not stale.exists() and live.is_dir()


def test_an_entry_record_that_is_a_device_or_a_fifo_is_rebuilt_without_hanging(tmp_path):
    root = tmp_path / "cache"
    cache = TokenCache(root)
    cache.store("c" * 64, "t" * 64, "text.txt", stream())
    folder = root / entry_key("c" * 64, "t" * 64)
    (folder / "entry.json").unlink()
    (folder / "entry.json").symlink_to("/dev/zero")
    assert cache.load("c" * 64, "t" * 64) is None  # refused at once, not read without end
    assert not (folder / "entry.json").is_symlink()
    cache.store("c" * 64, "t" * 64, "text.txt", stream())
    (folder / "entry.json").unlink()
    os.mkfifo(folder / "entry.json")
    (entry,) = cache.entries()  # listing does not block on the FIFO
    assert not entry.intact
    assert cache.load("c" * 64, "t" * 64) is None


def test_a_deeply_nested_entry_record_is_damage_not_a_crash(tmp_path):
    root = tmp_path / "cache"
    cache = TokenCache(root)
    cache.store("c" * 64, "t" * 64, "text.txt", stream())
    folder = root / entry_key("c" * 64, "t" * 64)
    (folder / "entry.json").write_text("[" * 100_000 + "]" * 100_000)
    assert cache.load("c" * 64, "t" * 64) is None
    assert not folder.exists()


def test_two_writers_of_one_key_give_one_entry_and_no_error(tmp_path):
    root = tmp_path / "cache"
    failures: list[BaseException] = []

    def write() -> None:
        try:
            for _ in range(20):
                got = TokenCache(root).store("c" * 64, "t" * 64, "text.txt", stream())
                assert got.tokens == 5700
        except BaseException as err:  # noqa: BLE001 - collected for the assertion below
            failures.append(err)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert [e.key for e in TokenCache(root).entries()] == [entry_key("c" * 64, "t" * 64)]


def _train_text(tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_cli_subprocess(tmp_path, "train", "--preset", "text", "--steps", "200", "--until", "1", "--json", env=env)


def test_an_unwritable_cache_means_training_without_one_and_one_warning(tmp_path):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache would be")
    done = _train_text(tmp_path, env={**cli_env(tmp_path), "MINIGPT_TUI_CACHE_DIR": str(blocked)})
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("minigpt-tui: warning:")]
    assert len(warnings) == 1 and "training without a cache" in warnings[0]
    assert json.loads(done.stdout)["step"] == 1 and blocked.read_text().startswith("a file")


def test_a_re_signed_entry_with_ids_outside_the_vocabulary_is_rebuilt_not_trusted(tmp_path):
    assert _train_text(tmp_path).returncode == 0
    cache = TokenCache(tmp_path / "token-cache")
    (entry,) = cache.entries()
    good = cache.load(entry.corpus_identity, entry.tokenizer_identity)
    assert good is not None
    bad = TokenStream(np.full_like(np.asarray(good.train), 60000), np.asarray(good.validation).copy())
    for name in ("entry.json", "train.npy", "validation.npy"):
        (entry.path / name).unlink()
    entry.path.rmdir()
    cache.store(entry.corpus_identity, entry.tokenizer_identity, entry.source, bad)  # hashes match the bad ids
    done = _train_text(tmp_path)
    assert done.returncode == 0, done.stderr
    rebuilt = cache.load(entry.corpus_identity, entry.tokenizer_identity)
    assert rebuilt is not None and int(np.asarray(rebuilt.train).max()) < 258
