"""End to end: the real ``minigpt-tui`` console script in a real terminal (tmux), driven
with send-keys and read with capture-pane, as a person would use it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import json
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.polling import last_update_step, wait_until

SCRIPT = Path(sys.executable).with_name("minigpt-tui")

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None,
    reason="tmux is not installed (.ci/run installs it); this test needs a real terminal",
)


class TmuxPane:
    def __init__(self, command: list[str], env: dict[str, str], size: tuple[int, int] = (100, 30)) -> None:
        self.name = f"minigpt-e2e-{uuid.uuid4().hex[:8]}"
        # A tmux server of its own: nobody else's sessions or kill-server reach it.
        self.tmux = ["tmux", "-L", self.name]
        exports = " ".join(f"{k}={v}" for k, v in env.items())
        # The pane stays open after the app exits, so the exit can be observed.
        shell = f"env {exports} {' '.join(command)}; echo APP-EXITED-$?; sleep 60"
        subprocess.run([*self.tmux, "new-session", "-d", "-s", self.name, "-x", str(size[0]), "-y", str(size[1]),
                        shell], check=True)

    def text(self) -> str:
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-t", self.name], capture_output=True, text=True).stdout

    def styled_text(self) -> str:
        """The pane with its colours (escape sequences): what shows which field is focused."""
        return subprocess.run([*self.tmux, "capture-pane", "-e", "-p", "-t", self.name],
                              capture_output=True, text=True).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", self.name, *keys], check=True)

    def wait_for(self, predicate: Callable[[str], bool], what: str, timeout: float = 60.0) -> str:
        """The pane's text once ``predicate`` holds for it."""
        def shown() -> str | None:
            text = self.text()
            return text if predicate(text) else None

        return wait_until(shown, timeout=timeout, what=what, interval=0.1,
                          detail=lambda: f"the pane shows:\n{self.text()}")

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)


def test_the_real_app_trains_helps_and_quits_in_a_terminal(tmp_path):
    runs = tmp_path / "runs"
    pane = TmuxPane([str(SCRIPT), "--runs-dir", str(runs), "--preset", "tiny"], {"TERM": "xterm-256color"})
    try:
        screen = pane.wait_for(lambda t: "next run" in t, "the first frame")
        assert "minigpt-tui — Training" in screen and "preset tiny" in screen
        assert "space Start" in screen and "? Help" in screen and "q Quit" in screen

        pane.keys("Space")
        # The progress line and the event log refresh separately: wait for both.
        screen = pane.wait_for(lambda t: "4/4" in t and "finished at update 4" in t, "the tiny run to finish")
        assert "29 tensors" in screen and "1,572 parameters" in screen
        assert "finished at update 4" in screen
        run_dirs = [p for p in runs.iterdir() if p.is_dir()]
        assert len(run_dirs) == 1 and (run_dirs[0] / "metrics.jsonl").is_file()

        pane.keys("?")
        pane.wait_for(lambda t: "Help: Training" in t and "Keys" in t, "the help")
        pane.keys("Escape")
        pane.wait_for(lambda t: "Help: Training" not in t, "the help to close")

        pane.keys("v")  # at 100 columns the table and plot share the space: v switches
        pane.wait_for(lambda t: "v: table" in t, "the plot view")

        pane.keys("q")
        pane.wait_for(lambda t: "APP-EXITED-0" in t, "the app to exit cleanly")
    finally:
        pane.close()


def _progress(text: str, steps: int) -> int | None:
    found = re.search(rf"(\d+)/{steps}\b", text)
    return int(found.group(1)) if found else None


def _run_line(text: str, steps: int) -> tuple[str, int] | None:
    """The progress line's state and update count, e.g. ("paused", 382)."""
    found = re.search(rf"^ (\w+) .*?\b(\d+)/{steps}\b", text, re.MULTILINE)
    return (found.group(1), int(found.group(2))) if found else None


# Long enough that no pause, resume or stop can arrive after the run's end, however slow the
# machine (mini makes a few hundred updates a second: the preset's 600 last about two).
LONG_RUN = 100_000


FIELDS_BEFORE_UPDATES = 4  # preset, init from, name, corpus


