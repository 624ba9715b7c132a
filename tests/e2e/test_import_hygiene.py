"""Import contracts that can fail: the engine never imports the UI (textual, rich, plotext,
or our app, screens, widgets and messages), and the UI modules and the session layer import
without torch, so the app's first frame never waits for it.

Each check imports the modules in a fresh interpreter and lists ``sys.modules``; the
checker itself is tested against modules that do break the contract."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import minigpt_tui.engine
import minigpt_tui.engine.session
import minigpt_tui.screens
import minigpt_tui.widgets

UI_PACKAGES = ("textual", "rich", "textual_plotext", "plotext")
UI_MODULES = ("minigpt_tui.app", "minigpt_tui.messages", "minigpt_tui.screens", "minigpt_tui.widgets")


def modules_under(package) -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + "."))


def loaded_after_importing(modules: list[str], forbidden_packages: tuple[str, ...],
                           forbidden_modules: tuple[str, ...] = ()) -> list[str]:
    """The forbidden modules in ``sys.modules`` after importing ``modules`` in a new process:
    a package matches by its top-level name, one of ours by its dotted prefix."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"packages, ours = {forbidden_packages!r}, {forbidden_modules!r}\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in packages\n"
        "       or any(m == o or m.startswith(o + '.') for o in ours)]\n"
        "print(json.dumps(sorted(bad)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_checker_catches_a_module_that_breaks_the_contract():
    assert "rich" in loaded_after_importing(["json", "rich.text"], UI_PACKAGES)
    assert "minigpt_tui.messages" in loaded_after_importing(["minigpt_tui.messages"], (), UI_MODULES)
    assert "torch" in loaded_after_importing(["minigpt_tui.engine.training.trainer"], ("torch",))
    assert loaded_after_importing(["json"], UI_PACKAGES, UI_MODULES) == []


def test_no_engine_module_imports_the_ui():
    modules = modules_under(minigpt_tui.engine)
    assert {"minigpt_tui.engine.training.trainer", "minigpt_tui.engine.session.training",
            "minigpt_tui.engine.training.state_parts", "minigpt_tui.engine.formats.foreign"} <= set(modules)
    assert loaded_after_importing(modules, UI_PACKAGES, UI_MODULES) == []


def test_every_screen_widget_and_session_module_imports_without_torch():
    modules = (["minigpt_tui.app", "minigpt_tui.messages"] + modules_under(minigpt_tui.screens)
               + modules_under(minigpt_tui.widgets) + modules_under(minigpt_tui.engine.session))
    assert {"minigpt_tui.screens.checkpoints", "minigpt_tui.widgets.candidate_table"} <= set(modules)
    assert loaded_after_importing(modules, ("torch",)) == []


def test_cli_help_does_not_import_torch():
    assert loaded_after_importing(["minigpt_tui.cli"], ("torch",)) == []
    code = "import sys\nfrom minigpt_tui.cli import build_parser\nbuild_parser()\nprint('torch' in sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# What the bare command's first frame imports: the command line, the app and the Training
# screen. None of these packages (or modules) is needed to draw it, and each one costs tens
# of milliseconds before the first frame.
NOT_FOR_THE_FIRST_FRAME = ("torch", "numpy", "jinja2", "tokenizers", "gguf")
MODULES_NOT_FOR_THE_FIRST_FRAME = ("rich.markdown", "minigpt_tui.commands.train", "minigpt_tui.engine.session.plans",
                                   "minigpt_tui.engine.session.generation", "minigpt_tui.engine.session.training",
                                   "minigpt_tui.engine.formats.hf_import")


def test_the_first_frame_imports_nothing_it_does_not_draw():
    from minigpt_tui.cli import opens_the_app

    assert opens_the_app(["--runs-dir", "r"]) and not opens_the_app(["train"])  # the bare command: no command modules
    assert loaded_after_importing(["minigpt_tui.cli", "minigpt_tui.app", "minigpt_tui.screens.training"],
                                  NOT_FOR_THE_FIRST_FRAME, MODULES_NOT_FOR_THE_FIRST_FRAME) == []
    assert "minigpt_tui.commands.train" in loaded_after_importing(["minigpt_tui.commands.train"], (),
                                                                  MODULES_NOT_FOR_THE_FIRST_FRAME)
