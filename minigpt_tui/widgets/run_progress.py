"""Progress of the run: its state, a bar, update counts, ETA and rate.

The ETA is computed here from time spent running (pauses excluded), with a clock that
tests replace, rather than by the bar's own estimator, which would count a pause as
slowness.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label, ProgressBar


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class RunClock:
    """Seconds spent running and updates made meanwhile, for the rate and the ETA."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._running_since: float | None = None
        self._banked = 0.0
        self._first_step: int | None = None
        self.last_step = 0

    def start(self, step: int) -> None:
        self._first_step = step
        self.last_step = step
        self._banked = 0.0
        self._running_since = self._clock()

    def pause(self) -> None:
        if self._running_since is not None:
            self._banked += self._clock() - self._running_since
            self._running_since = None

    def resume(self) -> None:
        if self._running_since is None:
            self._running_since = self._clock()

    def advance(self, step: int) -> None:
        self.last_step = step

    @property
    def running_seconds(self) -> float:
        live = self._clock() - self._running_since if self._running_since is not None else 0.0
        return self._banked + live

    def rate(self) -> float | None:
        if self._first_step is None:
            return None
        done = self.last_step - self._first_step
        seconds = self.running_seconds
        return done / seconds if done > 0 and seconds > 0 else None

    def eta(self, steps: int) -> float | None:
        rate = self.rate()
        return None if rate is None else (steps - self.last_step) / rate


class RunProgress(Horizontal):
    DEFAULT_CSS = """
    RunProgress { height: 1; padding: 0 1; }
    RunProgress > #run-state { width: 10; text-style: bold; }
    RunProgress > ProgressBar { width: auto; }
    RunProgress > #run-figures { width: 1fr; padding-left: 1; }
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run_clock = RunClock(clock)
        self.steps = 0
        self.state = "idle"

    def compose(self) -> ComposeResult:
        yield Label("idle", id="run-state")
        # A bar without a total animates forever; an idle run shows 0 of its schedule.
        yield ProgressBar(total=1, show_eta=False, id="run-bar")
        yield Label("", id="run-figures")

    def set_state(self, state: str) -> None:
        self.state = state
        label = self.query_one("#run-state", Label)
        label.update(state)
        label.set_classes(f"state-{state}")
        self.refresh_figures()

    def show_pending(self, steps: int) -> None:
        self.steps = 0
        self.query_one(ProgressBar).update(total=steps, progress=0)
        self.query_one("#run-figures", Label).update(f"0/{steps}")

    def begin(self, step: int, steps: int) -> None:
        self.steps = steps
        self.run_clock.start(step)
        self.query_one(ProgressBar).update(total=steps, progress=step)
        self.refresh_figures()

    def advance(self, step: int) -> None:
        self.run_clock.advance(step)
        self.query_one(ProgressBar).update(progress=step)

    def refresh_figures(self) -> None:
        label = self.query_one("#run-figures", Label)
        if not self.steps:
            label.update("")
            return
        step = self.run_clock.last_step
        parts = [f"{step}/{self.steps}"]
        if self.state == "finished" or step >= self.steps:
            parts.append(f"in {format_duration(self.run_clock.running_seconds)}")
        else:
            eta = self.run_clock.eta(self.steps)
            parts.append(f"ETA {format_duration(eta)}" if eta is not None else "ETA –")
        rate = self.run_clock.rate()
        if rate is not None:
            parts.append(f"{rate:,.1f} upd/s")
        label.update(" · ".join(parts))
