"""Watch it learn, test why: how long `heads`, `patch` and `score` take on a GPT-2-small-shaped
model (124M parameters: 12 blocks of width 768, 12 heads, 1024 positions, 50,257 ids; random
weights made here, saved as a transformers folder and opened with our engine), 2 threads,
float32, and what samples and head scores cost a ``mini`` run.

- heads: ``score_heads`` as `minigpt-tui heads` runs it (target: at most 5 s);
- patch: ``Patcher`` + ``sweep`` (what ``patch_prompts`` runs) of resid, attn and mlp over a
  16-id clean/corrupt pair that differ at one position, with a progress callback
  (target: at most 30 s), against the same one patched run at a time (``rows=1``);
  benchmarks/bench_patching.py compares it with the code before batching and on a
  SmolLM2-135M shape;
- score: ``score_text`` of a text of about 10,000 ids (windows of 1024, stride 512) against
  transformers' ``GPT2LMHeadModel`` forward passes, no_grad, over the same windows
  (``scoring.windows``) (target: at most 2x);
- mini: a whole ``mini`` run (exact precision, one thread, no run folder) with samples and
  head scores after every scheduled evaluation against the same run without them
  (interleaved), and their own time inside the run (each evaluation's event to its head
  scores' event) as a share of the run without them (target: at most 5 %).

Each side is warmed up, rounds interleave (benchmarks/timing.py), medians with best/worst.

    .venv/bin/python benchmarks/bench_watch.py [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_finetune import make_folder  # noqa: E402
from timing import interleaved, ratio  # noqa: E402

THREADS = 2
CLEAN_IDS = list(range(1000, 1016))
CORRUPT_IDS = CLEAN_IDS[:7] + [2000] + CLEAN_IDS[8:]


def text_of(tokenizer: object, tokens: int) -> str:
    """A text (the test suite's training text, repeated) that encodes to about ``tokens`` ids."""
    from family_support import training_text

    text = "\n\n".join(training_text())
    while len(tokenizer.encode_prompt(text)) < tokens:  # type: ignore[attr-defined]
        text = text + "\n\n" + text
    low, high = 0, len(text)
    while high - low > 16:  # the shortest prefix with at least ``tokens`` ids, give or take a few
        middle = (low + high) // 2
        if len(tokenizer.encode_prompt(text[:middle])) < tokens:  # type: ignore[attr-defined]
            low = middle
        else:
            high = middle
    return text[:high]


def bench_heads(portable: object, rounds: int) -> None:
    from minigpt_tui.engine.analysis.head_roles import score_heads

    timings = interleaved({"heads (score_heads)": lambda: score_heads(portable.model, portable.tokenizer)},
                          rounds=rounds)
    timing = timings["heads (score_heads)"]
    print(timing.line(1.0, "s"), f"  target <= 5 s: {'met' if timing.median <= 5 else 'MISSED'}")


def bench_patch(portable: object, rounds: int) -> None:
    from minigpt_tui.engine.analysis.patching import Patcher, sweep

    model = portable.model
    steps = [0]

    def progress(done: int, total: int) -> None:
        steps[0] = total

    def run(rows: int | None) -> Callable[[], None]:
        def sweep_once() -> None:
            patcher = Patcher(model, CLEAN_IDS, CORRUPT_IDS, 1100, 1200, rows=rows)
            sweep(patcher, ("resid", "attn", "mlp"), progress)
        return sweep_once

    batched, alone = "patch resid,attn,mlp (16 ids)", "  the same, one run at a time"
    timings = interleaved({batched: run(None), alone: run(1)}, rounds=rounds)
    timing = timings[batched]
    rows = Patcher(model, CLEAN_IDS, CORRUPT_IDS, 1100, 1200).rows
    print(timing.line(1.0, "s"), f"  target <= 30 s: {'met' if timing.median <= 30 else 'MISSED'}")
    print(f"  {steps[0]} patched runs, {rows} a batch, {timing.median / steps[0] * 1e3:.1f} ms each (median)")
    print(timings[alone].line(1.0, "s"), f"({timings[alone].median / steps[0] * 1e3:.1f} ms a run)")
    print(" ", ratio(timing, timings[alone]))


def bench_score(portable: object, folder: Path, tokens: int, rounds: int) -> None:
    import transformers as tr

    from minigpt_tui.engine.analysis.scoring import score_text, windows

    reference = tr.GPT2LMHeadModel.from_pretrained(folder, torch_dtype=torch.float32).eval()
    torch.set_num_threads(THREADS)
    text = text_of(portable.tokenizer, tokens)
    ids = portable.tokenizer.encode_prompt(text)
    context = portable.model.config.context
    spans = windows(len(ids), context, context // 2)
    print(f"score: {len(ids)} ids, {len(spans)} windows of {context} (stride {context // 2})")

    def transformers_windows() -> None:
        with torch.no_grad():
            for start, end, _ in spans:
                reference(input_ids=torch.tensor([ids[start:end]])).logits

    ours_name, theirs_name = "score_text", "transformers forward, same windows"
    timings = interleaved({ours_name: lambda: score_text(portable.model, portable.tokenizer, text),
                           theirs_name: transformers_windows}, rounds=rounds)
    for timing in timings.values():
        print(timing.line(1.0, "s"))
    per_round = [a / b for a, b in zip(timings[ours_name].seconds, timings[theirs_name].seconds)]
    print(ratio(timings[ours_name], timings[theirs_name]),
          f"  target <= 2x: {'met' if statistics.median(per_round) <= 2 else 'MISSED'}")


def bench_mini(rounds: int) -> None:
    from minigpt_tui.engine.analysis.generation import load_probes
    from minigpt_tui.engine.core.config import load_config
    from minigpt_tui.engine.session.events import EvaluationDone, HeadsScored
    from minigpt_tui.engine.session.plans import PreparedRun, _default_prompts
    from minigpt_tui.engine.session.training import TrainingSession
    from minigpt_tui.engine.training.corpus import load_corpus
    from minigpt_tui.engine.training.trainer import Trainer, TrainingSetup

    config = load_config("mini")
    corpus = load_corpus(config.corpus)
    probes = load_probes()
    watching: list[float] = []  # seconds from each EvaluationDone to its HeadsScored
    counted = [0]

    def one_run(watched: bool) -> float:
        trainer = Trainer(TrainingSetup.build(config, corpus))
        prompts = _default_prompts(trainer, probes) if watched else None
        evaluated_at = [0.0]

        def sink(event: object) -> None:
            if isinstance(event, EvaluationDone):
                evaluated_at[0] = time.perf_counter()
            elif isinstance(event, HeadsScored):
                watching.append(time.perf_counter() - evaluated_at[0])
                counted[0] += 1

        session = TrainingSession(lambda: PreparedRun(trainer, sample_prompts=prompts), sink)
        start = time.perf_counter()
        session.run()
        return time.perf_counter() - start

    one_run(True)  # warm up
    watching.clear()
    counted[0] = 0
    with_times, without_times = [], []
    for r in range(rounds):
        pair = [(True, with_times), (False, without_times)]
        for watched, times in pair if r % 2 == 0 else reversed(pair):
            times.append(one_run(watched))
    ratios = [w / b for w, b in zip(with_times, without_times)]
    baseline = statistics.median(without_times)
    print(f"mini: {config.train.steps} updates, {counted[0] // rounds} scheduled evaluations watched, "
          f"{config.dtype_name}, exact precision (one thread), {rounds} interleaved rounds")
    print(f"  run with samples and heads     {statistics.median(with_times):7.2f} s  "
          f"(best {min(with_times):.2f}, worst {max(with_times):.2f})")
    print(f"  run without (--no-watch)       {baseline:7.2f} s  "
          f"(best {min(without_times):.2f}, worst {max(without_times):.2f})")
    print(f"  ratio {statistics.median(ratios):.3f}x (rounds {min(ratios):.3f}x-{max(ratios):.3f}x)")
    per_run = sum(watching) / rounds
    share = per_run / baseline
    print(f"  samples + heads inside the run: {per_run:.3f} s per run = {share:.1%} of the run without them "
          f"({statistics.median(watching) * 1e3:.1f} ms per evaluation)  target <= 5 %: "
          f"{'met' if share <= 0.05 else 'MISSED'}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round each, a 2,000-id text for score")
    parser.add_argument("--only", choices=("heads", "patch", "score", "mini"), action="append",
                        help="run only these parts (repeatable)")
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    parts = args.only or ["heads", "patch", "score", "mini"]
    torch.set_num_threads(THREADS)
    from minigpt_tui.engine.models.hf_models import open_hf_model

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        folder = make_folder(Path(tmp) / "gpt2-124m")
        portable = open_hf_model(folder, dtype="float32")
        torch.set_num_threads(THREADS)
        print(f"made and opened the 124M folder in {time.perf_counter() - started:.1f} s; "
              f"{torch.get_num_threads()} threads, float32, {rounds} round(s) after a warm-up")
        if "heads" in parts:
            bench_heads(portable, rounds)
        if "patch" in parts:
            bench_patch(portable, rounds)
        if "score" in parts:
            bench_score(portable, folder, 2000 if args.quick else 10_000, rounds)
    if "mini" in parts:
        bench_mini(rounds)


if __name__ == "__main__":
    main()
