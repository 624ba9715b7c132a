"""A fine-tune update on a GPT-2-small-shaped model (124M parameters: 12 blocks of width
768, 12 heads, 1024 positions, 50,257 ids; random weights made here) against transformers'
own training step at the same shape and batch.

Ours: the `finetune` preset's update through the trainer (fast precision, float32, 1 window
x 8 accumulated microbatches of 256 tokens, AdamW fused, clipping at 1.0), started with
`train --init-from` semantics from a transformers folder. Baseline: `GPT2LMHeadModel` on the
same windows: forward with labels, backward over the 8 microbatches, gradient clipping,
fused AdamW step, zero_grad. Both 2 threads, in this process, warmed up, interleaved.

    .venv/bin/python benchmarks/bench_finetune.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from timing import interleaved, ratio  # noqa: E402


def make_folder(folder: Path) -> Path:
    import transformers as tr
    from family_support import byte_level_tokenizer

    raw = byte_level_tokenizer(vocab=400)
    end = raw.token_to_id("<|endoftext|>")
    config = tr.GPT2Config(vocab_size=50257, n_embd=768, n_head=12, n_layer=12, n_positions=1024,
                           bos_token_id=end, eos_token_id=end)
    torch.manual_seed(0)
    model = tr.GPT2LMHeadModel(config)
    model.save_pretrained(folder)
    tr.PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<|endoftext|>",
                               eos_token="<|endoftext|>").save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(2)
    import transformers as tr
    from family_support import training_text

    from minigpt_tui.engine.core.config import load_config
    from minigpt_tui.engine.training.corpus import Corpus
    from minigpt_tui.engine.session.plans import _warm_start_model, fitted_config
    from minigpt_tui.engine.training.trainer import Trainer, TrainingSetup, apply_precision

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        started = time.perf_counter()
        folder = make_folder(tmp_path / "gpt2-124m")
        print(f"made the folder in {time.perf_counter() - started:.1f} s")
        corpus_file = tmp_path / "notes.txt"
        corpus_file.write_text("\n\n".join(training_text() * 40), encoding="utf-8")
        config = load_config("finetune", overrides={"corpus": {"source": str(corpus_file)},
                                                    "train": {"threads": 2}})
        portable = _warm_start_model(str(folder), tmp_path, config)
        config = fitted_config(config, portable, str(folder))
        apply_precision(config.train)
        torch.set_num_threads(2)
        from minigpt_tui.engine.training.corpus import load_corpus

        corpus: Corpus = load_corpus(config.corpus)
        setup = TrainingSetup.build(config, corpus, portable.tokenizer)
        trainer = Trainer(setup, initial_weights={n: p.detach() for n, p in portable.model.named_parameters()})
        del portable
        print(f"window {config.window}, microbatches {config.train.microbatches} x {config.train.batch_size}")

        reference = tr.GPT2LMHeadModel.from_pretrained(folder).train()
        reference.config.use_cache = False
        optimizer = torch.optim.AdamW(reference.parameters(), lr=3e-5, betas=(0.9, 0.95), weight_decay=0.1,
                                      fused=True)
        # The same 257-token windows: 256 predicted targets each, as in ours.
        drawn = [trainer._batch([i * 300]) for i in range(8)]
        windows = [torch.cat([b.inputs, b.targets[:, -1:]], dim=1) for b in drawn]

        def ours() -> None:
            trainer.update()

        def transformers_step() -> None:
            for ids in windows:
                out = reference(input_ids=ids, labels=ids)
                (out.loss / len(windows)).backward()
            torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        timings = interleaved({"minigpt-tui finetune update": ours, "transformers training step": transformers_step},
                              rounds=args.rounds)
        for timing in timings.values():
            print(timing.line(1.0, "s"))
        print(ratio(timings["minigpt-tui finetune update"], timings["transformers training step"]))
        print(f"peak resident memory of the process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
