"""The tour's lessons 7-9: attention and induction heads, a model from elsewhere, fine-tuning.
Their explanations are filled with the learner's own values and honest where the claim does
not hold; ``tour --check --model`` takes lessons 8-9 on a tiny transformers llama made here
(a SmolLM2-shaped folder: llama with a byte-level tokenizer, random weights), and without
``--model`` they are skipped with a line that says how to run them. Also the reading hook that
reports how far opening a model has read its weights."""

from __future__ import annotations

import pytest

from minigpt_tui.cli import main
from minigpt_tui.engine.core.reading import reading_progress, weights_read
from minigpt_tui.engine.session.tour import (
    EvaluationSeen,
    HeadsSeen,
    InsightSeen,
    Observation,
    PatchSeen,
    PatternSeen,
    ScoresSeen,
    TrainingSeen,
    finding,
)
from minigpt_tui.engine.session.tour_lessons import LESSON_ATTENTION, LESSON_ELSEWHERE, LESSON_FINETUNE
from tests.tour_support import smollm_like_folder


# -- lesson 7 --------------------------------------------------------------------------------------
def induction_run(*scores: float, blocks: int = 2, state: str = "finished") -> Observation:
    points = tuple((100 * i, 1, 0, score) for i, score in enumerate(scores))
    evaluations = tuple(EvaluationSeen(100 * i, 3.0 - 0.1 * i, 3.1 - 0.2 * i) for i in range(len(scores)))
    return Observation("training", TrainingSeen("text-a", state, 100 * (len(scores) - 1), 2000, evaluations,
                                                induction=points, blocks=blocks))


def test_the_induction_bump_is_the_largest_rise_of_the_runs_strongest_induction_score():
    step = LESSON_ATTENTION.steps[2]
    said = finding(step, induction_run(0.02, 0.03, 0.05, 0.41, 0.52))
    assert said is not None and said.holds
    assert "went from 0.02 at update 0 to 0.52 at update 400 (block 1 head 0)" in said.text
    assert "rose most, by 0.36, between updates 200 and 300" in said.text
    assert "validation loss went from 2.700 to 2.500" in said.text


def test_a_run_without_an_induction_head_is_told_so_and_why():
    step = LESSON_ATTENTION.steps[2]
    said = finding(step, induction_run(0.02, 0.03, 0.03))
    assert said is not None and not said.holds and step.long_run
    assert said.text.startswith("No induction head appeared on your run text-a")
    assert "text that repeats itself" in said.text
    one_block = finding(step, induction_run(0.02, 0.03, blocks=1))
    assert one_block is not None and "a model of one block cannot have one" in one_block.text


def test_the_bump_step_waits_for_the_run_unless_an_induction_head_shows_sooner():
    step = LESSON_ATTENTION.steps[2]
    assert not step.done(induction_run(0.02, 0.05, state="running"))
    assert step.done(induction_run(0.02, 0.45, state="running"))  # seen: no need to wait for the end


def test_the_grid_step_names_the_strongest_head_of_each_role_and_chance():
    scores = tuple((layer, head, {"induction": 0.6 if (layer, head) == (1, 2) else 0.02, "previous_token": 0.1,
                                  "duplicate_token": 0.05, "first_token": 0.3})
                   for layer in range(2) for head in range(4))
    heads = HeadsSeen(2, 4, scores, 0.021)
    shown = InsightSeen("pattern", 1, "a", pattern=PatternSeen(1, 2, ("a", "b"), (0.4, 0.6)))
    step = LESSON_ATTENTION.steps[1]
    seen = Observation("generation", insight=shown, heads=heads)
    assert step.done(seen)
    said = finding(step, seen)
    assert said is not None and said.holds
    assert "Block 1 head 2: induction 0.60" in said.text and "induction: block 1 head 2 (0.60)" in said.text
    assert "evenly would score about 0.02 for induction" in said.text
    at_first = Observation("generation", heads=heads,
                           insight=InsightSeen("pattern", 1, "a", pattern=PatternSeen(0, 0, ("a",), (1.0,))))
    assert not step.done(at_first)  # the learner has not moved to another head yet


# -- lessons 8 and 9 -------------------------------------------------------------------------------
def patched(clean: float, corrupt: float, shares: tuple[float, ...]) -> Observation:
    restored = tuple(("resid", layer, position, share) for layer, share in enumerate(shares)
                     for position in (3, 5))
    return Observation("generation", patching=PatchSeen("The capital of France is", "The capital of Italy is",
                                                        " Paris", " Rome", clean, corrupt, (3,), 5, restored))


def test_patching_a_corrupted_prompt_needs_two_nats_between_the_prompts_to_mean_something():
    step = LESSON_ELSEWHERE.steps[4]
    said = finding(step, patched(4.1, -3.0, (1.0, 0.95)))
    assert said is not None and said.holds
    assert "by 4.10 nats, the corrupt 'The capital of Italy is' by -3.00: 7.10 apart" in said.text
    close = finding(step, patched(0.3, 0.05, (1.0, 0.95)))
    assert close is not None and not close.holds and "0.25 apart" in close.text
    assert "choose a corrupt prompt that changes the answer" in close.text


