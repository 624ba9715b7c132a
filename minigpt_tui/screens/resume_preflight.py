"""Before resuming training from a checkpoint: the engine's :class:`ResumePreview` shown
for confirmation (what the resume restores, what a weights-only start would reset, and
anything that stops the resume)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from minigpt_tui.engine.session.resume_preview import ResumePreview


def _section(title: str, mark: str, lines: tuple[str, ...], style: str = "") -> list[Any]:
    """A heading and its lines, each wrapped with a hanging indent under its mark."""
    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True, style=style)
    table.add_column(style=style)
    for line in lines:
        table.add_row(f" {mark}", line)
    return [Text(""), Text(title, style="bold" if not style else f"bold {style}"), table]


def preflight_renderable(check: ResumePreview) -> Group:
    parts: list[Any] = [Text(check.checkpoint, style="bold")]
    if check.blockers:
        parts += _section("Cannot resume:", "✗", check.blockers, "red")
    if check.restored:
        parts += _section("Resuming restores, so the next update is the one the run would have made:", "✓",
                          check.restored)
    if check.reset_by_weights_only:
        parts += _section("A weights-only start (train --init-from) would instead reset:", "↺",
                          check.reset_by_weights_only)
    if check.uses:
        parts += _section("What you can do with it here:", "•", check.uses)
    if check.notes:
        parts += _section("Notes:", "•", check.notes, "dim")
    return Group(*parts)


class ResumePreflightScreen(ModalScreen[bool]):
    """Dismisses with True when the user confirms the resume."""

    DEFAULT_CSS = """
    ResumePreflightScreen { align: center middle; }
    ResumePreflightScreen #preflight {
        width: 100; max-width: 100%; height: 90%; max-height: 40;
        border: round $primary; background: $surface; padding: 0 1;
    }
    ResumePreflightScreen #preflight-body { height: 1fr; }
    ResumePreflightScreen .buttons { height: 1; margin-top: 1; align-horizontal: right; }
    ResumePreflightScreen Button { margin-left: 2; }
    """

    # Focused as the dialog is composed, before a key typed right after the one that opened it
    # is handled (a focus set in on_mount comes after it, and the key goes elsewhere).
    # Resume when it can resume (a disabled button takes no focus), else Cancel.
    AUTO_FOCUS = "#resume, #cancel"
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, check: ResumePreview) -> None:
        super().__init__()
        self.check = check

    def compose(self) -> ComposeResult:
        with Vertical(id="preflight") as box:
            box.border_title = "Resume training?"
            box.border_subtitle = "enter resumes · escape cancels" if self.check.can_resume else "escape closes"
            with VerticalScroll(id="preflight-body"):
                yield Static(preflight_renderable(self.check))
            with Horizontal(classes="buttons"):
                yield Button("Resume", id="resume", variant="primary", compact=True,
                             disabled=not self.check.can_resume)
                yield Button("Cancel", id="cancel", compact=True)

    @on(Button.Pressed, "#resume")
    def _resume(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(False)
