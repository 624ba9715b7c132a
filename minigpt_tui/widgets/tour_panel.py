"""The tour's panel beside the live screens, and the guide that moves it on.

:class:`TourGuide` (one per app) keeps where the learner is: a lesson, a step, what each done
step showed. Twice a second it takes a snapshot of what the screens show (references to
their frozen views, on the UI thread: no copying, no computing) and a worker of the panel in
front turns it into an :class:`Observation` (reading the run's ``metrics.jsonl``, tokenizing
the panel's text). Back on the UI thread the current step's predicate says whether it is done;
when it is, its explanation is filled with the learner's values and the next step shows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.app import SystemCommand
from textual.containers import VerticalScroll
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from minigpt_tui.engine.session.tour import (
    LESSONS,
    Finding,
    Lesson,
    Observation,
    checkpoint_seen,
    decision_seen,
    finding,
    heads_seen,
    insight_seen,
    model_seen,
    patch_seen,
    scores_seen,
    tokens_seen,
    training_seen,
)

if TYPE_CHECKING:
    from minigpt_tui.app import MiniGPTApp

TICKS_PER_SECOND = 2.0
NARROW_BELOW = 110  # columns: below, the panel sits under the screen instead of beside it
TOUR_KEYS = "> skip · < back · T close"
DONE_STATES = (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED)


# -- what the screens show, taken on the UI thread ---------------------------------------------------
@dataclass(frozen=True)
class Snapshot:
    """References to what the screens show now; :func:`observe` reads them on a worker."""

    screen: str
    run: tuple[str, Path | None, str, int, int] | None = None  # name, folder, state, update, updates
    generation: tuple[Any, Any, Any, str | None, Any, str] | None = None  # view, selected, rule, insight kind,
    # insight, prompt
    tokenizer: tuple[Any, str] | None = None  # the tokenizer panel's tokenizer and typed text
    run_more: dict[str, Any] | None = None  # the run's resume, save, digest and precision
    checkpoint: tuple[Any, str] | None = None  # the open checkpoint's inspection and the panel shown
    generating_from: Path | None = None  # the model file the Generation screen loaded
    model: tuple[Any, Any, str] | None = None  # the Generation screen's opened model, how to name it, its path
    roles: tuple[Any, int, bool] | None = None  # the head view's grid, the model's context, whether it has a BOS
    patching: Any = None  # the patch view's sweep, while it shows
    scores: Any = None  # the Text view's scores, while it shows


# Screens pushed over the main ones that the panel sits beside too (by name: the tour reads
# them without importing them before the app does).
TOUR_SCREENS = ("PatchViewScreen", "TextViewScreen")


def take_snapshot(app: MiniGPTApp) -> Snapshot:
    generation = app.main_screens.get("generation")
    session = getattr(generation, "session", None)
    shown = type(app.screen).__name__
    return Snapshot(app.current_mode, _run_refs(app), _generation_refs(app), _tokenizer_refs(app),
                    _run_more(app), _checkpoint_refs(app), getattr(session, "model_path", None),
                    _model_refs(session), _roles_refs(generation, session),
                    getattr(app.screen, "result", None) if shown == "PatchViewScreen" else None,
                    getattr(app.screen, "view", None) if shown == "TextViewScreen" else None)


def _model_refs(session: Any) -> tuple[Any, Any, str] | None:
    portable = getattr(session, "portable", None)
    if portable is None:
        return None
    return portable, session.short_name, str(session.model_path or session.spec or "")  # named on the worker


def _roles_refs(screen: Any, session: Any) -> tuple[Any, int, bool] | None:
    portable = getattr(session, "portable", None)
    grids = screen.query("HeadRoleGrid") if screen is not None and portable is not None else ()
    view = getattr(grids.first(), "view", None) if grids else None
    if view is None or view.model_key[1] != getattr(portable, "identity", None):
        return None  # none yet, or the previous model's
    return view, int(portable.model.config.context), getattr(portable.tokenizer, "bos_id", None) is not None


def _run_refs(app: MiniGPTApp) -> tuple[str, Path | None, str, int, int] | None:
    run = getattr(app.main_screens.get("training"), "run", None)
    if run is None or run.summary is None:
        return None
    return run.summary.run_name, run.run_dir, run.state, run.step, run.steps


def _run_more(app: MiniGPTApp) -> dict[str, Any] | None:
    run = getattr(app.main_screens.get("training"), "run", None)
    if run is None or run.summary is None:
        return None
    resumed = run.summary.resumed_from
    return {"start_step": run.summary.start_step, "resumed_from": Path(resumed).name if resumed else None,
            "saved_step": run.saved_step, "digest": run.final_digest or "",
            "precision": str(getattr(getattr(run.config, "train", None), "precision", "")),
            "preset": run.summary.preset}


def _checkpoint_refs(app: MiniGPTApp) -> tuple[Any, str] | None:
    screen = app.main_screens.get("checkpoints")
    opened = getattr(screen, "opened", None)
    if screen is None or opened is None:
        return None
    tabs = screen.query("#panels")
    return opened.inspection, (tabs.first().active or "") if tabs else ""


def _generation_refs(app: MiniGPTApp) -> tuple[Any, Any, Any, str | None, Any, str] | None:
    screen = app.main_screens.get("generation")
    view = getattr(screen, "view", None)
    decisions = screen.query("#decisions") if screen is not None else None
    if view is None or not decisions:  # not composed yet, or being taken down
        return None
    selected = decisions.first().selected
    settings = getattr(screen.session, "settings", None)
    rule = settings.rule if settings is not None and settings.rule.label == view.rule_label else None
    insight = screen.insight
    if insight is not None and (selected is None or insight.step != selected.step):
        insight = None
    return view, selected, rule, screen.insight_kind, insight, settings.prompt if settings is not None else ""


def _tokenizer_refs(app: MiniGPTApp) -> tuple[Any, str] | None:
    screen = app.main_screens.get("checkpoints")
    if screen is None:
        return None
    # By name: the tour reads the screen's widgets without importing them before the screen does.
    panels = screen.query("TokenizerPanel")
    tabs = screen.query("#panels")
    if not panels or not tabs or tabs.first().active != "tokenizer" or panels.first().tokenizer is None:
        return None
    panel = panels.first()
    return panel.tokenizer, panel.query_one("#tokenizer-try").value


def observe(snapshot: Snapshot) -> Observation:
    """The tour's observation of a snapshot (a worker thread: reads the metrics file)."""
    training = training_seen(*snapshot.run, **(snapshot.run_more or {})) if snapshot.run is not None else None
    decision = insight = tokens = None
    if snapshot.generation is not None:
        view, selected, rule, kind, inspected, prompt = snapshot.generation
        decision = decision_seen(view, selected, rule, prompt)
        insight = insight_seen(kind, inspected)
    if snapshot.tokenizer is not None:
        tokens = tokens_seen(*snapshot.tokenizer)
    checkpoint = checkpoint_seen(*snapshot.checkpoint) if snapshot.checkpoint is not None else None
    loaded = str(Path(snapshot.generating_from).resolve()) if snapshot.generating_from is not None else None
    return Observation(snapshot.screen, training, decision, insight, tokens, checkpoint, loaded,
                       _model_seen(snapshot.model),
                       heads_seen(*snapshot.roles) if snapshot.roles is not None else None,
                       patch_seen(snapshot.patching), scores_seen(snapshot.scores))


