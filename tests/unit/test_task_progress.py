"""The analysis commands' progress bar: drawn on a terminal, silent when piped or asked for JSON."""

from io import StringIO

from rich.console import Console

from minigpt_tui.commands.task_progress import task_progress


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
