"""Progress of the run: its state, a bar, update counts, ETA and rate.

The ETA is computed here from time spent running (pauses excluded), with a clock that
tests replace, rather than by the bar's own estimator, which would count a pause as
slowness.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.widget import Widget


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


ENDED_STATES = ("finished", "stopped", "failed")


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


class RunProgress(Widget):
    """One line: state, bar, figures. Drawn as one Text, so a refresh never changes layout."""

    COMPONENT_CLASSES = {"run-progress--done", "run-progress--todo", "run-progress--figures"}
    DEFAULT_CSS = """
    RunProgress { height: 1; padding: 0 1; }
    RunProgress > .run-progress--done { color: $primary; }
    RunProgress > .run-progress--todo { color: $foreground 15%; }
    RunProgress > .run-progress--figures { color: $text; }
    RunProgress.state-running { color: $text-success; }
    RunProgress.state-paused, RunProgress.state-stopping, RunProgress.state-stopped { color: $text-warning; }
    RunProgress.state-failed { color: $text-error; }
    RunProgress.state-finished { color: $text-accent; }
    """
    STATE_WIDTH = 10
    BAR_WIDTH = 32

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run_clock = RunClock(clock)
        self.steps = 0
        self.step = 0
        self.state = "idle"
        self.figures = ""
        self.preparation: tuple[str, int, int] | None = None  # (label, done, total) before the run starts

    def show_pending(self, steps: int) -> None:
        self.steps, self.step = steps, 0
        self.preparation = None
        self.run_clock = RunClock(self.run_clock._clock)
        self.figures = f"0/{steps}"
        self.refresh()

    def show_preparing(self, label: str, done: int, total: int) -> None:
        """Work before the first update (tokenizer training, encoding, cache writing)."""
        self.preparation = (label, done, total)
        self.refresh_figures()

    def set_state(self, state: str) -> None:
        self.remove_class(f"state-{self.state}")
        self.state = state
        self.add_class(f"state-{state}")
        self.refresh_figures()

    def end_preparing(self) -> None:
        """The run stopped or failed before it started: no preparation is going on any more."""
        if self.preparation is not None:
            self.preparation = None
            self.refresh_figures()

    def begin(self, step: int, steps: int) -> None:
        self.preparation = None
        self.steps, self.step = steps, step
        self.run_clock.start(step)
        self.refresh_figures()

    def advance(self, step: int) -> None:
        self.step = step
        self.run_clock.advance(step)

    def refresh_figures(self) -> None:
        self.figures = self._figures()
        self.refresh()

    def _figures(self) -> str:
        if self.preparation is not None:
            label, done, total = self.preparation
            return f"{label} {done:,}/{total:,}"
        if not self.steps:
            return ""
        parts = [f"{self.step}/{self.steps}"]
        if self.run_clock._first_step is None:
            return parts[0]
        if self.state in ENDED_STATES or self.step >= self.steps:  # nothing more to wait for
            parts.append(f"in {format_duration(self.run_clock.running_seconds)}")
        else:
            eta = self.run_clock.eta(self.steps)
            parts.append(f"ETA {format_duration(eta)}" if eta is not None else "ETA –")
        rate = self.run_clock.rate()
        if rate is not None:
            parts.append(f"{rate:,.1f} upd/s")
        return " · ".join(parts)

    def _fraction(self) -> float:
        if self.preparation is not None:
            _, done, total = self.preparation
            return min(1.0, done / total) if total else 0.0
        return min(1.0, self.step / self.steps) if self.steps else 0.0

    def render(self) -> Text:
        fraction = self._fraction()
        spare = self.size.width - self.STATE_WIDTH - len(self.figures) - 8
        width = max(8, min(self.BAR_WIDTH, spare))
        done = int(round(fraction * width))
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f"{self.state:<{self.STATE_WIDTH}}", style="bold")
        text.append("━" * done, style=self.get_component_rich_style("run-progress--done"))
        text.append("━" * (width - done), style=self.get_component_rich_style("run-progress--todo"))
        text.append(f" {fraction * 100:3.0f}%  ", style=self.get_component_rich_style("run-progress--figures"))
        text.append(self.figures, style=self.get_component_rich_style("run-progress--figures"))
        return text
