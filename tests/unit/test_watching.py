"""Samples and head roles at every scheduled evaluation: recorded, shown, and without any
effect on the run (the same records and state digest as a run that does not watch)."""

from __future__ import annotations

import json
from pathlib import Path

from cli_support import run_cli_json_in_process
from conftest import run_cli

from minigpt_tui.engine.models.model_file import load_portable_model
from minigpt_tui.engine.analysis.generation import DecisionStepper, GenerationRule


def _records(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def test_watching_changes_nothing_and_records_every_evaluation(tmp_path, capsys):
    common = ("--preset", "mini", "--steps", "100", "--save-every", "50")
    watched = run_cli_json_in_process(capsys, "train", *common, "--run", "watched")
    plain = run_cli_json_in_process(capsys, "train", *common, "--run", "plain", "--no-watch")
    assert watched["state_digest"] == plain["state_digest"]
    assert watched["updates"] == plain["updates"] and watched["evaluations"] == plain["evaluations"]
    assert plain["samples"] == [] and plain["heads"] == []

    run_dir = Path(watched["run_dir"])
    samples, heads = _records(run_dir, "samples"), _records(run_dir, "heads")
    steps = [e["step"] for e in watched["evaluations"]]
    assert [r["step"] for r in samples] == [r["step"] for r in heads] == steps == [0, 50, 100]
    assert not _records(Path(plain["run_dir"]), "samples")
    # The bundled corpus's probes give the prompts; each is continued greedily as `generate` does.
    at_50 = samples[1]["samples"]
    assert len(at_50) == 3 and all(s["prompt"] for s in at_50)
    portable = load_portable_model(run_dir / "checkpoints" / "step-000050")
    for sample in at_50:
        rule = GenerationRule("greedy", max_new_tokens=24)
        stepper = DecisionStepper.from_portable(portable, sample["prompt"], rule)
        assert [d.chosen.id for d in stepper.run()] == sample["greedy_ids"]
    # Every head scored for each role; the run's summary names the strongest induction head.
    layers, width_heads = 1, 2  # the mini preset
    assert len(heads[-1]["heads"]) == layers * width_heads
    assert set(heads[-1]["top"]) == {"induction", "previous_token", "duplicate_token", "first_token"}
    assert watched["heads"][-1]["top"] == heads[-1]["top"]
    # The seeded samples are the same in a second run.
    again = run_cli_json_in_process(capsys, "train", *common, "--run", "again")
    assert again["samples"] == watched["samples"]


def test_own_text_prompts_are_the_first_words_of_validation_records(tmp_path, capsys):
    corpus = tmp_path / "notes.txt"
    corpus.write_text("\n".join(f"record {i} says the river runs north of town" for i in range(60)), encoding="utf-8")
    result = run_cli_json_in_process(capsys, "train", "--preset", "text", "--corpus", str(corpus), "--steps", "2",
                                     "--set", "train.eval_every=2", "--set", "model.layers=1", "--set", "model.width=32",
                                     "--set", "model.heads=2", "--set", "model.ffn=64")
    prompts = [s["prompt"] for s in result["samples"][-1]["samples"]]
    assert prompts == ["record 9 says the", "record 19 says the", "record 29 says the"]  # every 10th is validation


def test_sample_prompt_refusals_are_one_line(tmp_path, capsys):
    bad = tmp_path / "prompts.json"
    bad.write_text("{not json", encoding="utf-8")
    for extra, message in ((("--sample-prompts", str(bad)), "is not valid JSON"),
                           (("--sample-prompts", str(bad), "--no-watch"), "not both")):
        code, out, err = run_cli(capsys, "train", "--preset", "tiny", *extra)
        lines = err.strip().splitlines()
        assert code != 0 and len(lines) == 1 and message in lines[0], err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_samples_fed_through_the_cache_equal_whole_windows_past_the_context(tmp_path, capsys):
    """A continuation feeds only new ids while the text fits the context, then whole windows:
    the ids equal those of recomputing every window from the start (greedy and seeded)."""
    import torch

    from minigpt_tui.engine.analysis.generation import eligibility_mask, greedy_choice
    from minigpt_tui.engine.session.watching import _continue

    run = run_cli_json_in_process(capsys, "train", "--preset", "tiny", "--run", "tiny")
    portable = load_portable_model(Path(run["checkpoints"][-1]))
    model, tokenizer = portable.model.eval(), portable.tokenizer
    context = model.config.context
    ids = tokenizer.encode_prompt("The key")
    steps = context + 5  # past the context
    eligible = eligibility_mask(tokenizer.vocab_size, bos_id=tokenizer.bos_id, eos_ids=())

    def whole_windows(generator):
        out = []
        draws = None if generator is None else torch.rand(steps, generator=generator, dtype=torch.float64)
        for step in range(steps):
            logits = model(torch.tensor([(ids + out)[-context:]])).logits[0, -1].to(torch.float64)
            if generator is None:
                out.append(greedy_choice(logits, eligible))
            else:  # the first id whose cumulative probability passes the step's draw
                cumulative = torch.softmax(logits.masked_fill(~eligible, float("-inf")), dim=-1).cumsum(dim=-1)
                out.append(int((cumulative > draws[step] * cumulative[-1]).nonzero()[0]))
        return out

    with torch.no_grad():
        for seed in (None, 7):
            mine = _continue(model, tokenizer, ids, steps, eligible,
                             None if seed is None else torch.Generator().manual_seed(seed))
            theirs = whole_windows(None if seed is None else torch.Generator().manual_seed(seed))
            assert len(mine) == steps and mine == theirs


def test_the_rows_of_one_batch_equal_each_continued_alone(tmp_path, capsys):
    """Samples continue every prompt greedily and by a seeded draw as the rows of one batch,
    prompts of different lengths joining it once their texts are as long: each row's ids
    equal continuing it alone, past the context, and when a row ends before the others."""
    import torch

    from minigpt_tui.engine.analysis.generation import eligibility_mask
    from minigpt_tui.engine.session.watching import _continue, _continue_rows

    run = run_cli_json_in_process(capsys, "train", "--preset", "tiny", "--run", "tiny")
    portable = load_portable_model(Path(run["checkpoints"][-1]))
    model, tokenizer = portable.model.eval(), portable.tokenizer
    short, long = tokenizer.encode_prompt("The key"), tokenizer.encode_prompt("The key is red. Answer:")
    assert len(short) < len(long)
    steps = model.config.context + 5
    eligible = eligibility_mask(tokenizer.vocab_size, bos_id=tokenizer.bos_id, eos_ids=())
    starts = [short, short, long, long]

    def generators():
        return [None, torch.Generator().manual_seed(7), None, torch.Generator().manual_seed(8)]

    class EndsAt:
        """The tokenizer with one more end id: the short prompt's fourth greedy choice."""

        def __init__(self, end: int) -> None:
            self.eos_ids = (*tokenizer.eos_ids, end)

    with torch.no_grad():
        greedy_alone = _continue(model, tokenizer, short, steps, eligible, None)
        for reader in (tokenizer, EndsAt(greedy_alone[3])):
            alone = [_continue(model, reader, ids, steps, eligible, generator)
                     for ids, generator in zip(starts, generators())]
            assert _continue_rows(model, reader, starts, steps, eligible, generators()) == alone
            # The long prompts first: the short rows decide while the rows before them ride along.
            assert _continue_rows(model, reader, starts[2:] + starts[:2], steps, eligible,
                                  generators()[2:] + generators()[:2]) == alone[2:] + alone[:2]
    assert len(alone[0]) <= 4 < steps  # the short prompt's greedy row stopped early, at its end id
    assert len(greedy_alone) == steps
