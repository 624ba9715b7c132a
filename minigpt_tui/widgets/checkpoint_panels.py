"""The Checkpoints screen's right side: a summary of what is open, the tensor filter and the
panels (tensors, detail, aliases, state, metadata, integrity, tokenizer, compare), all
filled from one inspection; each panel with a worker runs it itself."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Input, Static, TabbedContent, TabPane, Tabs

from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.checkpoint_views import InspectionState
from minigpt_tui.engine.session.saved_tokenizer import tokenizer_source_of
from minigpt_tui.widgets.alias_panel import aliases_renderable
from minigpt_tui.widgets.checkpoint_summary import summary_text
from minigpt_tui.widgets.comparison_view import ComparisonView
from minigpt_tui.widgets.integrity_view import IntegrityView
from minigpt_tui.widgets.metadata_panel import metadata_text
from minigpt_tui.widgets.state_view import StateView
from minigpt_tui.widgets.tensor_detail import TensorDetail
from minigpt_tui.widgets.tensor_table import TensorTable
from minigpt_tui.widgets.text_fields import is_text_field
from minigpt_tui.widgets.tokenizer_panel import TokenizerPanel

NO_TOKENIZER = "No tokenizer here: neither a minigpt-tui model file nor a folder with tokenizer.json."


def nothing_open() -> Text:
    return Text("Choose a run or checkpoint on the left, or open a file with o.", style="dim")


class TensorFilter(Input):
    """The tensor filter's field: enter or down goes on to the table, whose highlighted row
    (the first match) the next enter opens."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("down", "submit", "To the table", show=False)]


