"""Threads that adapt to the machine (``train.threads = 0``, ``--threads auto``).

PyTorch's CPU threads wait for each other at the end of every parallel operation. When
another program keeps a core busy, a thread scheduled on that core arrives late, and every
operation waits for it: two threads on a machine with one busy core can be several times
slower than one. So an automatic run starts from the cores this process may use that are
idle now, and during the run, at update boundaries, now and then tries its neighbouring
thread count for a few updates and keeps whichever updates faster.

Fast precision is not bitwise across thread counts (sums are split differently), so this is
only for fast and mixed precision; exact precision always runs one thread. No torch here:
the caller applies the count.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass

from minigpt_tui.engine.core.errors import ConfigError

AUTO = 0  # train.threads = 0: choose and adapt
MAX_AUTO = 8  # more threads than this rarely help a model of this tool's sizes on the CPU


@dataclass(frozen=True)
class Threads:
    """A thread count as asked for: a number, or automatic (``count`` 0, the config's
    stored form). Typed text is read by :meth:`parse` alone."""

    count: int

    @property
    def auto(self) -> bool:
        return self.count == AUTO

    def __str__(self) -> str:
        return "auto" if self.auto else str(self.count)

    @staticmethod
    def parse(text: str, label: str | None = None) -> Threads:
        """``auto`` or a whole number from 1, as typed; a refusal names ``label`` when given."""
        cleaned = text.strip()
        if cleaned.lower() == "auto":
            return Threads(AUTO)
        try:
            value = int(cleaned)
        except ValueError:
            raise _refusal(f"expected auto or a whole number, got '{cleaned}'", label) from None
        if value < 1:
            raise _refusal(f"expected auto or at least 1, got {value}", label)
        return Threads(value)


def _refusal(reason: str, label: str | None) -> ConfigError:
    return ConfigError(f"{label}: {reason}" if label else reason, field="train.threads")


# The commands whose work is forward passes (no training loop): their threads wait without
# spinning. Training keeps OpenMP's default and adapts its thread count instead.
INFERENCE_COMMANDS = frozenset({"generate", "infer", "probes", "contrast", "score", "heads", "patch",
                                "inspect", "export", "convert"})


def wait_without_spinning(environ: MutableMapping[str, str] | None = None) -> bool:
    """Make OpenMP's waiting threads sleep at once (``OMP_WAIT_POLICY=PASSIVE``), for work
    that is forward passes. With torch's default, a thread that finishes its share spins;
    when another program keeps a core busy, the thread sharing that core finishes late, and
    the spinning thread holds the other core, so the kernel cannot move the late one there:
    every operation waits a time slice. Sleeping frees the core. The runtime reads the
    variable once, when torch starts it: this applies only before ``import torch``, and never
    over a policy or spin count the user set. Returns whether it applied."""
    environ = os.environ if environ is None else environ
    if "torch" in sys.modules or "OMP_WAIT_POLICY" in environ or "GOMP_SPINCOUNT" in environ:
        return False
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of all cores since boot, from /proc/stat (Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = handle.readline().split()[1:]
    except OSError:
        return None
    values = [int(v) for v in fields[:8] if v.isdigit()]
    if len(values) < 5:
        return None
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def busy_cores(sample_s: float = 0.1, sleep: Callable[[float], None] = time.sleep) -> float:
    """About how many cores other programs keep busy now (0 when it cannot be told)."""
    before = _cpu_times()
    sleep(sample_s)
    after = _cpu_times()
    if before is None or after is None or after[1] <= before[1]:
        return 0.0
    fraction = (after[0] - before[0]) / (after[1] - before[1])
    return fraction * (os.cpu_count() or 1)


def initial_threads(cores: int | None = None, busy: float | None = None) -> int:
    """Where an automatic run starts: the usable cores not busy now, at least one."""
    cores = usable_cores() if cores is None else cores
    busy = busy_cores() if busy is None else busy
    return max(1, min(MAX_AUTO, cores, round(cores - busy)))


@dataclass(frozen=True)
class ThreadChange:
    step: int
    before: int
    after: int
    reason: str  # in words, for the event log


class ThreadTuner:
    """At update boundaries: after ``settle`` updates, every ``period`` updates it runs the
    neighbouring count (one fewer, or one more, in turn) for ``window`` updates, then keeps
    whichever had the faster median update by at least ``margin``. A trial update ``abandon``
    times slower than the kept median ends the trial at once: on a machine whose other cores
    are busy, one more thread can make an update ten times slower, and five such updates
    cost more than the trial could ever win back. Each trial that changes nothing doubles the
    period (up to ``longest``), so on a steady machine trials cost well under 1 % of the run;
    a kept change brings the period back to ``period``."""

    def __init__(self, start: int, *, cores: int | None = None, settle: int = 5, period: int = 40,
                 longest: int = 640, window: int = 5, margin: float = 0.04, abandon: float = 2.0) -> None:
        self.threads = start
        self.cores = min(MAX_AUTO, usable_cores() if cores is None else cores)
        self.settle, self.base_period, self.longest = settle, period, longest
        self.period, self.window, self.margin, self.abandon = period, window, margin, abandon
        self._since_trial = 0
        self._seen = 0
        self._current: list[float] = []  # recent update seconds at self.threads
        self._trial: int | None = None  # the count being tried
        self._trial_times: list[float] = []
        self._kept: int | None = None  # the count before the trial
        self._direction = -1  # the next neighbour to try: fewer first (the usual win on a busy machine)

    def observe(self, step: int, seconds: float) -> ThreadChange | None:
        """Take one update's time; a change of the thread count to apply now, or None."""
        self._seen += 1
        if self._seen <= self.settle:
            return None
        if self._trial is not None:
            self._trial_times.append(seconds)
            if len(self._trial_times) < self.window and seconds <= self.abandon * statistics.median(self._current):
                return None
            return self._decide(step)
        self._current = (self._current + [seconds])[-self.window:]
        self._since_trial += 1
        if self._since_trial >= self.period and len(self._current) == self.window:
            self._since_trial = 0
            return self._start_trial(step)
        return None

    def _start_trial(self, step: int) -> ThreadChange | None:
        for direction in (self._direction, -self._direction):
            candidate = self.threads + direction
            if 1 <= candidate <= self.cores:
                self._direction = -direction  # alternate next time
                self._trial, self._trial_times, self._kept = candidate, [], self.threads
                before, self.threads = self.threads, candidate
                return ThreadChange(step, before, candidate, "trying")
        return None

    def _decide(self, step: int) -> ThreadChange | None:
        assert self._trial is not None and self._kept is not None
        trial = statistics.median(self._trial_times)
        kept = statistics.median(self._current)
        tried, previous = self._trial, self._kept
        self._trial, self._kept = None, None
        if trial < kept * (1 - self.margin):
            self._current = list(self._trial_times)
            self.period = self.base_period
            why = ("another program is using a core" if tried < previous else "a core came free")
            return ThreadChange(step, previous, tried, f"{why} ({kept * 1e3:.0f} → {trial * 1e3:.0f} ms an update)")
        self.threads = previous
        self.period = min(self.longest, self.period * 2)
        return ThreadChange(step, tried, previous, "back")


def thread_hint(change: ThreadChange) -> str:
    """The event-log line of a kept change."""
    plural = "s" if change.after != 1 else ""
    return f"{change.before} → {change.after} thread{plural}: {change.reason}"
