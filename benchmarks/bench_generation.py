"""Time per generation decision: recompute against KV cache, and the stepper against a bare loop.

For the mini and small presets (fresh models, no training needed for timing), a greedy
continuation from a short prompt runs until the context is full. Measured, best of
ROUNDS, per decision:

- recompute: the stepper's default, the whole prefix every decision;
- kv-cache: the stepper feeding only the newest id after the first decision;
- bare: a baseline greedy loop (forward the prefix, argmax of the last logits, append)
  with no decision records, to show what the records cost.

Ratios printed: recompute / kv-cache and stepper (recompute) / bare.

    .venv/bin/python benchmarks/bench_generation.py
"""

from __future__ import annotations

import time

import torch

from minigpt_tui.engine.config import load_config
from minigpt_tui.engine.corpus import load_corpus
from minigpt_tui.engine.generation import DecisionStepper, GenerationRule
from minigpt_tui.engine.model import MiniGPT
from minigpt_tui.engine.trainer import TrainingSetup, apply_precision, dtype_for

ROUNDS = 3
PROMPT = "The key is red. Answer: "


def stepper_round(model: MiniGPT, tokenizer, budget: int, kv: bool) -> tuple[float, int]:
    stepper = DecisionStepper(model, tokenizer, PROMPT, GenerationRule(max_new_tokens=budget),
                              use_kv_cache=kv, top_n=10)
    start = time.perf_counter()
    stepper.run()
    return time.perf_counter() - start, len(stepper.decisions)


def bare_round(model: MiniGPT, tokenizer, decisions: int) -> float:
    ids = tokenizer.encode_prompt(PROMPT)
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(decisions):
            logits = model(torch.tensor([ids]))
            ids.append(int(logits.logits[0, -1, 1:].argmax()) + 1)  # never BOS
    return time.perf_counter() - start


def bench(preset: str) -> None:
    config = load_config(preset)
    apply_precision(config.train)
    setup = TrainingSetup.build(config, load_corpus(config.corpus))
    model = MiniGPT(config.model, setup.tokenizer.vocab_size, dtype_for(config.train.precision))
    model.initialize(config.seeds.init)
    model.eval()
    budget = config.model.context - len(setup.tokenizer.encode_prompt(PROMPT))
    recompute, cached, bare = [], [], []
    for _ in range(ROUNDS):
        t, n = stepper_round(model, setup.tokenizer, budget, kv=False)
        recompute.append(t / n)
        t, n_kv = stepper_round(model, setup.tokenizer, budget, kv=True)
        cached.append(t / n_kv)
        bare.append(bare_round(model, setup.tokenizer, n) / n)
    r, c, b = min(recompute), min(cached), min(bare)
    print(f"{preset}: {config.model.family}, context {config.model.context}, {config.dtype_name}, "
          f"{torch.get_num_threads()} thread(s), {n} decisions from a {config.model.context - budget}-id prompt")
    print(f"  recompute   {r * 1e3:8.3f} ms/decision")
    print(f"  kv-cache    {c * 1e3:8.3f} ms/decision")
    print(f"  bare loop   {b * 1e3:8.3f} ms/decision (baseline: no records, recompute)")
    print(f"  recompute / kv-cache = {r / c:.2f}x;  stepper / bare = {r / b:.2f}x")


def main() -> None:
    for preset in ("mini", "small"):
        bench(preset)


if __name__ == "__main__":
    main()