def test_fine_tuning_is_judged_by_the_same_text_scored_before_and_after():
    step = LESSON_FINETUNE.steps[2]
    tokens = (("The", 2.0), (" key", 1.0), (" is", 0.5))
    better = Observation("generation", scores=ScoresSeen("ft:latest", 1.0, tokens, "original", 1.6, (3.0, 1.2, 0.6)))
    said = finding(step, better)
    assert said is not None and said.holds
    assert "1.600 nats a token before the fine-tune (original), 1.000 after (ft:latest)" in said.text
    assert "'The' +1.00" in said.text  # the token that became least surprising, first
    worse = Observation("generation", scores=ScoresSeen("ft:latest", 2.0, tokens, "original", 1.6, (1.0, 1.0, 1.0)))
    said = finding(step, worse)
    assert said is not None and not said.holds and "is not less surprised" in said.text
    assert not step.done(Observation("generation", scores=ScoresSeen("ft:latest", 1.0, tokens)))  # no B yet


@pytest.mark.timeout(180)
def test_tour_check_takes_lessons_8_and_9_on_a_transformers_folder(tmp_path, capsys):
    folder = smollm_like_folder(tmp_path / "smol")
    code = main(["tour", "--check", "--lesson", "8", "--model", str(folder)])
    out = capsys.readouterr().out
    assert "lesson 8. A model from elsewhere" in out
    assert "✓ 1 (g, enter): You opened smol, a llama model from transformers: 2 blocks of 4 heads" in out
    # A random model knows no fact, and its heads have no jobs: said, and counted.
    assert "✗ 2 (n): After 'The capital of France is', smol is unsure" in out
    assert "No head of smol does a role clearly" in out
    assert "the decision's own numbers" in out  # the lens agrees with the decision on any model
    assert "patching 'The capital of France is' from 'The capital of" in out
    assert "5 (p): The clean prompt 'The capital of France is' prefers" in out
    assert code == 1 and "step(s) failed" in out
    assert main(["tour", "--check", "--lesson", "9", "--model", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "✓ 1 (s): " in out and "smol reads your" in out and "mean loss of" in out
    assert "✓ 2 (t, n): Your fine-tune tour-finetune ran 20 updates" in out
    assert "✓ 3 (g, m, s): The same text:" in out and "before the fine-tune (" in out


def test_without_a_model_lessons_8_and_9_are_skipped_with_how_to_run_them(capsys):
    assert main(["tour", "--check", "--lesson", "9"]) == 0
    out = capsys.readouterr().out
    assert "skipped: it reads a model from elsewhere; run minigpt-tui tour --check --model PATH" in out
    assert "every lesson's claim holds" in out


def test_a_model_that_cannot_be_opened_and_a_model_without_check_are_refused_in_one_line(tmp_path, capsys):
    assert main(["tour", "--check", "--lesson", "8", "--model", str(tmp_path / "nowhere")]) != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("minigpt-tui: error:") and len(err.splitlines()) == 1
    assert main(["tour", "--model", str(tmp_path)]) != 0
    err = capsys.readouterr().err.strip()
    assert "--model goes with --check" in err and len(err.splitlines()) == 1


# -- the reading hook --------------------------------------------------------------------------------
def test_opening_a_transformers_folder_reports_its_weights_read_to_whoever_opened_it(tmp_path):
    from minigpt_tui.engine.session.opening import open_model

    folder = smollm_like_folder(tmp_path / "smol")
    reads: list[tuple[int, int]] = []
    with reading_progress(lambda done, total: reads.append((done, total))):
        portable = open_model(str(folder), tmp_path)
    total = sum(p.numel() * p.element_size() for p in portable.model.parameters())
    assert reads[0] == (0, total) and reads[-1] == (total, total)
    assert any(0 < done < total for done, _ in reads)  # tensor by tensor
    assert [done for done, _ in reads] == sorted(done for done, _ in reads)
    count = len(reads)
    open_model(str(folder), tmp_path)  # outside: nobody hears it
    assert len(reads) == count


def test_a_reader_outside_any_listener_reports_nothing():
    advance = weights_read(100)
    advance(50)  # no listener: nothing to call, nothing raised
    heard: list[tuple[int, int]] = []
    with reading_progress(lambda done, total: heard.append((done, total))):
        advance = weights_read(10)
        advance(4)
        advance(40)  # never past the total
    assert heard == [(0, 10), (4, 10), (10, 10)]


def test_opening_a_gguf_file_reports_its_tensors_dequantized(tmp_path):
    import torch
    import transformers as tr

    from minigpt_tui.engine.session.opening import open_model
    from tests.family_support import byte_level_tokenizer, family_config
    from tests.gguf_support import write_gguf

    raw = byte_level_tokenizer()
    end = raw.token_to_id("<|endoftext|>")
    torch.manual_seed(0)
    model = tr.AutoModelForCausalLM.from_config(family_config("llama", raw.get_vocab_size(), end, end)).eval()
    path = write_gguf(model, raw, "llama", tmp_path / "smol-Q8_0.gguf", quant="Q8_0")
    reads: list[tuple[int, int]] = []
    with reading_progress(lambda done, total: reads.append((done, total))):
        open_model(str(path), tmp_path)
    total = reads[0][1]
    assert reads[0] == (0, total) and total > 0 and len(reads) > 3
    assert all(0 <= done <= total for done, _ in reads) and reads[-1][0] > total // 2
    assert [done for done, _ in reads] == sorted(done for done, _ in reads)