def _model_seen(refs: tuple[Any, Any, str] | None) -> Any:
    if refs is None:
        return None
    portable, name, path = refs
    return model_seen(portable, name(path))


# -- the panel -----------------------------------------------------------------------------------------
class TourPanel(VerticalScroll):
    """The tour beside the screen in front (under it on a narrow terminal)."""

    DEFAULT_CSS = """
    TourPanel { dock: right; width: 42; height: 1fr; border: round $accent; padding: 0 1;
                scrollbar-size-vertical: 1; }
    TourPanel.-narrow { dock: bottom; width: 1fr; height: 8; margin-bottom: 1; }  /* the key bar docks under it */
    """
    can_focus = False

    def __init__(self, guide: TourGuide) -> None:
        super().__init__(id="tour")
        self.guide = guide
        self._said = Static("", id="tour-text")  # updated before the panel is mounted too
        self._shown = ""
        self._observing = False  # a worker observes a snapshot now
        self._waiting: Snapshot | None = None  # the newest snapshot taken meanwhile

    def compose(self) -> Any:
        yield self._said

    def on_mount(self) -> None:
        self.show()

    def on_resize(self) -> None:
        self._shown = ""  # said again for the new width
        self.show()

    def show(self) -> None:
        narrow = self.app.size.width < NARROW_BELOW
        self.set_class(narrow, "-narrow")
        self.border_title = self.guide.title()
        self.border_subtitle = TOUR_KEYS
        said = self.guide.text(compact=narrow)
        if said.plain != self._shown:  # unchanged: the learner may have scrolled back to reread
            self._shown = said.plain
            self._said.update(said)
            # Narrow: the newest finding, then the step (from the top); wide: everything, to the end.
            self.call_after_refresh(self.scroll_home if narrow else self.scroll_end, animate=False)

    def text(self) -> str:
        """What the panel says now, as plain text."""
        return self._shown

    def look(self, snapshot: Snapshot) -> None:
        """Observe ``snapshot`` on a worker; while one observes, the newest snapshot waits for it
        (one at a time: none is cancelled, and none is older than the one before it)."""
        if self._observing:
            self._waiting = snapshot
            return
        self._observing = True
        self.run_worker(partial(observe, snapshot), thread=True, group="tour", exit_on_error=False)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "tour" or event.state not in DONE_STATES:
            return
        if event.state == WorkerState.SUCCESS:
            self.guide.observed(event.worker.result)
        self._observing = False
        if self._waiting is not None:
            snapshot, self._waiting = self._waiting, None
            self.look(snapshot)


