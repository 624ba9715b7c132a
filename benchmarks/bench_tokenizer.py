"""Byte-level BPE training and batch encoding on 5 MB of generated records.

Baseline: the Hugging Face `tokenizers` BPE trainer on the same text with byte-level
pre-tokenization off (its ids come in its own alphabet order and its ties break there, so
it is a speed reference, not a drop-in). It is skipped when `tokenizers` is not installed
(it comes with the `test` extra's transformers).

    .venv/bin/python benchmarks/bench_tokenizer.py
"""

from __future__ import annotations

import random
import time

from minigpt_tui.engine.tokenizer import ByteBPETokenizer

MERGES = 256
SIZE = 5_000_000


def generated_records() -> list[str]:
    rng = random.Random(0)
    words = ("the a key box cup red blue green answer old new limit price count speed score small "
             "models learn short patterns first lines are easy to").split()
    lines: list[str] = []
    size = 0
    while size < SIZE:
        line = " ".join(rng.choice(words) for _ in range(rng.randint(5, 14))) + f" {rng.randint(0, 999)}."
        lines.append(line)
        size += len(line) + 1
    return lines


def main() -> None:
    lines = generated_records()
    print(f"{len(lines)} records, {sum(len(x) + 1 for x in lines) / 1e6:.1f} MB, {MERGES} merges")
    start = time.perf_counter()
    tokenizer = ByteBPETokenizer.train(lines, MERGES)
    trained = time.perf_counter() - start
    start = time.perf_counter()
    ids = tokenizer.encode_many(lines)
    encoded = time.perf_counter() - start
    print(f"  minigpt-tui: train {trained:.2f} s, encode all {encoded:.2f} s ({sum(map(len, ids))} ids)")
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        print("  tokenizers not installed: no baseline")
        return
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=256 + MERGES, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    start = time.perf_counter()
    hf.train_from_iterator(lines, trainer)
    hf_trained = time.perf_counter() - start
    start = time.perf_counter()
    hf.encode_batch(lines)
    hf_encoded = time.perf_counter() - start
    print(f"  tokenizers : train {hf_trained:.2f} s, encode all {hf_encoded:.2f} s")
    print(f"  ratio ours/tokenizers: train {trained / hf_trained:.1f}x, encode {encoded / hf_encoded:.1f}x")


if __name__ == "__main__":
    main()
