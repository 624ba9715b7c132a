"""``minigpt-tui tour --check``: every lesson's steps taken headless, as the learner would take
them in the app: lessons 1-6 on a ``mini`` run trained in the given runs folder, lesson 7 on a
short ``text`` run, lessons 8-9 on a model from elsewhere when one is given. Each step's
observation is built from the same engine views the app shows, then judged by the same lesson
data."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minigpt_tui.engine.analysis.generation_rule import GenerationRule
from minigpt_tui.engine.formats.inspect import inspect_path
from minigpt_tui.engine.session.events import Command, Finished, FinishReason, Paused, Saved, UpdateDone
from minigpt_tui.engine.session.generation import GenerationSession, GenerationSettings
from minigpt_tui.engine.session.inputs import RunChoices
from minigpt_tui.engine.session.plans import NewRun, ResumeRun
from minigpt_tui.engine.session.tour import (
    LESSONS,
    TRAILING_SPACE_PROMPT,
    Finding,
    Lesson,
    Observation,
    TrainingSeen,
    checkpoint_seen,
    decision_seen,
    finding,
    insight_seen,
    tokens_seen,
    training_seen,
)
from minigpt_tui.engine.session.tour_models import model_observations, text_run_observations
from minigpt_tui.engine.session.training import TrainingSession

CHECK_RUN = "tour"
CHECK_PRESET = "mini"
CHECK_PROMPT = TRAILING_SPACE_PROMPT + " "
PAUSED_RUN = "tour-paused"
PAUSE_AFTER = 300  # updates: the paused run stops here and resumes in a new session


@dataclass(frozen=True)
class CheckedStep:
    lesson: int
    index: int  # 1-based within its lesson
    key: str
    done: bool
    finding: Finding | None
    long_run: bool = False  # its claim needs a longer run than the check's: said, not failed

    @property
    def passed(self) -> bool:
        return self.done and self.finding is not None and (self.finding.holds or self.long_run)

    @property
    def needs_longer_run(self) -> bool:
        """Passed only because a longer run than the check's would show the claim."""
        return self.passed and self.finding is not None and not self.finding.holds


def train_run(runs_dir: Path) -> Observation:
    """Train the ``mini`` preset as space does on the Training screen; what the tour then sees."""
    config = RunChoices(CHECK_PRESET).resolve()
    session = TrainingSession(NewRun(config, runs_dir, CHECK_RUN), lambda event: None)
    ended: Finished = session.run()
    state = "finished" if ended.reason == FinishReason.COMPLETED else "stopped"
    return Observation("training", training_seen(CHECK_RUN, runs_dir / CHECK_RUN, state, ended.step,
                                                 config.train.steps, digest=ended.state_digest,
                                                 precision=config.train.precision))


def _resume_observations(runs_dir: Path, straight: TrainingSeen) -> list[Observation]:
    """Lesson 3: the same preset paused after PAUSE_AFTER updates (a pause saves) and stopped,
    then resumed from that checkpoint in a new session to the end; its digest against ``straight``'s."""
    config = RunChoices(CHECK_PRESET).resolve()
    seen: dict[str, int] = {}

    def sink(event: Any) -> None:
        if isinstance(event, UpdateDone) and event.record.step == PAUSE_AFTER:
            paused.send(Command.PAUSE)
        elif isinstance(event, Saved):
            seen["saved"] = event.step
        elif isinstance(event, Paused):
            seen["paused"] = event.step
            paused.send(Command.STOP)  # as quitting the app does: the run is on disk

    paused = TrainingSession(NewRun(config, runs_dir, PAUSED_RUN), sink)
    paused.run()
    step = seen.get("paused", 0)
    at_pause = TrainingSeen(PAUSED_RUN, "paused", step, config.train.steps, saved_step=seen.get("saved"))
    checkpoint = f"step-{step:06d}"
    ended = TrainingSession(ResumeRun(runs_dir / PAUSED_RUN / "checkpoints" / checkpoint, runs_dir),
                            lambda event: None).run()
    more = {"start_step": step, "resumed_from": checkpoint, "precision": config.train.precision}
    resumed = TrainingSeen(PAUSED_RUN, "running", step, config.train.steps, **more)
    state = "finished" if ended.reason == FinishReason.COMPLETED else "stopped"
    finished = TrainingSeen(PAUSED_RUN, state, ended.step, config.train.steps, digest=ended.state_digest,
                            straight_digest=straight.digest, **more)
    return [Observation("training", training=seen_run) for seen_run in (at_pause, resumed, finished)]


