"""The generation session's work queue: key presses become :class:`Operation` records in a
first-in first-out queue that one worker thread drains in order (so ``n n backspace`` always
means two steps then one back, however fast they are typed).

The queue also mirrors what the session will have applied once it drains (the model spec and
the settings), so the caller can tell at once whether the form asks for a load or a fresh
start. No UI and no torch here: the caller runs :meth:`OperationQueue.drain` on its worker and
receives each outcome through the callbacks it passes.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.core.reading import reading_progress
from minigpt_tui.engine.session import patching
from minigpt_tui.engine.session.generation import GenerationSession, GenerationSettings, StepperView
from minigpt_tui.engine.session.head_role_view import HeadRolesView, head_roles_view
from minigpt_tui.engine.session.insight import InsightView
from minigpt_tui.engine.session.patching import (
    PatchDefaults,
    PatchingView,
    PatchRequest,
)
from minigpt_tui.engine.session.text_scores import TextScoresView, read_text_file, score_for_view, screen_text
from minigpt_tui.engine.session.worker_failures import failure_line, passes_on

# updated(view, note, select): select is the decision to show, None to keep the current one
Updated = Callable[[StepperView | None, str | None, int | None], None]
Failed = Callable[[str, str, int], None]  # failed(reason, what, dropped operations)
Progress = Callable[[StepperView], None]  # progress(view): what a run still going has decided
PROGRESS_INTERVAL_S = 0.25  # how often a run shows the decisions it has made so far
# reading(spec, bytes read, bytes to read, finished): a load's progress, then once finished
OpeningReport = Callable[[str, int, int, bool], None]


@dataclass(frozen=True)
class Operation:
    """One queued piece of work: ``run`` does it on the worker; the result is a note for the user."""

    what: str
    run: Callable[..., str | None]  # (session), or (session, going) when it ``reports``
    select: str = "last"  # which decision to show afterwards: "last" or "keep"
    loads_model: bool = False
    # A long operation that shows what it has done so far and can be stopped: its ``run``
    # also takes ``going()``, which shows the progress now and then and says whether to go on.
    reports: bool = False
    subject: str | None = None  # the file it opens, named when it fails in an unexpected way


def failure_reason(err: BaseException, subject: str | None = None) -> str:
    """One line for an operation that failed: the engine's message, the file and the OS's
    words, or an unexpected failure named by its type (and the file it was opening)."""
    return failure_line(err, subject)


class OperationQueue:
    """Operations in the order they were asked for, and the spec and settings they will apply."""

    def __init__(self) -> None:
        self._items: deque[Operation] = deque()
        self._lock = threading.Lock()
        self._draining = False
        self._reporting = False  # the operation running now reports (and can be stopped)
        self._stop = threading.Event()
        self.spec_applied: str | None = None
        self.settings_applied: GenerationSettings | None = None
        self.reading: OpeningReport | None = None  # hears the weights a load reads, on the worker

    def push(self, operation: Operation) -> bool:
        """Queue ``operation``; True when no drain is running, so the caller must start one."""
        with self._lock:
            self._items.append(operation)
            start = not self._draining
            self._draining = True
        return start

    @property
    def idle(self) -> bool:
        with self._lock:
            return not self._draining

    def request_stop(self) -> bool:
        """Stop the operation running now at its next check, if it reports (a run to the
        end); False when none such is running. What it has done stays done."""
        with self._lock:
            if not self._reporting:
                return False
            self._stop.set()
            return True

    def drain(self, session: GenerationSession, updated: Updated, failed: Failed,
              progress: Progress | None = None) -> None:
        """Run every queued operation in order (on the worker thread). A failure drops the
        operations queued after it, since they were asked for on top of it. An operation that
        reports passes its view to ``progress`` every :data:`PROGRESS_INTERVAL_S` seconds."""
        while True:
            with self._lock:
                if not self._items:
                    self._draining = False
                    break
                operation = self._items.popleft()
                self._reporting = operation.reports
                self._stop.clear()
            try:
                if operation.reports:
                    note = operation.run(session, self._going(session, progress))
                else:
                    note = operation.run(session)
                view = session.view() if session.stepper is not None else None
            except BaseException as err:  # noqa: BLE001 - any failure is reported; the queue goes on
                if passes_on(err):
                    with self._lock:
                        self._items.clear()
                        self._draining = False
                    raise
                with self._lock:
                    dropped = len(self._items)
                    self._items.clear()
                failed(failure_reason(err, operation.subject), operation.what, dropped)
                continue
            finally:
                with self._lock:
                    self._reporting = False
            select = None if operation.select == "keep" else (len(view.decisions) if view else None)
            updated(view, note, select)

    def _going(self, session: GenerationSession, progress: Progress | None) -> Callable[[], bool]:
        """The ``going()`` of a reporting operation: shows the view now and then, and says
        False once a stop is asked for."""
        shown = [time.monotonic()]

        def going() -> bool:
            if self._stop.is_set():
                return False
            now = time.monotonic()
            if progress is not None and now - shown[0] >= PROGRESS_INTERVAL_S and session.stepper is not None:
                shown[0] = now
                progress(session.view())
            return True

        return going

    def follow(self, session: GenerationSession, what: str) -> None:
        """After a failed ``load`` or ``start``, mirror what the session really kept."""
        if what == "load":
            self.spec_applied = session.spec
            self.settings_applied = session.settings
        elif what == "start":
            self.settings_applied = session.settings

    # -- operations that change what is applied -----------------------------------------------
    def prepare(self, spec: str, settings: GenerationSettings, *, force_reset: bool = False) -> Operation | None:
        """What the form asks for: a load when ``spec`` names another model, else a fresh
        start when the settings differ from those applied (or ``force_reset``), else nothing.
        GenerationError when no model is loaded nor named."""
        if spec and spec != self.spec_applied:
            return self.load(spec, settings)
        if self.spec_applied is None:
            raise GenerationError("no model loaded: type a checkpoint, model file or RUN:latest in the model field")
        return self.start(settings, force_reset=force_reset)

    def load(self, spec: str, settings: GenerationSettings) -> Operation:
        """Load ``spec`` and start from the prompt with ``settings``; :attr:`reading` hears
        the weights read meanwhile."""
        self.spec_applied, self.settings_applied = spec, settings
        reading = self.reading

        def load(session: GenerationSession) -> str:
            opened_reading(session, spec, reading)
            loaded = f"loaded {session.display(str(session.model_path))}"
            if not session.portable.tokenizer.encode_prompt(settings.prompt):
                # A model from elsewhere whose tokenizer adds no BOS needs a prompt to start from.
                return f"{loaded}: its tokenizer adds no BOS, so type a prompt and press enter"
            session.configure(settings)
            return loaded

        return Operation("load", load, loads_model=True, subject=spec)

    def start(self, settings: GenerationSettings, *, force_reset: bool = False) -> Operation | None:
        """A fresh stepper with ``settings``, or None when they are the ones applied already
        (and no reset is asked for)."""
        if not force_reset and settings == self.settings_applied:
            return None
        changed = self.settings_applied is not None and settings != self.settings_applied
        self.settings_applied = settings

        def start(session: GenerationSession) -> str | None:
            session.configure(settings)
            return "settings changed: started over from the prompt" if changed else None

        return Operation("start", start)


def opened_reading(session: GenerationSession, spec: str, reading: OpeningReport | None) -> None:
    """``session.load(spec)``, its weights read reported to ``reading`` (then finished, however
    the load ends)."""
    if reading is None:
        session.load(spec)
        return
    try:
        with reading_progress(lambda done, total: reading(spec, done, total, False)):
            session.load(spec)
    finally:
        reading(spec, 0, 0, True)


# -- operations on the current generation ----------------------------------------------------
def force(step: int, token_id: int) -> Operation:
    return Operation("force", lambda session: session.force(step, token_id))


def force_piece(step: int, tests: Sequence[Callable[[str], bool]], typed: str) -> Operation:
    """Force the id whose piece passes ``tests`` (see :meth:`GenerationSession.find_piece`);
    an unknown piece is refused before any decision is undone."""
    return Operation("force", lambda session: session.force(step, session.find_piece(tests, typed)))


def save_trace(target: Path) -> Operation:
    return Operation("save", lambda session: f"trace saved: {session.save_trace(target)}", select="keep")


def second_model(spec: str | None) -> Operation:
    """Load ``spec`` as the second model (None: remove it)."""

    def load(session: GenerationSession) -> str:
        session.load_second(spec)
        return "second model removed" if spec is None else f"second model: {session.second_path}"

    return Operation("second model", load, select="keep", subject=spec)


def inspect(step: int, layer: int, head: int, candidate_id: int | None,
            deliver: Callable[[InsightView], None]) -> Operation:
    """Look inside decision ``step``; ``deliver`` receives the view on the worker thread."""

    def run(session: GenerationSession) -> None:
        deliver(session.inspect(step, layer, head, candidate_id))

    return Operation("inside", run, select="keep")


def patch_defaults(step: int, deliver: Callable[[PatchDefaults], None]) -> Operation:
    """What the patching dialog starts from for decision ``step``."""

    def run(session: GenerationSession) -> None:
        deliver(patching.patch_defaults(session, step))

    return Operation("patch", run, select="keep")


def _patching(work: Callable[[GenerationSession], None], refused: Callable[[str], None]) -> Operation:
    """A patching operation: ``refused`` hears a refusal's reason before the queue reports
    it; a sweep stopped by its view ends with a note."""

    def run(session: GenerationSession) -> str | None:
        try:
            work(session)
        except patching.PatchingStopped:
            return "patching stopped"
        except BaseException as err:  # noqa: BLE001 - the dialog hears every failure; the queue reports it
            if not passes_on(err):
                refused(failure_reason(err))
            raise
        return None

    return Operation("patch", run, select="keep")


def patch(request: PatchRequest, stop: threading.Event, progress: patching.Progress,
          deliver: Callable[[PatchingView], None], refused: Callable[[str], None],
          attributed: Callable[[PatchingView], None] | None = None) -> Operation:
    """The engine's sweep of ``request``; a set ``stop`` ends it at the next patched run.
    With ``attributed``, the attribution grid first (quick), handed to it before the sweep."""

    def work(session: GenerationSession) -> None:
        if attributed is not None:
            attributed(patching.run_attribution(session, request, stop))
        deliver(patching.run_patching(session, request, progress, stop))

    return _patching(work, refused)


def patch_heads(request: PatchRequest, layer: int, stop: threading.Event, progress: patching.Progress,
                deliver: Callable[[int, tuple[patching.Effect, ...]], None], refused: Callable[[str], None]) -> Operation:
    """Every head of block ``layer`` patched at every position (the per-head grid, on demand)."""
    return _patching(
        lambda session: deliver(layer, patching.run_layer_heads(session, request, layer, progress, stop)), refused)


def score(path: str | None, deliver: Callable[[TextScoresView], None]) -> Operation:
    """Score the UTF-8 file at ``path`` (None: the prompt and continuation on screen) for the
    Text view; ``deliver`` receives the view on the worker thread."""

    def run(session: GenerationSession) -> None:
        deliver(score_for_view(session, read_text_file(path) if path is not None else screen_text(session)))

    return Operation("score", run, select="keep")


def head_roles(deliver: Callable[[HeadRolesView], None]) -> Operation:
    """Score every head's roles on the loaded model for the head view; ``deliver`` receives
    the view on the worker thread."""

    def run(session: GenerationSession) -> None:
        deliver(head_roles_view(session))

    return Operation("head roles", run, select="keep")


def run_to_end() -> Operation:
    """Decide until a stop, showing the decisions as they come; stoppable between decisions."""
    return Operation("run", lambda session, going: session.run(going), reports=True)
