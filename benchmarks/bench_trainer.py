"""The trainer's update against a bare PyTorch loop on the same model and batches.

Baseline: a nanoGPT-style loop (forward, mean cross-entropy, backward, AdamW step,
zero_grad) over the very batches the trainer draws, same model class and dtype, one
thread. Both run in this process, interleaved in rounds, and the best round of each is
compared as a ratio (target: trainer / bare <= 1.10 on mini/exact). Also reports the full
mini 600-update schedule with its 13 complete-split evaluations.

    .venv/bin/python benchmarks/bench_trainer.py
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from minigpt_tui.engine.training.batches import NO_TARGET, make_batch
from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.models.model import MiniGPT
from minigpt_tui.engine.training.trainer import TrainingSetup, Trainer, apply_precision, scheduled_work

UPDATES = 200
ROUNDS = 5


def trainer_round(setup: TrainingSetup) -> tuple[float, list[list[list[int]]]]:
    trainer = Trainer(setup)
    start = time.perf_counter()
    batches = [trainer.update().batch for _ in range(UPDATES)]
    return time.perf_counter() - start, batches


def bare_round(setup: TrainingSetup, drawn: list[list[list[int]]], examples) -> float:
    config = setup.config
    model = MiniGPT(config.model, setup.tokenizer.vocab_size, torch.float64)
    model.initialize(config.seeds.init)
    opt = torch.optim.AdamW(model.parameters(), lr=config.train.lr, betas=config.train.betas,
                            eps=config.train.eps, weight_decay=0.0, foreach=False)
    prepared = [make_batch([examples[i] for i in mb[0]]) for mb in drawn]
    start = time.perf_counter()
    for batch in prepared:
        logits = model(batch.inputs).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.targets.reshape(-1),
                               ignore_index=NO_TARGET)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> None:
    config = load_config("mini")
    apply_precision(config.train)
    setup = TrainingSetup.build(config, load_corpus(config.corpus))
    examples = Trainer(setup).train_examples
    ours, bare = [], []
    for _ in range(ROUNDS):
        t, drawn = trainer_round(setup)
        ours.append(t)
        bare.append(bare_round(setup, drawn, examples))
    best_ours, best_bare = min(ours), min(bare)
    print(f"mini/exact, {UPDATES} updates, best of {ROUNDS} rounds")
    print(f"  bare PyTorch loop : {best_bare * 1e3 / UPDATES:.3f} ms/update")
    print(f"  minigpt-tui trainer: {best_ours * 1e3 / UPDATES:.3f} ms/update")
    print(f"  ratio trainer/bare: {best_ours / best_bare:.3f} (target <= 1.10)")

    trainer = Trainer(setup)
    start = time.perf_counter()
    items = list(scheduled_work(trainer))
    elapsed = time.perf_counter() - start
    evaluations = sum(1 for i in items if not hasattr(i, "batch"))
    print(f"mini full schedule: {trainer.step} updates + {evaluations} evaluations in {elapsed:.2f} s")


if __name__ == "__main__":
    main()
