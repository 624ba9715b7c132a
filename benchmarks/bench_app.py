"""The app in a real terminal (tmux), against named baselines.

1. Process start to first frame: ``minigpt-tui`` against a bare Textual app (a Header, one
   line of text and a Footer), both launched in a fresh tmux pane and polled with
   capture-pane until their first frame shows. ``python -c "import torch"`` is timed as
   a reference: the app's first frame must come before torch could have been imported.
2. Key press to screen change, the time from send-keys to the changed pane: ``t``/``c``
   switching between the Training and Checkpoints screens while idle and while a mini run
   trains, the overlay dialog (``o``, closed with ``escape``, which adds Textual's
   ESCDELAY) and the help (``?`` opens and closes it) while it trains, then the switch and
   the help again with both cores kept busy by two other processes (``while True: pass``).
   On the Generation screen (a SmolLM2-135M shape): a help toggle idle and while ``r``
   runs, and the head view's ``]`` / ``[`` at decision 8 with every head's role in the grid
   (``--only head-keys``; target 50 ms).
3. Training speed: records per second of ``minigpt-tui train`` (headless, with its progress
   bar) against the app training the same run, both measured from the growth of the run's
   ``metrics.jsonl`` between 10% and 90% of the schedule.

Where two sides are compared (1 and 3), they run in rounds whose order alternates, so
neither always runs first.

    .venv/bin/python benchmarks/bench_app.py [--updates 1500] [--repeats 2]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
APP = str(VENV_BIN / "minigpt-tui") if (VENV_BIN / "minigpt-tui").exists() else "minigpt-tui"
SIZE = (120, 40)
# A tmux server of our own: other sessions (and their kill-server) never touch it.
TMUX = ["tmux", "-L", "minigpt-tui-bench"]

BARE_APP = '''
from textual.app import App
from textual.widgets import Footer, Header, Static

class Bare(App):
    def compose(self):
        yield Header()
        yield Static("bare textual app ready")
        yield Footer()

Bare().run()
'''


class Pane:
    """One tmux session running one command."""

    def __init__(self, command: str, name: str) -> None:
        self.name = name
        width, height = SIZE
        subprocess.run([*TMUX, "kill-session", "-t", name], capture_output=True)
        self.started = time.perf_counter()
        subprocess.run([*TMUX, "new-session", "-d", "-s", name, "-x", str(width), "-y", str(height),
                        command + "; sleep 600"], check=True)

    def text(self) -> str:
        return subprocess.run([*TMUX, "capture-pane", "-p", "-t", self.name],
                              capture_output=True, text=True).stdout

    def keys(self, *keys: str) -> float:
        subprocess.run([*TMUX, "send-keys", "-t", self.name, *keys], check=True)
        return time.perf_counter()

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 30.0, poll: float = 0.005) -> float:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if predicate(self.text()):
                return time.perf_counter()
            time.sleep(poll)
        raise TimeoutError(f"{self.name}: condition not met in {timeout} s; pane:\n{self.text()}")

    def close(self) -> None:
        subprocess.run([*TMUX, "kill-session", "-t", self.name], capture_output=True)


def compile_bytecode() -> None:
    """Compile our modules as installing the wheel does: Textual's come compiled from pip,
    and an editable checkout run with PYTHONDONTWRITEBYTECODE would compile ours at every
    launch, which no installed user sees."""
    import minigpt_tui

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(minigpt_tui.__file__).parent)], check=True)


def first_frame(repeats: int, work: Path) -> None:
    bare, app, torch_import = first_frame_times(repeats, work)
    b, a, t = statistics.median(bare), statistics.median(app), statistics.median(torch_import)
    print(f"first frame: bare Textual app {b * 1000:.0f} ms, minigpt-tui {a * 1000:.0f} ms "
          f"(ratio {a / b:.2f}); python -c 'import torch' alone takes {t * 1000:.0f} ms")


def first_frame_times(repeats: int, work: Path) -> tuple[list[float], list[float], list[float]]:
    """Seconds to the first frame of the bare app and of minigpt-tui, one of each a round in
    alternating order, and of ``python -c "import torch"``."""
    compile_bytecode()
    bare_script = work / "bare_app.py"
    bare_script.write_text(BARE_APP)
    bare, app = [], []
    def bare_side() -> None:
        pane = Pane(f"{sys.executable} {bare_script}", "bench-bare")
        bare.append(pane.wait_for(lambda t: "bare textual app ready" in t) - pane.started)
        pane.close()

    def app_side() -> None:
        pane = Pane(f"{APP} --runs-dir {work / 'runs-first-frame'}", "bench-app")
        app.append(pane.wait_for(lambda t: "minigpt-tui — Training" in t and "next run" in t) - pane.started)
        pane.close()

    for i in range(repeats):
        for side in (bare_side, app_side) if i % 2 == 0 else (app_side, bare_side):
            side()
    torch_import = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        torch_import.append(time.perf_counter() - started)
    return bare, app, torch_import


def busy_loops(count: int) -> list[subprocess.Popen]:
    """``count`` processes that each keep a core busy until killed."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def run_dirs(runs: Path) -> list[Path]:
    return [p for p in runs.iterdir() if p.is_dir()] if runs.exists() else []


