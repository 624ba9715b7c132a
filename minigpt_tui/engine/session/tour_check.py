"""``minigpt-tui tour --check``: every lesson's steps taken headless, as the learner would take
them in the app, on a ``mini`` run trained in the given runs folder. Each step's observation
is built from the same engine views the app shows, then judged by the same lesson data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minigpt_tui.engine.analysis.generation_rule import GenerationRule
from minigpt_tui.engine.session.events import Finished, FinishReason
from minigpt_tui.engine.session.generation import GenerationSession, GenerationSettings
from minigpt_tui.engine.session.inputs import RunChoices
from minigpt_tui.engine.session.plans import NewRun
from minigpt_tui.engine.session.tour import (
    LESSONS,
    TRAILING_SPACE_PROMPT,
    Finding,
    Lesson,
    Observation,
    decision_seen,
    finding,
    insight_seen,
    tokens_seen,
    training_seen,
)
from minigpt_tui.engine.session.training import TrainingSession

CHECK_RUN = "tour"
CHECK_PRESET = "mini"
CHECK_PROMPT = TRAILING_SPACE_PROMPT + " "


@dataclass(frozen=True)
class CheckedStep:
    lesson: int
    index: int  # 1-based within its lesson
    key: str
    done: bool
    finding: Finding | None

    @property
    def passed(self) -> bool:
        return self.done and self.finding is not None and self.finding.holds


def train_run(runs_dir: Path) -> Observation:
    """Train the ``mini`` preset as space does on the Training screen; what the tour then sees."""
    config = RunChoices(CHECK_PRESET).resolve()
    session = TrainingSession(NewRun(config, runs_dir, CHECK_RUN), lambda event: None)
    ended: Finished = session.run()
    state = "finished" if ended.reason == FinishReason.COMPLETED else "stopped"
    return Observation("training", training_seen(CHECK_RUN, runs_dir / CHECK_RUN, state, ended.step,
                                                 config.train.steps))


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
    return [CheckedStep(item.number, index, step.key, step.done(seen), finding(step, seen))
            for index, (step, seen) in enumerate(zip(item.steps, observations, strict=True), 1)]


def check_tour(runs_dir: Path, say: Callable[[str], None] = lambda line: None) -> list[CheckedStep]:
    """Take every lesson's steps headless in ``runs_dir``; ``say`` hears what is being done."""
    say(f"training {CHECK_PRESET} as run '{CHECK_RUN}' in {runs_dir}")
    trained = train_run(runs_dir)
    session = GenerationSession(runs_dir)
    say(f"generating from {CHECK_RUN}:best with the prompt {CHECK_PROMPT!r}")
    session.load(f"{CHECK_RUN}:best")
    by_lesson = {
        1: _generation_observations(session),
        2: [trained, trained, trained, Observation("checkpoints", training=trained.training)],
        5: _token_observations(session),
        6: _inside_observations(session),
    }
    checked: list[CheckedStep] = []
    for item in LESSONS:
        checked += _judge(item, by_lesson[item.number])
    return checked
