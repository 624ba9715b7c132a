import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _isolated_runs_dir(tmp_path, monkeypatch):
    """No test writes to the user's data directory."""
    monkeypatch.setenv("MINIGPT_TUI_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("MINIGPT_TUI_CACHE_DIR", str(tmp_path / "token-cache"))
    # A parallel worker is given COLUMNS=80 and LINES=24; output is tested as a pipe sees it.
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "minigpt_tui", *args]


def cli_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["MINIGPT_TUI_RUNS_DIR"] = str(tmp_path / "runs")
    env["MINIGPT_TUI_CACHE_DIR"] = str(tmp_path / "token-cache")
    env.pop("PYTHONHASHSEED", None)
    return env


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    """The command line in this process (fast: no new interpreter): exit code, stdout, stderr."""
    from minigpt_tui.cli import main

    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def patch_everywhere(monkeypatch, module, name: str, value) -> int:
    """Replace ``module.name`` and every binding of the same object that a module of the
    package took with ``from module import name``: a spy or a refusal then sees every call,
    whichever module makes it. Returns how many places were patched."""
    original = getattr(module, name)
    places = [m for m_name, m in list(sys.modules.items())
              if m_name.startswith("minigpt_tui") and m is not None and getattr(m, name, None) is original]
    for place in places:
        monkeypatch.setattr(place, name, value)
    return len(places)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Two tiny runs with their checkpoints (``app_support.build_saved_runs``), built once
    for a test module; a module may define a ``saved`` of its own instead."""
    from tests.app_support import build_saved_runs  # the app's test helpers, imported only where asked for

    return build_saved_runs(tmp_path_factory.mktemp("saved-runs"))


@pytest.fixture
def runs(saved, tmp_path):
    """A copy of ``saved`` of the test's own, which it may change."""
    return saved.copy_to(tmp_path)
