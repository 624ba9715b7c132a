"""The engine never imports the UI; the UI's first frame never waits for torch."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import minigpt_tui.engine


def engine_modules() -> list[str]:
    return sorted(
        m.name for m in pkgutil.walk_packages(minigpt_tui.engine.__path__, "minigpt_tui.engine.")
    )


def test_engine_modules_never_import_textual():
    modules = engine_modules()
    assert "minigpt_tui.engine.trainer" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'textual_plotext', 'minigpt_tui.app'))\n"
        "bad += sorted(m for m in sys.modules if m.startswith(('minigpt_tui.screens', 'minigpt_tui.widgets')))\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_cli_help_does_not_import_torch():
    code = (
        "import sys\n"
        "from minigpt_tui.cli import build_parser\n"
        "build_parser()\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
