"""Asked before the app stops a run that another process trains (an attached run): the
run, the process that would end, and that quitting the app would leave it running."""

from __future__ import annotations

from minigpt_tui.screens.confirm import ConfirmScreen


class ConfirmStopScreen(ConfirmScreen):
    """Dismisses with True only when the stop button is pressed."""

    def __init__(self, run_name: str, process: str) -> None:
        super().__init__("Stop a run this app did not start?", [
            f"Stop the run {run_name}?",
            f"It is trained by {process}, not by this app.",
            "It saves at its next update and that process ends.",
            "Quitting the app instead leaves it running.",
        ], keep="Keep following", act="Stop the run", warning=True)
        self.run_name = run_name
        self.process = process
