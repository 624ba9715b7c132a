"""The prefix the model sees next: prompt pieces, then generated pieces in bold, forced
choices reversed."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from minigpt_tui.engine.session.generation import StepperView
from minigpt_tui.widgets.pieces import piece_chips


class PrefixView(Static):
    DEFAULT_CSS = """
    PrefixView { height: auto; max-height: 6; padding: 0 1; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(Text("No model loaded.", style="dim"), **kwargs)
        self.border_title = "Prefix"

    def show_view(self, view: StepperView) -> None:
        pieces = [(p.id, p.text) for p in view.prompt + view.generated]
        # Past the context the next decision sees only the last `context` ids: those are shown.
        start = max(0, len(pieces) - view.context)
        forced = {len(view.prompt) + step - 1 - start for step in view.forced_steps}
        text = Text(f"… {start} ids before the window ", style="dim") if start else Text()
        text.append_text(piece_chips(pieces[start:], highlight_from=len(view.prompt) - start, marked=forced))
        self.update(text)
        self.border_title = f"Prefix · {view.rule_label}" + (" · u: sample" if view.rule_label == "greedy" else "")
        self.border_subtitle = _subtitle(view, len(pieces), start)

    def show_message(self, message: str) -> None:
        self.update(Text(message, style="dim"))
        self.border_subtitle = ""


def _subtitle(view: StepperView, length: int, start: int) -> str:
    """How many ids, and how decisions are made (k switches): one new position over the
    key/value cache, the whole prefix, or past the context a sliding window recomputed whole."""
    counts = f"prompt {len(view.prompt)} + generated {len(view.generated)}"
    if not start and view.window_from is None:
        return f"{length} of {view.context} ids: {counts} · " + ("kv cache" if view.cached else "whole prefix")
    return f"{view.window_note or 'sliding window next'} · last {view.context} of {length} ids: {counts}"