def test_the_real_app_pauses_resumes_and_stops_a_run_in_a_terminal(tmp_path):
    runs = tmp_path / "runs"
    pane = TmuxPane([str(SCRIPT), "--runs-dir", str(runs), "--preset", "mini"], {"TERM": "xterm-256color"})
    try:
        pane.wait_for(lambda t: "next run" in t, "the first frame")
        pane.keys("n")
        pane.wait_for(lambda t: "escape cancels" in t, "the new-run form")
        # The form opens on its first field (the preset); tab one field at a time to the
        # updates field, and type only once it looks focused: keys typed ahead reach the
        # field focused when they arrive, and a tab's move can come after them. Its value is
        # selected on focus, so the typed count replaces it.
        updates_field = lambda: next(line for line in pane.styled_text().splitlines() if "updates" in line  # noqa: E731
                                     and "│" in line)
        unfocused = updates_field()
        for _ in range(FIELDS_BEFORE_UPDATES):
            before = pane.styled_text()
            pane.keys("Tab")
            wait_until(lambda before=before: pane.styled_text() != before, timeout=30, what="the focus to move")
        wait_until(lambda: updates_field() != unfocused, timeout=60, what="the updates field to look focused")
        assert updates_field() != unfocused, "the updates field never looked focused"
        pane.keys(str(LONG_RUN))
        pane.wait_for(lambda t: re.search(rf"updates +{LONG_RUN}\b", t) is not None, "the typed update count")
        pane.keys("Enter")
        pane.wait_for(lambda t: (_progress(t, LONG_RUN) or 0) >= 1, "the first update", timeout=120)
        pane.keys("Space")
        screen = pane.wait_for(lambda t: re.search(r"paused +after update \d+", t) is not None, "the pause")
        paused_at = int(re.search(r"paused +after update (\d+)", screen).group(1))
        # A pause saves unless the paused step is saved already (a best or interval save).
        saved_at_pause = lambda: any(runs.glob(f"*/checkpoints/step-{paused_at:06d}/manifest.json"))  # noqa: E731
        wait_until(saved_at_pause, timeout=30, what=f"a checkpoint at the paused step {paused_at}", interval=0.1)
        assert saved_at_pause(), f"no checkpoint at the paused step {paused_at}"
        pane.wait_for(lambda t: _run_line(t, LONG_RUN) == ("paused", paused_at), "the progress line to say paused")
        time.sleep(1.0)  # a paused run makes no update
        assert _run_line(pane.text(), LONG_RUN) == ("paused", paused_at)
        pane.keys("Space")
        # The progress line says the run goes on (the event log's "resumed" line may already
        # have been pushed out of its three visible lines by evaluations and saves).
        pane.wait_for(lambda t: (state := _run_line(t, LONG_RUN)) is not None and state[0] == "running"
                      and state[1] > paused_at, "an update after the resume")
        pane.keys("x")
        screen = pane.wait_for(lambda t: re.search(r"stopped +at update \d+", t) is not None, "the stop")
        stopped_at = int(re.search(r"stopped +at update (\d+)", screen).group(1))
        assert stopped_at > paused_at
        # The stop saves unless its step is saved already (an interval or best save); the
        # event log shows three lines at this size, so an evaluation at that step can push
        # the save out of sight: the disk says what was saved.
        run_dir = next(runs.iterdir())
        config = json.loads(run_dir.joinpath("config.json").read_text())
        assert config["train"]["steps"] == LONG_RUN  # the form's value was used
        checkpoints = sorted(p.name for p in run_dir.joinpath("checkpoints").iterdir())
        assert checkpoints[-1] == f"step-{stopped_at:06d}"
        # The pause's checkpoint stays until retention has kept as many newer ones (a loaded
        # machine may pass an interval save or two before the stop lands).
        keep_last = config["train"]["keep_last"]
        newer = [name for name in checkpoints if name > f"step-{paused_at:06d}"]
        assert f"step-{paused_at:06d}" in checkpoints or len(newer) >= keep_last, checkpoints
        pane.keys("q")
        pane.wait_for(lambda t: "APP-EXITED-0" in t, "the app to exit cleanly")
    finally:
        pane.close()


@pytest.mark.parametrize("leave", ["q", "SIGINT"])
def test_an_attached_app_that_quits_leaves_the_headless_run_training(tmp_path, leave):
    """A headless run, the real app attached to it in a terminal, then q (or SIGINT to the app):
    the app exits, the run goes on. x asks first, naming the run and its process; escape keeps it."""
    runs = tmp_path / "runs"
    env = {"MINIGPT_TUI_RUNS_DIR": str(runs), "MINIGPT_TUI_CACHE_DIR": str(tmp_path / "cache"),
           "TERM": "xterm-256color"}
    trainer = subprocess.Popen([str(SCRIPT), "train", "--preset", "mini", "--steps", "200000", "--run", "headless",
                                "--json"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**__import__("os").environ, **env})
    metrics = runs / "headless" / "metrics.jsonl"
    pane = None
    try:
        wait_until(lambda: last_update_step(metrics) >= 1, timeout=60, what="the headless run's first update", interval=0.1)
        pane = TmuxPane([str(SCRIPT), "attach", str(runs / "headless")], env)
        pane.wait_for(lambda t: "following" in t or "attached" in t, "the attached run")
        pane.keys("x")
        asked = pane.wait_for(lambda t: "Stop the run headless?" in t, "the stop question")
        assert f"process {trainer.pid}" in asked and "Quitting the app instead leaves it running" in asked
        pane.keys("Escape")
        pane.wait_for(lambda t: "Stop the run headless?" not in t, "the question to close")
        if leave == "q":
            pane.keys(leave)
        else:
            # The app's own process (the Python running the script), not the pane's shell.
            found = subprocess.run(["pgrep", "-f", f"^\\S*python\\S* {SCRIPT} attach {runs / 'headless'}"],
                                   capture_output=True, text=True).stdout.split()
            assert found, "the app's process was not found"
            for pid in found:
                __import__("os").kill(int(pid), __import__("signal").SIGINT)
        pane.wait_for(lambda t: "APP-EXITED-" in t, "the app to exit")
        at_exit = last_update_step(metrics)
        time.sleep(1.5)
        assert trainer.poll() is None, "the run stopped with the app"
        assert last_update_step(metrics) > at_exit, "the run no longer trains"
        control = runs / "headless" / "control.jsonl"
        assert not control.exists() or "stop" not in control.read_text()
    finally:
        if pane is not None:
            pane.close()
        trainer.kill()
        trainer.wait()