# -- where the learner is ----------------------------------------------------------------------------
@dataclass(frozen=True)
class DoneStep:
    index: int
    key: str
    finding: Finding | None  # None: skipped


class TourGuide:
    """The tour's state, on the UI thread."""

    def __init__(self, app: MiniGPTApp) -> None:
        self.app = app
        self.open_ = False
        self.lesson_index = 0
        self.done: list[DoneStep] = []
        self._timer: Any = None

    @property
    def lesson(self) -> Lesson:
        return LESSONS[self.lesson_index]

    @property
    def step_index(self) -> int:
        return len(self.done)

    @property
    def lesson_done(self) -> bool:
        return self.step_index >= len(self.lesson.steps)

    # -- keys ----------------------------------------------------------------------------------------
    def open(self, number: int | None = None) -> None:
        if number is not None:
            self._start([item.number for item in LESSONS].index(number))
        self.open_ = True
        if self._timer is None:
            self._timer = self.app.set_interval(1 / TICKS_PER_SECOND, self.tick)
        self.tick()

    def close(self) -> None:
        self.open_ = False
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        for screen in self.app.main_screens.values():
            for panel in screen.query(TourPanel):
                panel.remove()

    def toggle(self) -> None:
        if self.open_:
            self.close()
        else:
            self.open()

    def move(self, by: int) -> None:
        """``>``: skip the step (at a lesson's end, the next lesson); ``<``: this lesson from its
        start, or the one before when none of its steps is done."""
        if not self.open_:
            return
        if by < 0:
            self._start(max(0, self.lesson_index - (0 if self.done else 1)))
        elif self.lesson_done:
            self._start((self.lesson_index + 1) % len(LESSONS))
        else:
            step = self.lesson.steps[self.step_index]
            self.done.append(DoneStep(self.step_index + 1, step.key, None))
        self.tick()

    def _start(self, index: int) -> None:
        self.lesson_index, self.done = index, []

    # -- observing -----------------------------------------------------------------------------------
    def panel(self) -> TourPanel | None:
        """The panel in the screen in front, mounted there on first use (None under a dialog)."""
        screen = self.app.screen
        if screen not in self.app.main_screens.values() and type(screen).__name__ not in TOUR_SCREENS:
            return None
        found = screen.query(TourPanel)
        if found:
            return found.first()
        panel = TourPanel(self)
        screen.mount(panel)
        return panel

    def tick(self) -> None:
        panel = self.panel() if self.open_ else None
        if panel is None:
            return
        panel.show()
        if not self.lesson_done:
            panel.look(take_snapshot(self.app))

    def observed(self, observation: Observation) -> None:
        """Mark every step this observation shows done (a step seen done earlier moves on at once)."""
        if not self.open_:
            return
        changed = False
        while not self.lesson_done:
            step = self.lesson.steps[self.step_index]
            if not step.done(observation):
                break
            self.done.append(DoneStep(self.step_index + 1, step.key, finding(step, observation)))
            changed = True
        if changed:
            panel = self.panel()
            if panel is not None:
                panel.show()

    # -- what the panel says -------------------------------------------------------------------------
    def title(self) -> str:
        return f"Tour {self.lesson_index + 1}/{len(LESSONS)} · lesson {self.lesson.number}. {self.lesson.title}"

    def text(self, *, compact: bool = False) -> Text:
        """Every done step's finding and the step to do; ``compact``: the newest finding only."""
        out = Text()
        if not compact:
            out.append(f"Lesson {self.lesson.number}. {self.lesson.title}\n", style="bold")
            out.append(self.lesson.intro + "\n", style="dim")
        for done in self.done[-1:] if compact else self.done:
            lead = "" if compact else "\n"
            out.append(f"{lead}{'✓' if done.finding and done.finding.holds else '•'} {done.index} ", style="bold green")
            out.append(f"{done.key}", style="bold")
            said = done.finding.text if done.finding else "skipped"
            out.append(f": {said}\n", style="" if done.finding else "dim")
        if self.lesson_done:
            following = LESSONS[(self.lesson_index + 1) % len(LESSONS)]
            out.append(f"\nLesson done. > goes on to lesson {following.number}: {following.title}.\n", style="bold")
            return out
        step = self.lesson.steps[self.step_index]
        lead = "" if compact and not self.done else "\n"
        out.append(f"{lead}▶ {self.step_index + 1} press ", style="bold yellow")
        out.append(step.key, style="bold reverse")
        out.append(" " if compact else "\n")
        out.append(f"{step.do}\n")
        out.append(f"Look at {step.look}.\n", style="italic")
        return out

    def system_commands(self) -> Iterable[SystemCommand]:
        yield SystemCommand("Tour", "Open or close the lessons beside the screens, with your own numbers (T)",
                            self.toggle)
        for item in LESSONS:
            yield SystemCommand(f"Tour: lesson {item.number}, {item.title.lower()}", item.intro,
                                partial(self.open, item.number))
