"""The command line as a test runs it, and its one-line refusals.

In this process (fast, no new interpreter) it is ``conftest.run_cli``; ``run_cli_subprocess``
and the others here run a new ``python -m minigpt_tui`` with the test's own runs and cache
folders (``cli_env``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import cli_command, cli_env, run_cli

ERROR_PREFIX = "minigpt-tui: error: "


def run_cli_subprocess(tmp_path: Path, *args: str, timeout: float = 300,
                       env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``minigpt-tui ARGS`` in a new process, output captured as text."""
    return subprocess.run(cli_command(*args), capture_output=True, text=True, env=env or cli_env(tmp_path),
                          timeout=timeout)


def run_cli_wide(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """``run_cli_subprocess`` in a terminal 200 columns wide: rich tables do not wrap inside
    the phrases a test checks."""
    env = cli_env(tmp_path)
    env["COLUMNS"] = "200"
    return run_cli_subprocess(tmp_path, *args, env=env)


def run_cli_json(tmp_path: Path, *args: str, timeout: float = 300) -> Any:
    """``minigpt-tui ARGS --json`` in a new process that must succeed: its parsed output."""
    done = run_cli_subprocess(tmp_path, *args, "--json", timeout=timeout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def run_cli_json_in_process(capsys: Any, *args: str) -> Any:
    """``minigpt-tui ARGS --json`` in this process, which must succeed: its parsed output."""
    code, out, err = run_cli(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def one_error_line(err: str) -> str:
    """The one line a refusal writes to stderr (it must be one line, with the error prefix)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(ERROR_PREFIX), err
    return lines[0]


def refused_in_one_line(done: subprocess.CompletedProcess) -> str:
    """A finished process that exited 1 with one error line and no traceback: that line."""
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    return one_error_line(done.stderr)
