"""The README's commands run as written and show what the README says they show. Commands
that name the reader's own files (a book, a model folder, a GGUF they downloaded), open the
app or train for minutes are listed as such; every other line is run, in order, in one runs
folder, and the demo's claims are checked: generation copies the colour, and the patching
example's clean and corrupt prompts are at least 2 nats apart with a site restoring at least
0.8 of the difference."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from tests.conftest import ROOT, run_cli

COMMAND = ".venv/bin/minigpt-tui "
# Lines that need what only the reader has, open the app, or take minutes: not run here.
NOT_RUN = {
    "train --preset text --corpus my-book.txt": "the reader's own book; minutes of training",
    "attach demo": "opens the app",
    "generate --model path/to/gpt2-folder": "the reader's own model folder",
    "generate --model SmolLM2-135M-Q8_0.gguf": "a file the reader downloaded",
    "train --preset finetune --init-from path/to/gpt2-folder": "the reader's own model folder",
    "export --model RUN:best": "the reader's own fine-tuned run",
}


def readme_commands() -> list[list[str]]:
    """Each README command line, as its arguments (comments dropped), in the README's order."""
    lines = (ROOT / "README.md").read_text("utf-8").splitlines()
    commands = []
    for line in lines:
        if line.startswith(COMMAND):
            commands.append(shlex.split(line[len(COMMAND):], comments=True))
    return commands


def _skipped(args: list[str]) -> bool:
    text = " ".join(args)
    return any(text.startswith(prefix) for prefix in NOT_RUN)


def test_every_readme_command_is_run_or_named_as_not_run():
    commands = readme_commands()
    assert len(commands) >= 10
    assert sum(_skipped(c) for c in commands) == len(NOT_RUN)  # each exception matches one line


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIGPT_TUI_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("MINIGPT_TUI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-notes.txt").write_text("The key is red. Answer: red.\nThe box is green. Answer: green.\n")
    return tmp_path


def test_the_readme_commands_run_as_written_and_show_what_it_says(runs, capsys):
    outputs = {}
    for args in readme_commands():
        if _skipped(args):
            continue
        code, out, err = run_cli(capsys, *args)
        assert code == 0, f"{' '.join(args)}: {err}"
        outputs[args[0]] = out
    assert 'output: "green.' in outputs["generate"]  # the colour it never saw with the box, copied
    patch_args = next(args for args in readme_commands() if args[0] == "patch")
    code, out, err = run_cli(capsys, *patch_args, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["clean_difference"] - result["corrupt_difference"] >= 2.0
    assert max(effect["restored"] for effect in result["effects"]) >= 0.8
    gap = re.search(r"clean (-?[\d.]+), corrupt (-?[\d.]+)", outputs["patch"])
    assert gap and float(gap.group(1)) - float(gap.group(2)) >= 2.0
