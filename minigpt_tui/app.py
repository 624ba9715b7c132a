"""The minigpt-tui Textual app: three main screens (modes) switched with t, c and g.

Nothing imported here imports torch: the first frame is drawn while torch is still being
imported on a worker thread (see :meth:`MiniGPTApp.on_mount`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import events, on, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from minigpt_tui.engine.core.files import shorten_middle
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.inputs import RunChoices
from minigpt_tui.engine.session.preload import import_training_engine
from minigpt_tui.engine.session.runs import resolve_runs_dir
from minigpt_tui.engine.session.worker_failures import WorkFailed, attempt
from minigpt_tui.messages import EngineImported, OpenInGeneration, ResumeOnTraining
from minigpt_tui.screens import MAIN_SCREENS, ScreenEntry
from minigpt_tui.screens.confirm_quit import ConfirmQuitScreen
from minigpt_tui.screens.help import HelpScreen
from minigpt_tui.screens.typed_ahead import pass_to_field

if TYPE_CHECKING:
    from minigpt_tui.widgets.tour_panel import TourGuide

NOTIFICATION_LIMIT = 600  # characters of a notification shown, as an error line on the command line


@dataclass(frozen=True)
class LaunchSettings:
    """What the command line chose: where runs live and the default next run."""

    runs_dir: Path
    preset: str = "mini"
    corpus: str | None = None
    attach: Path | None = None  # a run folder another process writes: the Training screen follows it
    tour: int | None = None  # the tour's lesson to open beside the screens


def resolve_next_config(settings: LaunchSettings, overrides: dict[str, dict[str, Any]] | None = None) -> Any:
    """The RunConfig that ``space`` starts (config resolution does not import torch)."""
    return RunChoices(settings.preset, corpus=settings.corpus).resolve(extra=overrides)


class MiniGPTApp(App[None]):
    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses elsewhere find it too
    TITLE = "minigpt-tui"

    SCREEN_KEYS = Binding.Group("Screens")
    BINDINGS = [
        Binding("t", "show_screen('training')", "Training", group=SCREEN_KEYS),
        Binding("c", "show_screen('checkpoints')", "Checkpoints", group=SCREEN_KEYS),
        Binding("g", "show_screen('generation')", "Generation", group=SCREEN_KEYS),
        Binding("question_mark", "help", "Help"),
        Binding("T", "tour", "Tour", show=False),
        Binding("greater_than_sign", "tour_step(1)", "Tour: skip", show=False),
        Binding("less_than_sign", "tour_step(-1)", "Tour: back", show=False),
        Binding("q", "request_quit", "Quit"),
        Binding("ctrl+q", "request_quit", "Quit", show=False, priority=True),
    ]

    def __init__(
        self,
        settings: LaunchSettings,
        *,
        next_config: Any = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        preload_engine: bool = True,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.next_config = next_config if next_config is not None else resolve_next_config(settings)
        self.clock = clock
        self.wall_clock = wall_clock
        self.preload_engine = preload_engine
        self.engine_import_seconds: float | None = None
        self.screen_entries: dict[str, ScreenEntry] = {entry.mode: entry for entry in MAIN_SCREENS}
        self.main_screens: dict[str, Screen] = {}
        self._tour: TourGuide | None = None  # made when first used: its lessons are off the first frame
        for mode in self.screen_entries:
            self.add_mode(mode, lambda mode=mode: self._create_main_screen(mode))

    @property
    def tour(self) -> TourGuide:
        if self._tour is None:
            from minigpt_tui.widgets.tour_panel import TourGuide  # deferred: off the first frame

            self._tour = TourGuide(self)
        return self._tour

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """Every notification shows its text as given: control characters escaped (a file
        or tensor name may hold terminal escapes), no markup read from it, and bounded (a
        value echoed from a hostile file is cut in the middle, as on the command line)."""
        super().notify(shorten_middle(escape_controls(message), NOTIFICATION_LIMIT), title=shorten_middle(escape_controls(title), 120),
                       severity=severity, timeout=timeout, markup=False)

    def _create_main_screen(self, mode: str) -> Screen:
        screen = self.screen_entries[mode].create()
        self.main_screens[mode] = screen
        return screen

    def on_mount(self) -> None:
        self._exit_on_stop_signals()
        self.switch_mode("training")
        if self.settings.attach is not None:
            attach = self.settings.attach
            self.call_after_refresh(lambda: self.training_screen.attach_run(attach))
        if self.preload_engine:
            self.call_after_refresh(self._import_engine)
        if self.settings.tour is not None:
            self.call_after_refresh(self.tour.open, self.settings.tour)

    # -- torch off the UI thread ---------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="engine-import")
    def _import_engine(self) -> None:
        started = time.perf_counter()
        imported = attempt(import_training_engine)
        if isinstance(imported, WorkFailed):  # a broken install: said once, the screens say it again when used
            self.call_from_thread(self.notify, f"the engine could not be loaded: {imported.line}",
                                  title="engine", severity="error")
            return
        self.post_message(EngineImported(time.perf_counter() - started))

    @on(EngineImported)
    def _engine_imported(self, message: EngineImported) -> None:
        self.engine_import_seconds = message.seconds

    # -- screens -------------------------------------------------------------------------
    def action_show_screen(self, mode: str) -> None:
        entry = self.screen_entries.get(mode)
        if entry is None:
            self.notify(f"unknown screen '{mode}'", severity="error", markup=False)
            return
        if self.current_mode != mode:
            self.switch_mode(mode)

    @property
    def training_screen(self) -> Any:
        """The Training screen (created on first use), for other screens' actions."""
        return self.main_screens.get("training")

    @on(OpenInGeneration)
    def _open_in_generation(self, message: OpenInGeneration) -> None:
        self.action_show_screen("generation")
        self.main_screens["generation"].load_model(str(message.model))

    @on(ResumeOnTraining)
    def _resume_on_training(self, message: ResumeOnTraining) -> None:
        training = self.training_screen
        if training is not None and training.has_active_run:
            self.notify("a run is active on the Training screen: stop it first (t, then x)",
                        title="resume", severity="warning")
            return
        self.action_show_screen("training")
        self.training_screen.resume_from_checkpoint(message.checkpoint)

    def on_key(self, event: events.Key) -> None:
        """A character typed right after the key that opened a dialog goes into its field."""
        pass_to_field(self.screen, event)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.screen.dismiss()
            return
        self.push_screen(HelpScreen(self.screen, self.help_keys()))

    def action_tour(self) -> None:
        self.tour.toggle()

    def action_tour_step(self, by: int) -> None:
        self.tour.move(by)

    def help_keys(self) -> list[tuple[str, str]]:
        keys = []
        for entry in MAIN_SCREENS:
            keys.append((entry.key, f"{entry.title} screen: {entry.description}"))
        keys += [("?", "this help, for the screen in front"), ("q", "quit (asks first while a run has unsaved updates)"),
                 ("ctrl+p", "command palette: every screen and action, and the theme (light or dark)"),
                 ("T", "the tour: short lessons beside the screens, explained with your own numbers "
                       "(> skips a step, < goes back; minigpt-tui tour opens the app with it)")]
        return keys

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for entry in MAIN_SCREENS:
            yield SystemCommand(f"{entry.title} screen", entry.description,
                                lambda mode=entry.mode: self.action_show_screen(mode))
        yield SystemCommand("Help", "Explain every record on this screen", self.action_help)
        yield from self.tour.system_commands()
        # The screen in front lists its own actions (PALETTE_COMMANDS: title, help, action),
        # each run as its key runs it.
        for title, help_text, action in getattr(screen, "PALETTE_COMMANDS", ()):
            yield SystemCommand(title, help_text, partial(screen.run_action, action))
        yield from super().get_system_commands(screen)

    # -- quitting ------------------------------------------------------------------------
    def action_request_quit(self) -> None:
        training = self.training_screen
        if training is None or not training.has_active_run:
            self.exit()
            return
        unsaved = training.unsaved_updates
        if not unsaved:
            training.stop_for_exit(save=False)
            return

        def decided(choice: str | None) -> None:
            if choice == "save":
                training.stop_for_exit(save=True)
            elif choice == "discard":
                training.stop_for_exit(save=False)

        self.push_screen(ConfirmQuitScreen(unsaved), decided)

    def action_quit(self) -> None:  # type: ignore[override]
        self.action_request_quit()

    def _exit_on_stop_signals(self) -> None:
        """SIGTERM or SIGINT from outside (the terminal's Ctrl+C is a key here) end the app
        as the command line ends: a run of its own saves at its next update and stops, an
        attached run is only detached from, and the terminal is restored."""
        try:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self._exit_for_signal)
        except (RuntimeError, NotImplementedError, ValueError):  # not the main thread (tests), or not POSIX
            pass

    def _exit_for_signal(self) -> None:
        training = self.training_screen
        if training is None or not training.has_active_run:
            self.exit()
            return
        training.stop_for_exit(save=True)

    def on_unmount(self) -> None:
        # A thread worker cannot be killed and the interpreter waits for it at exit:
        # make sure a run still going stops at its next update. An attached run belongs to
        # another process: the app only stops following it (on q, on SIGINT, on a crash).
        training = self.training_screen
        if training is None or training.run is None or not training.run.active:
            return
        training.run.end_for_exit(save=True)


def run_app(args: argparse.Namespace) -> int:
    settings = LaunchSettings(
        runs_dir=resolve_runs_dir(getattr(args, "runs_dir", None)),
        preset=getattr(args, "preset", None) or "mini",
        corpus=getattr(args, "corpus", None),
        attach=getattr(args, "attach_run", None),
        tour=getattr(args, "tour_lesson", None),
    )
    # The screen is ours: a Rust library's panic (refused as one line) prints no backtrace over it.
    os.environ["RUST_BACKTRACE"] = "0"
    app = MiniGPTApp(settings)  # an invalid preset or corpus raises here, before any frame
    app.run()
    return int(app.return_code or 0)
