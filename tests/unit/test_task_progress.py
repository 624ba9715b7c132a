"""The long commands' progress: drawn on a terminal, silent when piped or asked for JSON."""

from io import StringIO

from rich.console import Console

from minigpt_tui.commands.task_progress import (
    Throttle,
    evaluation_line,
    rate_text,
    stage_progress,
    task_progress,
)
from minigpt_tui.commands.train import _progress
from minigpt_tui.engine.session.events import EvaluationDone
from minigpt_tui.engine.training.trainer import EvaluationRecord


def _console(terminal: bool) -> tuple[Console, StringIO]:
    out = StringIO()
    return Console(file=out, force_terminal=terminal, width=100), out


def test_the_bar_counts_the_work_on_a_terminal():
    console, out = _console(terminal=True)
    with task_progress("patching", enabled=True, console=console) as advance:
        for done in range(1, 8):
            advance(done, 7)
    drawn = out.getvalue()
    assert "patching" in drawn
    assert "7/7" in drawn


def test_the_bar_is_silent_when_piped_or_disabled():
    for terminal, enabled in ((False, True), (True, False)):
        console, out = _console(terminal)
        with task_progress("patching", enabled=enabled, console=console) as advance:
            advance(1, 2)
            advance(2, 2)
        assert out.getvalue() == ""


def test_a_rate_reads_per_second_when_fast_and_seconds_each_when_slow():
    assert rate_text(40.24, "upd") == "40.2 upd/s"
    assert rate_text(1.0, "run") == "1.0 run/s"
    assert rate_text(0.25, "upd") == "4.0 s/upd"
    assert rate_text(None, "upd") == "– upd/s"
    assert rate_text(0.0, "window") == "– window/s"


def test_an_evaluation_line_reads_as_nanogpts():
    assert evaluation_line(200, 2.31, 2.4, best=False) == "update 200: train loss 2.3100, val loss 2.4000"
    assert evaluation_line(50, 3.0, 3.5, best=True) == "update 50: train loss 3.0000, val loss 3.5000 (best so far)"
    assert evaluation_line(4, 5.5, None, best=False) == "update 4: train loss 5.5000"


def test_the_throttle_lets_a_draw_through_a_few_times_a_second():
    now = [100.0]
    throttle = Throttle(0.25, clock=lambda: now[0])
    assert throttle()  # the first call draws
    assert not throttle()
    now[0] += 0.2
    assert not throttle()
    now[0] += 0.06
    assert throttle()


def test_the_bar_shows_a_rate_in_its_unit():
    console, out = _console(terminal=True)
    with task_progress("scoring", enabled=True, console=console, unit="window") as advance:
        advance(1, 4)
        advance(4, 4)
    assert "window/s" in out.getvalue()


def test_a_stage_line_names_the_stage_and_is_silent_when_piped():
    console, out = _console(terminal=True)
    with stage_progress("opening model [x]", enabled=True, console=console) as stage:
        stage("writing\x1b[31m out")
    drawn = out.getvalue()
    assert "opening model [x]" in drawn  # no markup read from a path
    assert "writing" in drawn and "\x1b[31m out" not in drawn  # control characters are escaped
    console, out = _console(terminal=False)
    with stage_progress("opening model", enabled=True, console=console) as stage:
        stage("writing")
    assert out.getvalue() == ""


def test_the_training_bar_shows_rate_loss_and_a_line_per_evaluation():
    console, out = _console(terminal=True)
    with _progress(True, console=console) as progress:
        progress.begin(0, 100)
        for step in range(1, 101):
            progress.advance(step, 5.0 - step / 100)
            if step == 50:
                progress.evaluated(EvaluationDone(EvaluationRecord(50, 2.31, 2.4, 10, 10), 50, True))
    drawn = out.getvalue()
    assert "update 50: train loss 2.3100, val loss 2.4000 (best so far)" in drawn
    assert "100/100" in drawn and "loss 4.0000" in drawn  # the last update is drawn whatever the throttle
    assert "upd/s" in drawn


def test_the_training_bar_is_silent_when_piped():
    console, out = _console(terminal=False)
    with _progress(True, console=console) as progress:
        progress.begin(0, 10)
        progress.advance(10, 1.0)
        progress.evaluated(EvaluationDone(EvaluationRecord(10, 1.0, None, 1, 0), None, False))
    assert out.getvalue() == ""
