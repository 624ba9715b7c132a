"""The tour's lessons as data: each step's explanation is filled with the learner's own values,
a claim that does not hold on their run is said honestly, ``tour --check`` takes every step
headless on a mini run, and the guide's page is rendered from the same lessons."""

from __future__ import annotations

from pathlib import Path

import pytest

from minigpt_tui.cli import main
from minigpt_tui.engine.session.tour import (
    LESSON_TOKENS,
    LESSON_TRAINING,
    LESSONS,
    EvaluationSeen,
    Observation,
    TokensSeen,
    TrainingSeen,
    finding,
    guide_markdown,
)

ROOT = Path(__file__).resolve().parents[2]


def run_seen(*validation: float, state: str = "finished") -> Observation:
    evaluations = tuple(EvaluationSeen(100 * i, 5.0 - i, value) for i, value in enumerate(validation))
    return Observation("training", TrainingSeen("demo", state, 100 * (len(validation) - 1), 600, evaluations))


def test_the_overfitting_step_names_the_learners_own_best_update_and_losses():
    step = LESSON_TRAINING.steps[2]
    seen = run_seen(5.6, 2.1, 1.83, 2.05, 2.41)
    assert step.done(seen)
    said = finding(step, seen)
    assert said is not None and said.holds
    assert "lowest at update 200 (1.830 nats)" in said.text and "risen to 2.410 by update 400" in said.text
    assert "demo:best is update 200" in said.text


def test_a_run_whose_validation_kept_falling_is_told_so_instead_of_overfitting():
    step = LESSON_TRAINING.steps[2]
    said = finding(step, run_seen(5.6, 3.0, 2.5, 2.2))
    assert said is not None and not said.holds
    assert said.text.startswith("On your run validation kept falling") and "try more updates" in said.text


def test_the_overfitting_step_waits_for_the_run_to_end():
    assert not LESSON_TRAINING.steps[2].done(run_seen(5.6, 2.1, 2.4, state="running"))


def test_the_trailing_space_step_compares_the_pieces_with_and_without_it():
    step = LESSON_TOKENS.steps[2]
    seen = Observation("checkpoints", tokens=TokensSeen(290, 32, "The key is ", ("The ", "k", "e", "y", " is "),
                                                        ("The ", "k", "e", "y", " i", "s")))
    said = finding(step, seen)
    assert said is not None and said.holds
    assert "·i s became ·is·" in said.text
    only_added = Observation("checkpoints", tokens=TokensSeen(290, 0, "ab ", ("a", "b", " "), ("a", "b")))
    said = finding(step, only_added)
    assert said is not None and not said.holds and "only added a piece" in said.text


def test_a_step_without_its_values_yet_explains_nothing():
    for item in LESSONS:
        for step in item.steps:
            assert not step.done(Observation())
            assert finding(step, Observation()) is None


def test_the_guide_page_is_rendered_from_the_lessons():
    page = (ROOT / "docs" / "guide" / "tour.md").read_text("utf-8")
    assert page == guide_markdown(), "run .venv/bin/python tools/make_tour_page.py"
    assert "{" not in page and "*best step*" in page
    for item in LESSONS:
        assert f"## {item.number}. {item.title}" in page


def test_an_unknown_lesson_is_refused_in_one_line(capsys):
    assert main(["tour", "--lesson", "4", "--check"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "minigpt-tui: error: there is no lesson 4: the tour has lessons 1, 2, 5, 6"


@pytest.mark.timeout(120)
def test_tour_check_takes_every_step_on_a_mini_run_and_every_claim_holds(capsys):
    assert main(["tour", "--check"]) == 0
    out = capsys.readouterr().out
    assert "every lesson's claim holds" in out and "✗" not in out
    for item in LESSONS:
        assert f"lesson {item.number}. {item.title}" in out
    assert "That is overfitting; tour:best is update 100." in out  # mini overfits on purpose
    assert "The space did not just add a piece" in out
