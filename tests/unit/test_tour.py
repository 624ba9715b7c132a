"""The tour's lessons as data: each step's explanation is filled with the learner's own values,
a claim that does not hold on their run is said honestly, ``tour --check`` takes every step
headless on a mini run, and the guide's page is rendered from the same lessons."""

from __future__ import annotations

from pathlib import Path

import pytest

from minigpt_tui.cli import main
from minigpt_tui.engine.session.tour import (
    LESSON_RESUME,
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


def resumed_seen(digest: str, straight: str = "", precision: str = "exact") -> Observation:
    return Observation("training", TrainingSeen("demo", "finished", 600, 600, start_step=300,
                                                resumed_from="step-000300", digest=digest,
                                                precision=precision, straight_digest=straight))


def test_the_resume_lesson_compares_the_resumed_digest_with_a_run_never_stopped():
    step = LESSON_RESUME.steps[2]
    said = finding(step, resumed_seen("ab" * 32, straight="ab" * 32))
    assert said is not None and said.holds and "state digest abababababababab…" in said.text
    assert "equal, bit for bit" in said.text
    said = finding(step, resumed_seen("ab" * 32, straight="cd" * 32))
    assert said is not None and not said.holds and "the continuation was not exact" in said.text


def test_in_the_app_the_resume_lesson_points_to_verify_and_is_honest_about_precision():
    step = LESSON_RESUME.steps[2]
    said = finding(step, resumed_seen("ab" * 32))  # no run never stopped to compare with
    assert said is not None and said.holds and "minigpt-tui verify --preset mini" in said.text
    said = finding(step, resumed_seen("ab" * 32, precision="fast"))
    assert said is not None and not said.holds and "your run trains in fast precision" in said.text
    running = Observation("training", TrainingSeen("demo", "running", 400, 600, start_step=300,
                                                   resumed_from="step-000300"))
    assert LESSON_RESUME.steps[1].done(running) and not step.done(running)


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
    assert main(["tour", "--lesson", "99", "--check"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("minigpt-tui: error: there is no lesson 99: the tour has lessons 1, 2, 3, 4, 5, 6, 7, 8, 9")


@pytest.mark.timeout(120)
def test_tour_check_takes_every_step_on_a_mini_run_and_every_claim_holds(capsys):
    assert main(["tour", "--check"]) == 0
    out = capsys.readouterr().out
    assert "every lesson's claim holds" in out and "✗" not in out
    for item in LESSONS:
        assert f"lesson {item.number}. {item.title}" in out
    assert "That is overfitting; tour:best is update 100." in out  # mini overfits on purpose
    assert "The space did not just add a piece" in out
    assert "paused after update 300 and saved checkpoints/step-000300" in out
    assert "equal, bit for bit" in out  # the paused and resumed run ends as the straight one
    assert "1 alias record: head.weight is token_embedding.weight (transpose)" in out
    assert "loaded model.safetensors alone" in out
    # Lesson 7 on a short text run: a head's row is a softmax; no induction head forms in so few
    # updates, which is said (and not counted as a failure: the app's longer run shows it).
    assert "the weights add up to 1.0000" in out
    assert "No induction head appeared on your run tour-text" in out
    assert "a longer run than the check's shows this claim; not counted as a failure" in out
    assert out.count("skipped: it reads a model from elsewhere; run minigpt-tui tour --check --model PATH") == 2