def metric_lines(runs: Path) -> int:
    for run in run_dirs(runs):
        path = run / "metrics.jsonl"
        if path.exists():
            with path.open("rb") as fh:
                return sum(1 for _ in fh)
    return 0


def growth_rate(runs: Path, total_lines: int, timeout: float) -> float:
    """Lines per second between 10% and 90% of ``total_lines``."""
    low, high = int(total_lines * 0.1), int(total_lines * 0.9)
    deadline = time.perf_counter() + timeout
    t_low = None
    while time.perf_counter() < deadline:
        lines = metric_lines(runs)
        now = time.perf_counter()
        if t_low is None and lines >= low:
            t_low, n_low = now, lines
        if t_low is not None and lines >= high:
            return (lines - n_low) / (now - t_low)
        time.sleep(0.02)
    raise TimeoutError(f"metrics did not reach {high} lines in {timeout} s")


def expected_lines(updates: int) -> int:
    # mini evaluates before the first update, every 50 updates and after the last.
    return updates + updates // 50 + 1 + (0 if updates % 50 == 0 else 1)


def start_app_run(pane: Pane, updates: int) -> None:
    pane.wait_for(lambda t: "next run" in t)
    pane.keys("n")
    pane.wait_for(lambda t: "New run" in t)
    time.sleep(0.5)  # the form focuses its first field once mounted
    pane.keys("Tab")  # corpus -> updates
    time.sleep(0.3)  # keys sent in one burst may reach the field before the focus moves
    pane.keys(str(updates))
    time.sleep(0.3)
    pane.keys("Enter")
    pane.wait_for(lambda t: "running" in t, timeout=60)


def training_speed(updates: int, repeats: int, work: Path) -> None:
    headless, app = [], []
    total = expected_lines(updates)
    def headless_side(i: int) -> None:
        runs = work / f"runs-headless-{i}"
        pane = Pane(f"{APP} train --preset mini --steps {updates} --runs-dir {runs}", "bench-headless")
        headless.append(growth_rate(runs, total, timeout=300))
        pane.close()

    def app_side(i: int) -> None:
        runs = work / f"runs-app-{i}"
        pane = Pane(f"{APP} --runs-dir {runs}", "bench-app")
        start_app_run(pane, updates)
        app.append(growth_rate(runs, total, timeout=300))
        pane.keys("x")
        pane.close()

    for i in range(repeats):
        for side in (headless_side, app_side) if i % 2 == 0 else (app_side, headless_side):
            side(i)
    h, a = max(headless), max(app)
    hm, am = statistics.median(headless), statistics.median(app)
    print(f"training speed (mini, {updates} updates, {repeats} alternating rounds): best headless {h:.1f} "
          f"records/s, best app {a:.1f}, ratio {a / h:.3f}; median ratio {am / hm:.3f} (target >= 0.85); "
          f"all headless {[round(x, 1) for x in headless]}, all app {[round(x, 1) for x in app]}")


