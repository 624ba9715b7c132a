"""Export to a transformers folder and convert back, on the small preset (~1.7M parameters).

Baselines: our own portable-model save (for export: both write the same tensors, fsynced)
and load + save (for convert: it reads a folder and writes a model file). When transformers
is installed, its ``save_pretrained`` / ``from_pretrained`` of the exported model are shown
as well. Each operation runs ROUNDS times; the best and median rounds are reported, and
ratios use the medians.

    .venv/bin/python benchmarks/bench_interop.py
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from minigpt_tui.engine.formats.portable import save_portable_model
from minigpt_tui.engine.models.model_file import load_portable_model
from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.formats.hf_export import export_hf
from minigpt_tui.engine.models.hf_models import convert_hf
from minigpt_tui.engine.models.model import MiniGPT
from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer

ROUNDS = 7


def timed(action: Callable[[int], object], cleanup: Callable[[int], object] = lambda _: None) -> list[float]:
    times = []
    for round_index in range(ROUNDS):
        start = time.perf_counter()
        action(round_index)
        times.append(time.perf_counter() - start)
        cleanup(round_index)
    return times


def show(label: str, times: list[float]) -> float:
    median = statistics.median(times)
    print(f"  {label:<44} best {min(times) * 1e3:8.1f} ms   median {median * 1e3:8.1f} ms")
    return median


def main() -> None:
    torch.set_num_threads(1)
    config = load_config("small")
    tokenizer = ByteBPETokenizer.train(load_corpus(config.corpus).train, config.tokenizer.merges)
    work = Path(tempfile.mkdtemp(prefix="bench-interop-"))
    try:
        for dtype in (torch.float32, torch.float64):
            model = MiniGPT(config.model, tokenizer.vocab_size, dtype)
            model.initialize(config.seeds.init)
            source = work / f"small-{dtype}.safetensors"
            save_portable_model(model, tokenizer, source)
            portable = load_portable_model(source)
            scalars = sum(p.numel() for p in model.parameters())
            size = source.stat().st_size
            print(f"small preset, {str(dtype).removeprefix('torch.')}: {scalars} parameters, model file {size / 1e6:.1f} MB")

            saved = show("baseline: save_portable_model",
                         timed(lambda i: save_portable_model(model, tokenizer, work / f"save-{i}.safetensors"),
                               lambda i: (work / f"save-{i}.safetensors").unlink()))
            loaded = show("baseline: load_portable_model", timed(lambda _: load_portable_model(source)))
            exported = show("export --format hf (folder, fsynced)",
                            timed(lambda i: export_hf(portable, work / f"hf-{i}"),
                                  lambda i: shutil.rmtree(work / f"hf-{i}")))
            folder = work / "hf"
            export_hf(portable, folder)
            converted = show("convert --hf (folder -> model file)",
                             timed(lambda i: convert_hf(folder, work / f"back-{i}.safetensors"),
                                   lambda i: (work / f"back-{i}.safetensors").unlink()))
            print(f"  ratio export / save_portable_model           {exported / saved:6.2f}")
            print(f"  ratio convert / (load + save portable model) {converted / (loaded + saved):6.2f}")
            try:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                import transformers
                from transformers import AutoModelForCausalLM
            except ImportError:
                print("  (transformers not installed: its save/load not measured)")
            else:
                transformers.logging.set_verbosity_error()
                transformers.utils.logging.disable_progress_bar()
                hf_model = AutoModelForCausalLM.from_pretrained(folder)
                hf_saved = show("transformers save_pretrained (same model)",
                                timed(lambda i: hf_model.save_pretrained(work / f"pre-{i}"),
                                      lambda i: shutil.rmtree(work / f"pre-{i}")))
                hf_loaded = show("transformers from_pretrained (exported folder)",
                                 timed(lambda _: AutoModelForCausalLM.from_pretrained(folder)))
                print(f"  ratio export / save_pretrained               {exported / hf_saved:6.2f}")
                print(f"  ratio convert / from_pretrained              {converted / hf_loaded:6.2f}")
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
