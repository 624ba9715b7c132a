"""The one throttle of the UI: an action run at most so many times a second.

A request runs the action at once after a quiet spell, else once from a timer at the next
free moment (one timer at a time, however many requests arrive meanwhile). The loss table's
rows, the loss plot's redraws and the Training screen's drains of the run's feed all go
through one; each is given the widget's own clock and ``set_timer`` so tests can drive it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Throttle:
    def __init__(self, action: Callable[[], None], *, clock: Callable[[], float], per_second: float,
                 set_timer: Callable[[float, Callable[[], None]], Any]) -> None:
        self._action = action
        self._clock = clock
        self._interval = 1.0 / per_second
        self._set_timer = set_timer
        self._last = -1e9
        self._timer: Any = None

    @property
    def waiting(self) -> bool:
        """A timer will run the action: further requests change nothing."""
        return self._timer is not None

    def request(self) -> None:
        if self._timer is not None:
            return
        wait = self._last + self._interval - self._clock()
        if wait <= 0:
            self.run_now()
        else:
            self._timer = self._set_timer(wait, self._fire)

    def run_now(self) -> None:
        """Run the action now, dropping a timer that was waiting to."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._fire()

    def _fire(self) -> None:
        self._timer = None
        self._last = self._clock()
        self._action()