class CheckpointPanels(Vertical):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.inspection: Any = None
        self._display: Callable[[Path], str] = str

    def compose(self) -> ComposeResult:
        # A sharded folder lists every shard: the summary scrolls once it is taller than its
        # box, and only then takes a place in the Tab order (the arrow keys scroll it).
        with VerticalScroll(id="ckpt-summary-box", can_focus=False):
            yield Static(nothing_open(), id="ckpt-summary")
        yield TensorFilter(placeholder="filter tensors by name, dtype, group or file", compact=True, id="tensor-filter")
        with TabbedContent(id="panels", initial="tensors"):
            with TabPane("Tensors", id="tensors"):
                yield TensorTable(id="tensor-table")
            with TabPane("Detail", id="detail"):
                yield TensorDetail(id="tensor-detail")
            with TabPane("Aliases", id="aliases"):
                with VerticalScroll(id="aliases-view"):
                    yield Static("", id="aliases-text")
            with TabPane("State", id="state"):
                yield StateView(id="state-view")
            with TabPane("Meta", id="metadata"):
                with VerticalScroll(id="metadata-view"):
                    yield Static("", id="metadata-text")
            with TabPane("Integrity", id="integrity"):
                yield IntegrityView(id="integrity-view")
            with TabPane("Tokenizer", id="tokenizer"):
                yield TokenizerPanel(id="tokenizer-panel")
            with TabPane("Compare", id="compare"):
                yield ComparisonView(id="compare-view")

    def show_inspection(self, inspection: Any, display: Callable[[Path], str], *, wide: bool,
                        note: str | None = None) -> None:
        """Fill every panel from ``inspection``; ``display`` shows a path, ``wide`` adds sizes
        to the summary, ``note`` a line under its first (why this is shown)."""
        self.inspection, self._display = inspection, display
        self._show_summary(summary_text(inspection, display, wide=wide, note=note))
        self.query_one(TensorTable).show_entries(inspection.entries)
        self.query_one(TensorDetail).clear_detail()
        self.query_one("#aliases-text", Static).update(aliases_renderable(inspection.aliases))
        self.query_one(StateView).show_state(inspection.state)
        self.query_one("#metadata-text", Static).update(metadata_text(inspection.metadata))
        self.query_one(IntegrityView).show_integrity(inspection.integrity, inspection.kind)
        self.query_one(ComparisonView).reset()
        source = tokenizer_source_of(inspection)
        if source is not None:
            self.query_one(TokenizerPanel).load(source)
        else:
            self.query_one(TokenizerPanel).show_unavailable(NO_TOKENIZER)

    def show_open_failure(self, reason: str) -> None:
        """Why a path did not open, in the summary, while nothing else is shown."""
        self._show_summary(Text(escape_controls(reason), style="red"))

    def clear_panels(self) -> None:
        """Back to nothing open; results of workers still running are dropped when they come."""
        self.inspection = None
        self._show_summary(nothing_open())
        self.query_one(TensorTable).show_entries(())
        self.query_one(TensorDetail).clear_detail()
        self.query_one("#aliases-text", Static).update(aliases_renderable(()))
        self.query_one(StateView).show_state(InspectionState())
        self.query_one("#metadata-text", Static).update("")
        self.query_one(IntegrityView).clear_integrity()
        self.query_one(ComparisonView).drop_pending()
        self.query_one(TokenizerPanel).show_unavailable("No model file open.")

    def _show_summary(self, text: Any) -> None:
        self.query_one("#ckpt-summary", Static).update(text)
        self.call_after_refresh(self.summary_fits)

    def summary_fits(self) -> None:
        """Let the summary take focus while it is taller than its box, and only then."""
        box = self.query_one("#ckpt-summary-box", VerticalScroll)
        box.can_focus = box.max_scroll_y > 0
        if not box.can_focus and box.has_focus:
            self.focus_active_panel(text_field=False)

    def on_resize(self) -> None:
        self.call_after_refresh(self.summary_fits)

    def show_tab(self, tab: str, waits: int = 10) -> None:
        """Show a panel; the keyboard, when it was in the panel hidden now, moves to it."""
        tabbed = self.query_one(TabbedContent)
        focused = self.screen.focused
        in_a_pane = focused is not None and any(isinstance(node, TabPane) for node in focused.ancestors)
        try:
            tabbed.active = tab
        except ValueError:
            # The tabs mount a moment after the screen: a key that came with it waits for them.
            if waits > 0:
                self.call_after_refresh(self.show_tab, tab, waits - 1)
            return
        if in_a_pane and tabbed.active_pane not in focused.ancestors:
            self.focus_active_panel()

    def focus_active_panel(self, *, text_field: bool = True) -> None:
        """Focus the first focusable widget of the panel on show (the tokenizer's text field,
        the tensor table, a scroll view); with ``text_field`` False, the first that is not a
        text field (what escape leaves a field for)."""
        pane = self.query_one(TabbedContent).active_pane
        target = next((w for w in pane.query("*") if w.can_focus and w.display
                       and (text_field or not is_text_field(w))), None) if pane else None
        self.screen.set_focus(target or self.query_one(TabbedContent).query_one(Tabs))

    def active_panel_has_text_field(self) -> bool:
        pane = self.query_one(TabbedContent).active_pane
        return pane is not None and any(is_text_field(w) for w in pane.query("*"))

    @on(TensorTable.EntryChosen)
    def _entry_chosen(self, message: TensorTable.EntryChosen) -> None:
        self.show_statistics(message.entry)

    def show_statistics(self, entry: Any) -> None:
        """Show ``entry``'s record now and its statistics when the worker has read it."""
        if self.inspection is None:
            return
        path = Path(self.inspection.path)
        self.query_one(TensorDetail).show_tensor(path, entry, self._display(path))
        self.show_tab("detail")

    @on(Input.Changed, "#tensor-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        table = self.query_one(TensorTable)
        table.set_filter(event.value)
        table.border_subtitle = f"{len(table.shown)} of {len(table.entries)}" if event.value else ""

    @on(Input.Submitted, "#tensor-filter")
    def _filter_submitted(self) -> None:
        self.query_one(TensorTable).focus()
