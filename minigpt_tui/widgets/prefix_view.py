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
        forced = {len(view.prompt) + step - 1 for step in view.forced_steps}
        text = piece_chips(pieces, highlight_from=len(view.prompt), marked=forced)
        self.update(text)
        self.border_title = f"Prefix · {view.rule_label}"
        # How decisions are made (k switches): one new position over the key/value cache, or the whole prefix.
        self.border_subtitle = (f"{len(pieces)} of {view.context} ids: prompt {len(view.prompt)}"
                                f" + generated {len(view.generated)} · "
                                + ("kv cache" if view.cached else "whole prefix"))

    def show_message(self, message: str) -> None:
        self.update(Text(message, style="dim"))
        self.border_subtitle = ""
