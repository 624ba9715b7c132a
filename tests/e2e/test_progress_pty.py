"""Long commands show progress on a terminal (a pseudo-terminal here) and print exactly what
they printed before when their output is piped."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

from tests.conftest import cli_command, cli_env

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny-format1" / "step-000002"
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
TRAIN = ("train", "--preset", "mini", "--steps", "60", "--save-every", "0", "--no-probes", "--no-watch")
PATCH = ("patch", "--model", str(FIXTURE), "--clean", "ab ab", "--corrupt", "ba ab", "--answer", "a",
         "--against", "b")
PROGRESS_WORDS = ("upd/s", "run/s", "update 50:", "opening", "patching")  # what only a bar or an evaluation line says


def on_terminal(args: tuple[str, ...], env: dict[str, str], timeout: float = 240.0) -> tuple[int, str]:
    """Run the command with stdout and stderr on a 100x30 pseudo-terminal: exit code and
    what was drawn, every redraw as its own line, without colours."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    process = subprocess.Popen(cli_command(*args), stdin=terminal, stdout=terminal, stderr=terminal,
                               env={**env, "TERM": "xterm-256color"})
    os.close(terminal)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 1.0)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                data = os.read(controller, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(controller)
    code = process.wait(timeout=30)
    text = ESCAPE.sub("", b"".join(chunks).decode("utf-8", "replace"))
    return code, "\n".join(line for line in re.split(r"[\r\n]+", text) if line.strip())


def piped(args: tuple[str, ...], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli_command(*args), capture_output=True, text=True, env=env, timeout=240)


def test_training_on_a_terminal_shows_updates_rate_time_left_loss_and_each_evaluation(tmp_path):
    code, drawn = on_terminal((*TRAIN, "--run", "shown"), cli_env(tmp_path))
    assert code == 0, drawn
    bars = [line for line in drawn.splitlines() if line.startswith("training")]
    assert any(re.search(r"\b\d+/60\b.*\d upd/s.*\d:\d\d:\d\d loss \d+\.\d{4}", line) for line in bars), drawn
    assert any("60/60" in line for line in bars)
    evaluation = [line for line in drawn.splitlines() if line.startswith("update 50:")]
    assert evaluation and re.fullmatch(r"update 50: train loss \d+\.\d{4}, val loss \d+\.\d{4}( \(best so far\))?",
                                       evaluation[0].strip()), drawn
    assert "state digest" in drawn  # the summary follows the bar


def test_training_piped_prints_the_summary_alone(tmp_path):
    done = piped((*TRAIN, "--run", "piped"), cli_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.lstrip().startswith("run ")
    assert "state digest" in done.stdout
    assert not [word for word in PROGRESS_WORDS if word in done.stdout]


def test_patch_on_a_terminal_shows_its_progress_and_piped_shows_none(tmp_path):
    env = cli_env(tmp_path)
    code, drawn = on_terminal(PATCH, env)
    assert code == 0, drawn
    assert "opening" in drawn
    assert re.search(r"patching .*\d+/\d+ .*run/s", drawn), drawn
    done = piped(PATCH, env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.startswith("logit difference 'a' − 'b': clean ")
    assert not [word for word in PROGRESS_WORDS if word in done.stdout]


def test_json_on_a_terminal_draws_no_progress(tmp_path):
    code, drawn = on_terminal((*PATCH, "--json"), cli_env(tmp_path))
    assert code == 0, drawn
    assert json.loads(drawn)["effects"]
