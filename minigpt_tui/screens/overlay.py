"""Choose a run (or any ``metrics.jsonl``) whose curves are overlaid on the loss plot."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from minigpt_tui.engine.session.runs import list_runs


class OverlayScreen(ModalScreen[Path | None]):
    """Dismisses with a run directory or metrics file, :attr:`REMOVE`, or None."""

    REMOVE = Path("\0remove-overlay")
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel"),
                                             Binding("down,up", "to_choices", "Choices", show=False)]
    # Focused as the dialog is composed, before any key typed ahead is handled (a focus set
    # in on_mount came after it: the first characters typed went to the list). Down (or up)
    # moves to the runs; enter on an empty field takes the highlighted one.
    AUTO_FOCUS = "#overlay-path"

    def __init__(self, runs_dir: Path, current_run: Path | None, has_overlay: bool) -> None:
        super().__init__()
        self.runs_dir = runs_dir
        self.current_run = current_run
        self.has_overlay = has_overlay

    def compose(self) -> ComposeResult:
        runs = [r for r in list_runs(self.runs_dir)
                if r.path != self.current_run and r.metrics_path.exists()]
        options: list[Option] = []
        if self.has_overlay:
            options.append(Option("(remove the overlay)", id="\0remove"))
        options += [Option(run.name, id=str(run.path)) for run in runs]
        with Vertical(id="overlay-picker") as box:
            box.border_title = "Overlay a run's curves"
            box.border_subtitle = "↓ runs · enter chooses · escape cancels"
            if not runs:
                yield Label(f"No other runs with metrics in {self.runs_dir}", classes="dim")
            yield OptionList(*options, id="overlay-runs")
            yield Input(placeholder="or a run's name, a run folder or a metrics.jsonl path", id="overlay-path")

    def action_to_choices(self) -> None:
        options = self.query_one(OptionList)
        if options.option_count:
            options.focus()

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self._choose(event.option.id or "")

    def _choose(self, option_id: str) -> None:
        self.dismiss(self.REMOVE if option_id == "\0remove" else Path(option_id))

    @on(Input.Submitted)
    def _typed(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        options = self.query_one(OptionList)
        if text:
            self.dismiss(self.typed_path(text))
        elif options.option_count:
            self._choose(options.get_option_at_index(options.highlighted or 0).id or "")

    def typed_path(self, text: str) -> Path:
        """A typed run name (as the list shows it) is that run's folder in the runs
        directory; anything else is a path."""
        path = Path(text).expanduser()
        named = self.runs_dir / text
        if not path.exists() and "/" not in text and named.is_dir():
            return named
        return path

    def action_cancel(self) -> None:
        self.dismiss(None)
