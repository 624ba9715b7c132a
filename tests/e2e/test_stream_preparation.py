"""Preparing a stream-mode run from the command line: progress on a terminal, Ctrl+C during
encoding leaves nothing behind, and a restart that finds the corpus in the source index
resumes exactly."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import signal
import subprocess

from rich.console import Console

from minigpt_tui.commands.train import _announcing, _progress
from minigpt_tui.engine.session.events import Preparing, RunStarted
from minigpt_tui.engine.training.token_cache import TokenCache
from tests.cli_support import run_cli_json
from tests.conftest import cli_command, cli_env
from tests.polling import wait_until

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Recorded:
    def __init__(self) -> None:
        self.events: list = []

    def __call__(self, event) -> None:
        self.events.append(event)


class Flag:
    preparing = True


def test_the_command_line_draws_preparation_then_training_on_a_terminal():
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=100)
    recorder, flag = Recorded(), Flag()
    with _progress(True, console) as progress:
        sink = _announcing(recorder, progress, None, flag)
        sink(Preparing("encoding train", 4096, 10000))
        sink(Preparing("encoding train", 10000, 10000))
        sink(Preparing("writing the token cache", 1, 3))
        assert flag.preparing
        sink(RunStarted({}, 0, 20))
        assert not flag.preparing  # from now on Ctrl+C finishes the update, then stops
    drawn = ANSI.sub("", screen.getvalue())
    assert "encoding train" in drawn and "writing the token cache" in drawn and "training" in drawn
    assert recorder.events == [RunStarted({}, 0, 20)]  # preparation is drawn, not recorded


def test_without_a_terminal_preparation_draws_nothing():
    screen = io.StringIO()
    with _progress(True, Console(file=screen, force_terminal=False)) as progress:
        progress.preparing("encoding train", 1, 2)
    assert screen.getvalue() == ""


def write_large_text(path, megabytes: int) -> None:
    paragraph = "the quick brown fox jumps over the lazy dog and keeps on running far away\n\n"
    path.write_text(paragraph * (megabytes * 1_000_000 // len(paragraph)), "utf-8")


def test_ctrl_c_while_encoding_stops_at_once_with_nothing_written(tmp_path):
    text = tmp_path / "large.txt"
    write_large_text(text, 40)  # encoding lasts long enough for the signal to land in it
    leader, follower = pty.openpty()  # stderr on a terminal: the progress shows what is being done
    process = subprocess.Popen(
        cli_command("train", "--preset", "text", "--corpus", str(text), "--run", "interrupted"),
        stdout=subprocess.DEVNULL, stderr=follower, env=cli_env(tmp_path))
    os.close(follower)
    seen = b""

    def encoding_or_ended() -> bool:
        nonlocal seen
        if b"encoding train" in seen or process.poll() is not None:
            return True
        if select.select([leader], [], [], 0.5)[0]:
            seen += os.read(leader, 65536)
        return False

    try:
        wait_until(encoding_or_ended, timeout=120, what="the progress to say encoding train (or the process to end)",
                   interval=0, detail=lambda: seen.decode(errors="replace"))
        assert b"encoding train" in seen, seen.decode(errors="replace")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    while select.select([leader], [], [], 0.2)[0]:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    lines = [line.strip() for line in ANSI.sub("", seen.decode(errors="replace")).splitlines()]
    assert "Traceback" not in "\n".join(lines)
    assert [line for line in lines if "minigpt-tui" in line] == ["minigpt-tui: interrupted"]
    assert not (tmp_path / "runs" / "interrupted").exists()
    cache = tmp_path / "token-cache"
    assert TokenCache(cache).entries() == []
    assert not cache.exists() or [p.name for p in cache.iterdir()] == []  # no partial entry, no index


def test_runs_that_find_the_corpus_in_the_index_resume_exactly(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("".join(f"paragraph {i} about the weather and the sea, {i * 7 % 13} gulls\n\n"
                            for i in range(600)), "utf-8")
    config = tmp_path / "stream.toml"
    config.write_text(f'[corpus]\nsource = "{text}"\nmode = "stream"\nval_every = 8\n'
                      "[tokenizer]\nmerges = 0\n[train]\nsteps = 30\neval_every = 10\neval_batches = 2\n"
                      "save_every = 0\n", "utf-8")
    straight = run_cli_json(tmp_path, "train", "--preset", "mini", "--config", str(config), "--run", "straight")
    index = tmp_path / "token-cache" / "sources"
    assert len(list(index.glob("*.json"))) == 1  # the next runs read no records
    saved = run_cli_json(tmp_path, "train", "--preset", "mini", "--config", str(config), "--until", "12", "--run", "a")
    resumed = run_cli_json(tmp_path, "resume", "--checkpoint", "a:latest")
    assert saved["corpus_identity"] == straight["corpus_identity"] == resumed["corpus_identity"]
    assert saved["updates"] == straight["updates"][:12]
    assert resumed["updates"] == straight["updates"][12:]
    for key in ("weights_digest", "optimizer_digest", "state_digest", "progress", "best_step"):
        assert resumed[key] == straight[key], key
