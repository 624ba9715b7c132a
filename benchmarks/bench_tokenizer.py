"""Byte-level BPE training and batch encoding on 5 MB of generated records, against the
`tokenizers` library: both sides warmed up, then run in alternating order for several
rounds; medians, spreads and per-round ratios are printed.

Baseline: the Hugging Face `tokenizers` BPE trainer on the same text with byte-level
pre-tokenization off (its ids come in its own alphabet order and its ties break there, so
it is a speed reference, not a drop-in). It is skipped when `tokenizers` is not installed
(it comes with the `test` extra's transformers).

    .venv/bin/python benchmarks/bench_tokenizer.py
"""

from __future__ import annotations

import os
import random

from timing import interleaved, ratio

from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer

MERGES = 256
SIZE = int(os.environ.get("BENCH_TOKENIZER_BYTES", "5000000"))  # fewer bytes for a quick look
ROUNDS = 3
WARMUP_RECORDS = 5_000  # both sides run once on these first (imports, allocator, caches)


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
    print(f"{len(lines)} records, {sum(len(x) + 1 for x in lines) / 1e6:.1f} MB, {MERGES} merges, "
          f"{ROUNDS} rounds after a warm-up on {WARMUP_RECORDS} records, sides alternating")
    ours = ByteBPETokenizer.train(lines[:WARMUP_RECORDS], MERGES)
    ours.encode_many(lines[:WARMUP_RECORDS])
    trained: dict[str, ByteBPETokenizer] = {}
    sides = {"minigpt-tui train": lambda: trained.__setitem__("ours", ByteBPETokenizer.train(lines, MERGES))}
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        Tokenizer = None
        print("  tokenizers not installed: no baseline")
    if Tokenizer is not None:
        def hf_tokenizer() -> tuple:
            hf = Tokenizer(models.BPE())
            hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
            hf.decoder = decoders.ByteLevel()
            trainer = trainers.BpeTrainer(vocab_size=256 + MERGES,
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
            return hf, trainer

        hf, hf_trainer = hf_tokenizer()
        hf.train_from_iterator(lines[:WARMUP_RECORDS], hf_trainer)
        hf.encode_batch(lines[:WARMUP_RECORDS])

        trained_hf: dict = {}

        def hf_train() -> None:
            hf, hf_trainer = hf_tokenizer()
            hf.train_from_iterator(lines, hf_trainer)
            trained_hf["hf"] = hf

        sides["tokenizers train"] = hf_train
    train = interleaved(sides, ROUNDS, warmup=0)
    encode_sides = {"minigpt-tui encode all": lambda: trained["ours"].encode_many(lines)}
    if Tokenizer is not None:
        encode_sides["tokenizers encode all"] = lambda: trained_hf["hf"].encode_batch(lines)
    encode = interleaved(encode_sides, ROUNDS, warmup=0)
    for timing in (*train.values(), *encode.values()):
        print("  " + timing.line(1.0, "s"))
    if Tokenizer is not None:
        print("  " + ratio(train["minigpt-tui train"], train["tokenizers train"]))
        print("  " + ratio(encode["minigpt-tui encode all"], encode["tokenizers encode all"]))


if __name__ == "__main__":
    main()