def toggle_times(pane: Pane, repeats: int, open_key: str, opened_marker: str, close_key: str,
                 closed_marker: str) -> tuple[list[float], list[float]]:
    opened, closed = [], []
    for _ in range(repeats):
        sent = pane.keys(open_key)
        opened.append(pane.wait_for(lambda t: opened_marker in t) - sent)
        time.sleep(0.1)
        sent = pane.keys(close_key)
        try:
            closed.append(pane.wait_for(lambda t: closed_marker in t and opened_marker not in t, timeout=3) - sent)
        except TimeoutError:
            # The Checkpoints screen may have focused a text field, which takes the letter.
            print(f"  ({close_key!r} taken by a focused field on the other screen; escape, then {close_key!r})")
            pane.keys("Escape", close_key)
            pane.wait_for(lambda t: closed_marker in t and opened_marker not in t)
        time.sleep(0.1)
    return opened, closed


SCREEN_SWITCH = ("c", "minigpt-tui — Checkpoints", "t", "minigpt-tui — Training")
# A lone escape byte is held for ESCDELAY (Textual's default 100 ms) to tell the escape key
# from the start of an escape sequence: closing with escape includes that wait.
OVERLAY_DIALOG = ("o", "Overlay a run's curves", "Escape", "─ Events ─")
HELP_DIALOG = ("?", "Help: Training", "?", "─ Events ─")


def key_latency(repeats: int, work: Path) -> None:
    pane = Pane(f"{APP} --runs-dir {work / 'runs-keys'}", "bench-keys")
    try:
        pane.wait_for(lambda t: "next run" in t)
        time.sleep(2.0)  # torch has been imported in the background by now
        toggle_times(pane, 1, *SCREEN_SWITCH)  # the first visit builds the Checkpoints screen
        results = [("t/c screen switch, idle", toggle_times(pane, repeats, *SCREEN_SWITCH))]
        start_app_run(pane, 100_000)
        results.append(("t/c screen switch, training", toggle_times(pane, repeats, *SCREEN_SWITCH)))
        results.append(("overlay dialog (closed with escape: +ESCDELAY), training",
                        toggle_times(pane, repeats, *OVERLAY_DIALOG)))
        results.append(("help (opened and closed with ?), training", toggle_times(pane, repeats, *HELP_DIALOG)))
        loops = busy_loops(2)  # one busy loop per core, besides the run
        try:
            time.sleep(1.0)
            results.append(("t/c screen switch, training, both cores busy", toggle_times(pane, repeats,
                                                                                          *SCREEN_SWITCH)))
            results.append(("help, training, both cores busy", toggle_times(pane, repeats, *HELP_DIALOG)))
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()
        pane.keys("x")
    finally:
        pane.close()
    print(f"key to screen change, tmux 120x40 ({repeats} times each; target < 100 ms while training, "
          "< 150 ms with both cores busy):")
    for label, (opened, closed) in results:
        print(f"  {label}: there median {statistics.median(opened) * 1000:.0f} ms (max {max(opened) * 1000:.0f}), "
              f"back median {statistics.median(closed) * 1000:.0f} ms (max {max(closed) * 1000:.0f})")


GENERATION_HELP = ("?", "Help: Generation", "?", "─ Decisions ─")


def load_and_decide(pane: Pane, folder: Path, budget: str = "1500") -> None:
    """In a fresh app's pane: the Generation screen, ``folder`` loaded with a prompt, and one decision."""
    pane.wait_for(lambda t: "next run" in t)
    time.sleep(2.0)  # torch has been imported in the background by now
    pane.keys("g")
    pane.wait_for(lambda t: "minigpt-tui — Generation" in t)
    # The form: prompt, model, rule, then the budget (greedy leaves the sampling fields off).
    pane.keys("Tab")
    time.sleep(0.2)
    pane.keys("-l", "The capital of France is")
    pane.keys("Tab")
    time.sleep(0.2)
    pane.keys("-l", str(folder))
    pane.keys("Tab", "Tab")
    time.sleep(0.2)
    pane.keys("BSpace", "BSpace")
    pane.keys("-l", budget)
    pane.keys("Escape")
    time.sleep(0.3)
    pane.keys("n")
    pane.wait_for(lambda t: "No model loaded." not in t and "working…" not in t, timeout=300)
    time.sleep(0.5)


