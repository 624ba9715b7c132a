"""What a worker thread says when its work fails, whatever the failure's type.

The engine's own refusals are one line already (:class:`MiniGPTError`); an operating
system's error names the file and the reason. Anything else (a library's ZeroDivisionError on
a hostile file, the tokenizers library's ``PanicException``, which derives from
``BaseException``) is a defect somewhere below us, yet it must still reach the user as one
line and leave the screen usable: it is named by its type and its message's first line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from minigpt_tui.engine.core.errors import MiniGPTError

T = TypeVar("T")

# Interpreter exits are never a worker's failure to report: they pass on as raised.
PASSED_ON: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit, GeneratorExit)
LINE_LIMIT = 300  # characters of an unexpected failure's message kept (a panic may print a page)


@dataclass(frozen=True)
class WorkFailed:
    """A failed attempt: its one line, and whether it was a cause we refuse by name."""

    line: str
    expected: bool


def passes_on(err: BaseException) -> bool:
    return isinstance(err, PASSED_ON)


def first_line(err: BaseException) -> str:
    """The first non-blank line of ``err``'s message, bounded; its type when it has none."""
    text = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    if len(text) > LINE_LIMIT:
        text = text[:LINE_LIMIT] + "…"
    return text


def failure_line(err: BaseException, subject: str | None = None) -> str:
    """One line for ``err``: the engine's message, the file and the OS's words, or, for an
    unexpected failure, "could not open SUBJECT: Type: message" (without the subject when
    there is none)."""
    if isinstance(err, MiniGPTError):
        return str(err)
    if isinstance(err, OSError):
        return f"{getattr(err, 'filename', '') or ''} {err.strerror or first_line(err)}".strip()
    described = f"{type(err).__name__}: {first_line(err)}".rstrip(": ")
    return f"could not open {subject}: {described}" if subject else described


def is_expected(err: BaseException) -> bool:
    return isinstance(err, (MiniGPTError, OSError))


def attempt(work: Callable[[], T], subject: str | None = None) -> T | WorkFailed:
    """``work()``'s result, or the :class:`WorkFailed` it ended in (any failure but an
    interpreter exit), for a worker to report instead of dying silently."""
    try:
        return work()
    except BaseException as err:  # noqa: BLE001 - a worker reports every failure as one line
        if passes_on(err):
            raise
        return WorkFailed(failure_line(err, subject), is_expected(err))
