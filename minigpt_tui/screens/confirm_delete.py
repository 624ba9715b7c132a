"""Asked before a run folder is deleted: what goes, and how much disk it frees."""

from __future__ import annotations

from minigpt_tui.screens.confirm import ConfirmScreen


class ConfirmDeleteScreen(ConfirmScreen):
    """Dismisses with True only when the delete button is pressed."""

    def __init__(self, what: str, details: list[str]) -> None:
        super().__init__("Delete?", [f"Delete {what}?", *details, "This cannot be undone."], keep="Keep", act="Delete")
        self.what = what
        self.details = details
