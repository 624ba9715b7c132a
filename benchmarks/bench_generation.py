"""Time per generation decision: recompute against KV cache, and the stepper against a bare loop.

For the mini and small presets (fresh models, no training needed for timing), a greedy
continuation from a short prompt runs until the context is full. Each side is warmed up
once, then the three run in rounds whose order rotates; per decision:

- recompute: the stepper's default, the whole prefix every decision;
- kv-cache: the stepper feeding only the newest id after the first decision;
- bare: a baseline greedy loop (forward the prefix, argmax of the last logits, append)
  with no decision records, to show what the records cost.

Ratios printed (median of the per-round ratios, with their range): recompute / kv-cache
and stepper (recompute) / bare.

    .venv/bin/python benchmarks/bench_generation.py
"""

from __future__ import annotations

import torch
from timing import Timing, interleaved, ratio

from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.analysis.generation import DecisionStepper, GenerationRule
from minigpt_tui.engine.models.model import MiniGPT
from minigpt_tui.engine.training.trainer import TrainingSetup, apply_precision, dtype_for

ROUNDS = 5
PROMPT = "The key is red. Answer: "


def stepper_round(model: MiniGPT, tokenizer, budget: int, kv: bool) -> int:
    stepper = DecisionStepper(model, tokenizer, PROMPT, GenerationRule(max_new_tokens=budget),
                              use_kv_cache=kv, top_n=10)
    stepper.run()
    return len(stepper.decisions)


def bare_round(model: MiniGPT, tokenizer, decisions: int) -> None:
    ids = tokenizer.encode_prompt(PROMPT)
    with torch.no_grad():
        for _ in range(decisions):
            logits = model(torch.tensor([ids]))
            ids.append(int(logits.logits[0, -1, 1:].argmax()) + 1)  # never BOS


def bench(preset: str) -> None:
    config = load_config(preset)
    apply_precision(config.train)
    setup = TrainingSetup.build(config, load_corpus(config.corpus))
    model = MiniGPT(config.model, setup.tokenizer.vocab_size, dtype_for(config.train.precision))
    model.initialize(config.seeds.init)
    model.eval()
    tokenizer = setup.tokenizer
    budget = config.model.context - len(tokenizer.encode_prompt(PROMPT))
    decisions = stepper_round(model, tokenizer, budget, kv=False)
    timings = interleaved({
        "recompute": lambda: stepper_round(model, tokenizer, budget, kv=False),
        "kv-cache": lambda: stepper_round(model, tokenizer, budget, kv=True),
        "bare loop": lambda: bare_round(model, tokenizer, decisions),
    }, ROUNDS, warmup=1)
    per_decision = {name: Timing(name, tuple(t / decisions for t in timing.seconds)) for name, timing in timings.items()}
    print(f"{preset}: {config.model.family}, context {config.model.context}, {config.dtype_name}, "
          f"{torch.get_num_threads()} thread(s), {decisions} decisions from a {config.model.context - budget}-id "
          f"prompt, per decision, {ROUNDS} rounds after a warm-up, order rotating")
    for timing in per_decision.values():
        print("  " + timing.line())
    print("  " + ratio(per_decision["recompute"], per_decision["kv-cache"]))
    print("  " + ratio(per_decision["recompute"], per_decision["bare loop"]))


def main() -> None:
    for preset in ("mini", "small"):
        bench(preset)


if __name__ == "__main__":
    main()
