"""How far opening a model has read its weights, for whoever opened it.

A reader of weights calls :func:`weights_read` with the bytes it is about to read and the
returned ``advance(nbytes)`` after each tensor; whoever opens a model inside
:func:`reading_progress` hears ``report(done, total)`` on the thread that reads. Outside one,
or on another thread, the calls cost nothing and report nothing (the listener is held in a
context variable, so each thread has its own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Report = Callable[[int, int], None]  # report(bytes read, bytes to read)
Advance = Callable[[int], None]


class _Listener:
    def __init__(self, report: Report) -> None:
        self.report = report
        self.counting = False  # a reader counts for it already: a later pass over the same weights does not


_LISTENER: ContextVar[_Listener | None] = ContextVar("minigpt_tui_reading", default=None)


@contextmanager
def reading_progress(report: Report | None) -> Iterator[None]:
    """Send the reads of any model opened inside to ``report`` (None: to nobody)."""
    token = _LISTENER.set(_Listener(report) if report is not None else None)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def _ignore(nbytes: int) -> None:
    return None


def weights_read(total: int) -> Advance:
    """Start counting ``total`` bytes of weights: reports 0 of ``total`` now, and returns the
    ``advance(nbytes)`` a reader calls after each tensor. Only the first reader inside one
    :func:`reading_progress` counts (a GGUF file's tensors are dequantized, then assigned to
    the model: the first pass is the reading)."""
    listener = _LISTENER.get()
    if listener is None or listener.counting:
        return _ignore
    listener.counting = True
    report = listener.report
    done = 0
    report(0, total)

    def advance(nbytes: int) -> None:
        nonlocal done
        done = min(total, done + nbytes)
        report(done, total)

    return advance
