"""Waiting in tests: poll a condition until it holds or a deadline passes, then fail with a
message that names what was waited for. ``wait_until`` sleeps between polls (a process, a
file, a thread); ``pause_until`` lets a Pilot's app run between them; ``last_update_step``
reads how far a run has trained from its metrics log."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def _not_reached(timeout: float, what: str, detail: Callable[[], object] | None) -> AssertionError:
    message = f"waited {timeout} s for {what}"
    return AssertionError(message if detail is None else f"{message}; {detail()}")


def wait_until(condition: Callable[[], T], *, timeout: float, what: str, interval: float = 0.05,
               detail: Callable[[], object] | None = None) -> T:
    """Call ``condition`` every ``interval`` seconds until it returns something truthy, and
    return that. Past ``timeout`` seconds, fail naming ``what`` (and ``detail()``, read then).
    A condition may raise to give up early (the process it waits on has ended)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() >= deadline:
            raise _not_reached(timeout, what, detail)
        time.sleep(interval)
    return value


async def pause_until(pilot: Any, condition: Callable[[], T], *, timeout: float, what: str,
                      interval: float = 0.02, detail: Callable[[], object] | None = None) -> T:
    """``wait_until`` in a Pilot test: ``pilot.pause(interval)`` between polls, so the app
    handles its messages while the test waits."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() >= deadline:
            raise _not_reached(timeout, what, detail)
        await pilot.pause(interval)
    return value


def last_update_step(metrics: Path) -> int:
    """The step of the last update a run's ``metrics.jsonl`` records (0: none yet, or no file);
    a line still being written is skipped."""
    steps = [0]
    for line in metrics.read_text().splitlines() if metrics.exists() else []:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("kind") == "update":
            steps.append(record["step"])
    return max(steps)
