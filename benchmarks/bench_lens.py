"""Cost of looking inside decisions: lens + contributions, and a two-model contrast.

1. One decision of the ``small`` preset (fresh model, the preset's precision, one thread)
   with a prefix of PREFIX ids: the full logit lens (every layer, top 5) and the chosen
   id's direct contributions, against the baseline of the plain decision itself (the
   stepper's recomputing forward, rule and records). Rounds interleave the two.
2. A 64-token contrast of two ``small`` checkpoints (two initializations): A's greedy
   path of 64 ids and both models' forward over it, against the baseline of A generating
   the same 64 ids alone.

Reported: median time of each, the per-round ratio (median, min-max) against the baseline.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_lens.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from types import SimpleNamespace

import torch

from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.analysis.contrast import contrast_models
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.analysis.generation import DecisionStepper, GenerationRule
from minigpt_tui.engine.analysis.lens import inspect_decision
from minigpt_tui.engine.models.model import MiniGPT
from minigpt_tui.engine.training.trainer import TrainingSetup, dtype_for

ROUNDS = 15
CONTRAST_ROUNDS = 5
PREFIX = 100
PROMPT = "The key is red. Answer: "


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def report(label: str, measured: list[float], baseline: list[float], base_label: str, target: float) -> None:
    ratios = [m / b for m, b in zip(measured, baseline)]
    middle = statistics.median(measured)
    print(f"  {label:<34} {middle * 1e3:9.2f} ms  (target {target * 1e3:.0f} ms: {'met' if middle <= target else 'MISSED'})")
    print(f"  {base_label:<34} {statistics.median(baseline) * 1e3:9.2f} ms  (baseline)")
    print(f"  ratio {statistics.median(ratios):.2f}x (min {min(ratios):.2f}x, max {max(ratios):.2f}x) over "
          f"{len(ratios)} interleaved rounds")


def fresh_model(config, vocab_size: int, seed: int) -> MiniGPT:
    model = MiniGPT(config.model, vocab_size, dtype_for(config.train.precision))
    model.initialize(seed)
    model.eval()
    return model


def main() -> None:
    torch.set_num_threads(1)
    config = load_config("small")
    tokenizer = TrainingSetup.build(config, load_corpus(config.corpus)).tokenizer
    model_a = fresh_model(config, tokenizer.vocab_size, config.seeds.init)
    model_b = fresh_model(config, tokenizer.vocab_size, config.seeds.init + 1)
    prompt = (PROMPT * 20)[: 400]
    prompt_ids = tokenizer.encode_prompt(prompt)[:PREFIX]
    prompt = tokenizer.decode(prompt_ids).data.decode("utf-8", errors="replace")
    print(f"small: {config.model.family}, width {config.model.width}, {config.model.layers} layers, "
          f"{config.model.heads} heads, vocab {tokenizer.vocab_size}, {config.dtype_name}, "
          f"{torch.get_num_threads()} thread")

    def plain_decision() -> DecisionStepper:
        stepper = DecisionStepper(model_a, tokenizer, prompt, GenerationRule.greedy(1), top_n=10)
        stepper.step()
        return stepper

    decision = plain_decision().decisions[0]
    ids, chosen = decision.prefix_ids, decision.chosen.id

    def lens_and_contributions() -> None:
        inspect_decision(model_a, tokenizer, ids, chosen, lens=True, contributions=True)

    for _ in range(3):  # warm up
        plain_decision()
        lens_and_contributions()
    lens_times, plain_times = [], []
    for _ in range(ROUNDS):
        plain_times.append(timed(plain_decision))
        lens_times.append(timed(lens_and_contributions))
    print(f"one decision, prefix of {len(ids)} ids")
    report(f"lens ({config.model.layers + 1} rows, top 5) + contributions", lens_times, plain_times, "plain decision", 0.050)

    a = SimpleNamespace(model=model_a, tokenizer=tokenizer)
    b = SimpleNamespace(model=model_b, tokenizer=tokenizer)
    rule = GenerationRule.greedy(64)
    short_prompt = "The key is red."

    def contrast() -> None:
        result = contrast_models(a, b, short_prompt, rule=rule)
        assert len(result.positions) == 64

    def generate_alone() -> None:
        DecisionStepper(model_a, tokenizer, short_prompt, rule, top_n=1).run()

    contrast()
    generate_alone()
    contrast_times, alone_times = [], []
    for _ in range(CONTRAST_ROUNDS):
        alone_times.append(timed(generate_alone))
        contrast_times.append(timed(contrast))
    print("contrast of two small models over 64 generated ids")
    report("contrast (A's path + both forwards)", contrast_times, alone_times, "A generating 64 ids alone", 2.0)


if __name__ == "__main__":
    main()