def _checkpoint_observations(runs_dir: Path) -> list[Observation]:
    """Lesson 4: the straight run's last checkpoint opened, its aliases and state tabs, then
    generation from its model file."""
    folder = max((runs_dir / CHECK_RUN / "checkpoints").glob("step-*"))
    inspection = inspect_path(folder)
    seen = [Observation("checkpoints", checkpoint=checkpoint_seen(inspection, tab))
            for tab in ("tensors", "aliases", "state")]
    loaded = str((folder / "model.safetensors").resolve())
    return [*seen, Observation("generation", checkpoint=seen[-1].checkpoint, generating_from=loaded)]


def _decide(session: GenerationSession, rule: GenerationRule, decisions: int) -> Any:
    session.configure(GenerationSettings(CHECK_PROMPT, rule))
    for _ in range(decisions):
        session.step()
    return session.view()


def _generation_observations(session: GenerationSession) -> list[Observation]:
    """Lesson 1: one decision, greedy on, then temperature 0.5 and 2 (the last decision selected)."""
    greedy = GenerationRule.greedy()
    view = _decide(session, greedy, 3)
    first = Observation("generation", decision=decision_seen(view, view.decisions[0], greedy))
    on = Observation("generation", decision=decision_seen(view, view.decisions[-1], greedy))
    seen = [first, on]
    for temperature in (0.5, 2.0):
        rule = GenerationRule.sample(temperature)
        view = _decide(session, rule, 1)
        seen.append(Observation("generation", decision=decision_seen(view, view.decisions[-1], rule)))
    return seen


def _token_observations(session: GenerationSession) -> list[Observation]:
    """Lesson 5: the tokenizer panel open, then the prompt typed without and with a trailing space."""
    tokenizer = session.stepper.tokenizer
    return [Observation("checkpoints", tokens=tokens_seen(tokenizer, text))
            for text in ("", TRAILING_SPACE_PROMPT, TRAILING_SPACE_PROMPT + " ")]


def _inside_observations(session: GenerationSession) -> list[Observation]:
    """Lesson 6: the first greedy decision's lens, then its contributions."""
    greedy = GenerationRule.greedy()
    view = _decide(session, greedy, 1)
    decision = decision_seen(view, view.decisions[0], greedy)
    insight = session.inspect(1, 0, 0)
    return [Observation("generation", decision=decision, insight=insight_seen(kind, insight))
            for kind in ("lens", "contributions")]


def _judge(item: Lesson, observations: list[Observation]) -> list[CheckedStep]:
    return [CheckedStep(item.number, index, step.key, step.done(seen), finding(step, seen), step.long_run)
            for index, (step, seen) in enumerate(zip(item.steps, observations, strict=True), 1)]


def _mini_lessons(runs_dir: Path, wanted: set[int], say: Callable[[str], None]) -> dict[int, list[Observation]]:
    """Lessons 1-6 (those of ``wanted``) on a mini run, and the paused and resumed one for lesson 3."""
    say(f"training {CHECK_PRESET} as run '{CHECK_RUN}' in {runs_dir}")
    trained = train_run(runs_dir)
    assert trained.training is not None
    by_lesson: dict[int, list[Observation]] = {}
    if 3 in wanted:
        say(f"training {CHECK_PRESET} again as run '{PAUSED_RUN}', pausing after update {PAUSE_AFTER}, "
            "then resuming it to the end")
        by_lesson[3] = _resume_observations(runs_dir, trained.training)
    session = GenerationSession(runs_dir)
    say(f"generating from {CHECK_RUN}:best with the prompt {CHECK_PROMPT!r}")
    session.load(f"{CHECK_RUN}:best")
    by_lesson.update({
        1: _generation_observations(session),
        2: [trained, trained, trained, Observation("checkpoints", training=trained.training)],
        4: _checkpoint_observations(runs_dir),
        5: _token_observations(session),
        6: _inside_observations(session),
    })
    return by_lesson


def check_tour(runs_dir: Path, say: Callable[[str], None] = lambda line: None, *,
               lessons: Collection[int] | None = None, model: str | None = None) -> list[CheckedStep]:
    """Take the steps of ``lessons`` (every lesson when None) headless in ``runs_dir``;
    ``say`` hears what is being done. Lessons 8 and 9 need ``model`` (a GGUF file or a
    transformers folder): without one they are left out."""
    wanted = {item.number for item in LESSONS} if lessons is None else set(lessons)
    by_lesson: dict[int, list[Observation]] = {}
    if model is not None and wanted & {8, 9}:  # first: a model that cannot be opened is said at once
        by_lesson.update(model_observations(model, runs_dir, wanted, say))
    if wanted & {1, 2, 3, 4, 5, 6}:
        by_lesson.update(_mini_lessons(runs_dir, wanted, say))
    if 7 in wanted:
        by_lesson[7] = text_run_observations(runs_dir, say)
    checked: list[CheckedStep] = []
    for item in LESSONS:
        if item.number in wanted and item.number in by_lesson:
            checked += _judge(item, by_lesson[item.number])
    return checked
