"""Where the generation stands, in two lines: decisions made of the budget (or why it
stopped), whether the output is valid UTF-8, the output text; then its bytes in hex."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual.widgets import Static

from minigpt_tui.engine.session.generation import StepperView

MAX_BYTES_SHOWN = 24


def output_lines(view: StepperView) -> Group:
    made = len(view.decisions)
    status = Text(no_wrap=True, overflow="ellipsis")
    if not view.finished:
        status.append(f"{made} of at most {view.budget} decisions", style="bold")
        status.append(" · n: one more · r: to the end", style="dim")
    else:
        status.append(f"stop: {view.stop_reason}", style="bold")
        status.append(f" after {made} decisions")
    if view.window_from is not None:  # the whole sentence is under the prefix
        status.append(f" · window from #{view.window_from}")
    status.append(" · UTF-8 ")
    status.append("valid" if view.output.valid_utf8 else "INVALID (shown with �)",
                  style="green" if view.output.valid_utf8 else "bold red")
    status.append(" · ")
    status.append(repr(view.output.display))
    data = view.output.generated_bytes
    raw = Text(no_wrap=True, overflow="ellipsis")
    raw.append(f"{len(data)} byte{'' if len(data) == 1 else 's'}", style="bold")
    if data:
        shown = " ".join(f"{b:02x}" for b in data[:MAX_BYTES_SHOWN])
        raw.append(f": {shown}{' …' if len(data) > MAX_BYTES_SHOWN else ''}", style="dim")
    return Group(status, raw)


class GenerationOutput(Static):
    def show_output(self, view: StepperView) -> None:
        self.update(output_lines(view))
