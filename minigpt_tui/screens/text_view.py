"""The Text view: a scored text with each token coloured by its loss, or by the change
between the Generation screen's two models, and the selected token's alternatives beside.

The text was scored on the Generation screen's worker before this screen opens; it only lays
out the records (:class:`TextScoresView`). Escape goes back to the Generation screen.
"""

from __future__ import annotations

import math

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static

from minigpt_tui.engine.session.text_scores import TextScoresView
from minigpt_tui.screens.help_texts import TEXT_VIEW_HELP
from minigpt_tui.widgets.key_bar import KeyBar
from minigpt_tui.widgets.token_loss_view import (
    CHANGE_TEXT,
    TokenLossView,
    change_colour,
    change_legend,
    change_scale,
    loss_colour,
    loss_legend,
    summary_text,
    token_detail,
)

NO_SECOND_MODEL = "no second model: load one with m on the Generation screen, then score again (s)"


class TextViewScreen(Screen[None]):
    HELP = TEXT_VIEW_HELP
    HELP_TITLE = "Text view"
    AUTO_FOCUS = "#text-tokens"

    DEFAULT_CSS = """
    TextViewScreen #text-summary { height: auto; padding: 0 1; }
    TextViewScreen #text-legend { height: 1; padding: 0 1; }
    TextViewScreen #text-body { height: 1fr; }
    TextViewScreen #text-tokens {
        width: 1fr; border: round $primary 50%; border-title-color: $text; border-subtitle-color: $text-muted;
    }
    TextViewScreen #text-tokens:focus { border: round $primary; }
    TextViewScreen #token-side {
        width: 34; border: round $primary 50%; border-title-color: $text; padding: 0 1;
    }
    """

    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("d", "toggle_change", "Change"),
    ]

    def __init__(self, view: TextScoresView) -> None:
        super().__init__()
        self.view = view
        self.mode = "loss"  # or "change": B's loss minus A's
        self.high = math.log(view.vocab_size) if view.vocab_size > 1 else 1.0  # a uniform guess's loss

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="text-summary")
        yield Static(id="text-legend")
        with Horizontal(id="text-body"):
            yield TokenLossView(self.view.pieces, [t.position for t in self.view.tokens], id="text-tokens")
            with VerticalScroll(id="token-side") as side:
                side.border_title = "selected token"
                yield Static(id="token-detail")
        yield KeyBar()

    def on_mount(self) -> None:
        self.sub_title = f"Text view · {self.view.model_label}"
        tokens = self.query_one(TokenLossView)
        tokens.border_title = "text"
        tokens.border_subtitle = "← → ↑ ↓ move · d: change with B" if self.view.second_label else "← → ↑ ↓ move"
        self._paint()

    @property
    def cursor(self) -> int:
        return self.query_one(TokenLossView).cursor

    def _paint(self) -> None:
        view, tokens = self.view, self.query_one(TokenLossView)
        if self.mode == "change":
            changes = [t.change for t in view.compared]
            scale = change_scale(changes)
            tokens.paint([change_colour(c, scale) for c in changes], CHANGE_TEXT)
            self.query_one("#text-legend", Static).update(change_legend(scale))
            summary = summary_text(view.scored, view.second_label, view.second_mean_loss)
        else:
            tokens.paint([loss_colour(t.loss, self.high) for t in view.tokens])
            self.query_one("#text-legend", Static).update(loss_legend(self.high, view.vocab_size))
            summary = summary_text(view.scored)
        self.query_one("#text-summary", Static).update(summary)
        self._show_selected()

    def _show_selected(self) -> None:
        view, cursor = self.view, self.cursor
        compared = view.compared[cursor] if self.mode == "change" else None
        detail = token_detail(view.tokens[cursor], view.vocab_size, compared)
        self.query_one("#token-detail", Static).update(detail)
        self.query_one("#token-side").border_subtitle = f"{cursor + 1} of {len(view.tokens)}"

    @on(TokenLossView.Moved)
    def _moved(self) -> None:
        self._show_selected()

    def action_toggle_change(self) -> None:
        view = self.view
        if self.mode == "change":
            self.mode = "loss"
        elif view.second_label is None:
            self.notify(NO_SECOND_MODEL, title="change", severity="warning")
            return
        elif not view.can_compare:
            self.notify(view.compare_refused or "the two models' scores cannot be compared", title="compare refused",
                        severity="error")
            return
        else:
            self.mode = "change"
        self._paint()

    def action_close(self) -> None:
        self.dismiss(None)