def head_key_times(repeats: int, work: Path, folder: Path, app: str = APP,
                   decisions: int = 8) -> tuple[list[float], list[float]]:
    """Key to screen in a real terminal for the head view's ``]`` (block 0 to 1) and ``[``
    (back), at decision ``decisions`` of ``folder``'s model, once every head's role score is
    in the grid: the seconds until the panel's border names the new block."""
    pane = Pane(f"{app} --runs-dir {work / 'runs-head-keys'}", "bench-head-keys")
    try:
        load_and_decide(pane, folder)
        for _ in range(decisions - 1):
            pane.keys("n")
            time.sleep(0.3)
            pane.wait_for(lambda t: "working…" not in t, timeout=120)
        pane.keys("h")
        pane.wait_for(lambda t: "b0  [" in t and "working…" not in t, timeout=300)  # the grid's scores
        time.sleep(0.5)
        marker = f"decision {decisions} · block"
        forward, back = toggle_times(pane, repeats, "]", f"{marker} 1 head 0", "[", f"{marker} 0 head 0")
    finally:
        pane.close()
    return forward, back


def head_keys(repeats: int, work: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_models import make_models

    folder = make_models(work / "models", names=("smollm2-135M",))["smollm2-135M"]
    forward, back = head_key_times(repeats, work, folder)
    print(f"head view keys at decision 8, SmolLM2-135M shape (30 blocks x 9 heads), tmux 120x40 ({repeats} times "
          f"each; target < 50 ms): ] median {statistics.median(forward) * 1000:.0f} ms (max {max(forward) * 1000:.0f}), "
          f"[ median {statistics.median(back) * 1000:.0f} ms (max {max(back) * 1000:.0f})")


def generation_keys(repeats: int, work: Path) -> None:
    """Key to screen on the Generation screen, idle and while ``r`` runs decisions of a
    SmolLM2-135M-shaped model (random weights, a transformers folder made here)."""
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_models import make_models

    folder = make_models(work / "models", names=("smollm2-135M",))["smollm2-135M"]
    pane = Pane(f"{APP} --runs-dir {work / 'runs-generation'}", "bench-generation")
    try:
        load_and_decide(pane, folder)
        results = [("help (opened and closed with ?), idle", toggle_times(pane, repeats, *GENERATION_HELP))]
        pane.keys("r")
        pane.wait_for(lambda t: "working…" in t)
        time.sleep(1.0)
        results.append(("help, r running decisions", toggle_times(pane, repeats, *GENERATION_HELP)))
        running = "working…" in pane.text()
        pane.keys("r")
    finally:
        pane.close()
    print(f"key to screen change on the Generation screen, SmolLM2-135M shape, tmux 120x40 ({repeats} times each; "
          f"target < 100 ms while a run goes on){'' if running else ' (the run ended before the last toggle)'}:")
    for label, (opened, closed) in results:
        print(f"  {label}: there median {statistics.median(opened) * 1000:.0f} ms (max {max(opened) * 1000:.0f}), "
              f"back median {statistics.median(closed) * 1000:.0f} ms (max {max(closed) * 1000:.0f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=1500)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--only", choices=["first-frame", "keys", "speed", "generation-keys", "head-keys"])
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        print("bench_app: tmux is not installed; these figures need a real terminal")
        return
    # A session that outlives the measured ones: closing the last session ends the tmux
    # server, and a session started at that moment fails ("server exited unexpectedly").
    keeper = Pane("sleep 3600", "bench-keeper")
    with tempfile.TemporaryDirectory(prefix="bench-app-") as tmp:
        work = Path(tmp)
        if args.only in (None, "first-frame"):
            first_frame(max(5, args.repeats), work)
        if args.only in (None, "keys"):
            key_latency(10, work)
        if args.only in (None, "generation-keys"):
            generation_keys(10, work)
        if args.only in (None, "head-keys"):
            head_keys(10, work)
        if args.only in (None, "speed"):
            training_speed(args.updates, args.repeats, work)
    keeper.close()
    subprocess.run([*TMUX, "kill-server"], capture_output=True)


if __name__ == "__main__":
    main()
