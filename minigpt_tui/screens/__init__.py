"""The app's main screens, one module each, registered here by mode name.

A screen module is imported only when its mode is first shown, so a screen never delays
the first frame.

To add a main screen: write ``minigpt_tui/screens/NAME.py`` with a ``Screen`` subclass
that takes no constructor arguments (it reads ``self.app.settings``), and add one
:class:`ScreenEntry` line below.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from textual.screen import Screen


@dataclass(frozen=True)
class ScreenEntry:
    mode: str
    key: str
    title: str
    module: str
    class_name: str
    description: str

    def create(self) -> Screen:
        screen_class = getattr(importlib.import_module(self.module), self.class_name)
        return screen_class()


MAIN_SCREENS: tuple[ScreenEntry, ...] = (
    ScreenEntry("training", "t", "Training", "minigpt_tui.screens.training", "TrainingScreen",
                "Live training: loss table and plot, pause, save, evaluate, stop"),
    ScreenEntry("checkpoints", "c", "Checkpoints", "minigpt_tui.screens.checkpoints", "CheckpointsScreen",
                "Browse runs and checkpoints: tensors, state records, integrity"),
    ScreenEntry("generation", "g", "Generation", "minigpt_tui.screens.generation", "GenerationScreen",
                "Step through generation one next-token decision at a time"),
)
