"""Models from elsewhere, side by side with transformers, 2 threads.

The models are made here with random weights: a GPT-2-small shape (124M: 12 layers, width
768, vocabulary 50,257) and a SmolLM2-135M shape (llama: 30 layers, width 576, 9 heads, 3 kv
heads, vocabulary 49,152), each saved as a transformers folder; the SmolLM2 shape also as
a Q8_0 GGUF file written by the gguf package. The prompt is 16 ids.

- open + first decision: ours (open the folder, one decision) against transformers'
  ``from_pretrained`` plus its first forward; for GGUF against transformers' GGUF loading;
- a decision with the KV cache: 16 of ours against ``generate(max_new_tokens=16)``, per token;
- lens and contributions of one decision (ours alone: transformers has neither);
- reading a GGUF header (the 49,152 tokens and their merges included);
- peak memory (maximum resident set) of a process that opens the model and decides once.

    .venv/bin/python benchmarks/bench_models.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import interleaved, ratio  # noqa: E402

THREADS = 2
PROMPT_IDS = list(range(1000, 1016))
ROUNDS = 3


def make_models(root: Path, names: tuple[str, ...] = ("gpt2-124M", "smollm2-135M")) -> dict[str, Path]:
    """The shapes named in ``names`` as transformers folders under ``root`` (the SmolLM2
    shape also as a Q8_0 GGUF file)."""
    import transformers as tr
    from family_support import byte_level_tokenizer

    tokenizer = tr.PreTrainedTokenizerFast(tokenizer_object=byte_level_tokenizer(vocab=2000))
    shapes = {
        "gpt2-124M": tr.GPT2Config(n_embd=768, n_head=12, n_layer=12, n_positions=1024, vocab_size=50257),
        "smollm2-135M": tr.LlamaConfig(hidden_size=576, num_attention_heads=9, num_key_value_heads=3,
                                       intermediate_size=1536, num_hidden_layers=30, vocab_size=49152,
                                       max_position_embeddings=2048, tie_word_embeddings=True),
    }
    folders = {}
    for name, config in shapes.items():
        if name not in names:
            continue
        torch.manual_seed(0)
        model = tr.AutoModelForCausalLM.from_config(config)
        folders[name] = root / name
        model.save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
        if name.startswith("smollm2"):
            from gguf_support import write_gguf

            write_gguf(model, byte_level_tokenizer(vocab=2000), "llama", root / "smollm2-135M-Q8_0.gguf", quant="Q8_0")
    return folders


def peak_memory(code: str) -> int:
    """Maximum resident set (bytes) of a fresh process running ``code``, as it reports it:
    VmHWM, the high-water mark of its own memory map. (``getrusage``'s ru_maxrss outlives
    exec on Linux, so a child of this process, which holds the models it made, would report
    this process's peak instead of its own.)"""
    script = (f"import torch; torch.set_num_threads({THREADS})\n{code}\n"
              "import re; print(re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1))")
    done = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    return int(done.stdout.split()[-1]) * 1024


def main() -> None:
    import transformers as tr

    from minigpt_tui.engine.analysis.generation import DecisionStepper
    from minigpt_tui.engine.analysis.generation_rule import GenerationRule
    from minigpt_tui.engine.formats.gguf_file import read_gguf_header
    from minigpt_tui.engine.models.gguf_models import open_gguf_model
    from minigpt_tui.engine.models.hf_models import open_hf_model
    from minigpt_tui.engine.analysis.lens import inspect_decision

    torch.set_num_threads(THREADS)
    root = Path(tempfile.mkdtemp(prefix="bench-models-"))
    folders = make_models(root)
    gguf_path = root / "smollm2-135M-Q8_0.gguf"
    rule = GenerationRule("greedy", max_new_tokens=16)
    prompt = torch.tensor([PROMPT_IDS])
    report: dict[str, object] = {}

    def ours_open(folder: Path, opener=open_hf_model):
        def run():
            portable = opener(folder)
            stepper = DecisionStepper(portable.model, portable.tokenizer, "x", rule)
            stepper.prompt_ids = tuple(PROMPT_IDS)
            return stepper.step()
        return run

    def theirs_open(folder: Path, **kwargs):
        def run():
            model = tr.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kwargs).eval()
            with torch.no_grad():
                return model(prompt).logits[0, -1].argmax()
        return run

    for name, folder in folders.items():
        timings = interleaved({"ours": ours_open(folder), "transformers": theirs_open(folder)}, ROUNDS)
        print(f"{name} open + first decision:")
        for t in timings.values():
            print("  " + t.line())
        print("  " + ratio(timings["ours"], timings["transformers"]))
        report[f"{name}/open"] = timings["ours"].median / timings["transformers"].median

    timings = interleaved({"ours-gguf": ours_open(gguf_path, open_gguf_model),
                           "transformers-gguf": theirs_open(root, gguf_file=gguf_path.name)}, ROUNDS)
    print("smollm2-135M Q8_0 GGUF open + first decision:")
    for t in timings.values():
        print("  " + t.line())
    print("  " + ratio(timings["ours-gguf"], timings["transformers-gguf"]))
    report["gguf/open"] = timings["ours-gguf"].median / timings["transformers-gguf"].median

    for name, folder in folders.items():
        portable = open_hf_model(folder)
        model = tr.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()

        def ours_decisions(portable=portable):
            stepper = DecisionStepper(portable.model, portable.tokenizer, "x", rule, use_kv_cache=True)
            stepper.prompt_ids = tuple(PROMPT_IDS)
            for _ in range(16):
                stepper.step()

        def theirs_generate(model=model):
            with torch.no_grad():
                model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=16, do_sample=False,
                               eos_token_id=None, pad_token_id=0)

        timings = interleaved({"ours": ours_decisions, "transformers": theirs_generate}, ROUNDS)
        print(f"{name} 16 decisions with the KV cache (per token: median / 16):")
        for t in timings.values():
            print(f"  {t.name:<14} {t.median / 16 * 1e3:8.2f} ms per token")
        print("  " + ratio(timings["ours"], timings["transformers"]))
        report[f"{name}/decision"] = timings["ours"].median / timings["transformers"].median

        start = time.perf_counter()
        for _ in range(3):
            inspect_decision(portable.model, portable.tokenizer, PROMPT_IDS, 5, lens=True, contributions=True)
        lens_ms = (time.perf_counter() - start) / 3 * 1e3
        print(f"{name} lens + contributions of one decision: {lens_ms:.1f} ms")
        report[f"{name}/lens_ms"] = lens_ms

    start = time.perf_counter()
    for _ in range(5):
        read_gguf_header(gguf_path)
    header_ms = (time.perf_counter() - start) / 5 * 1e3
    print(f"GGUF header (49,152 tokens, {gguf_path.stat().st_size:,} bytes): {header_ms:.1f} ms")
    report["gguf/header_ms"] = header_ms

    folder = folders["smollm2-135M"]
    ours_code = (f"from minigpt_tui.engine.models.hf_models import open_hf_model\n"
                 f"p = open_hf_model({str(folder)!r})\nimport torch\n"
                 f"with torch.no_grad(): p.model(torch.tensor([{PROMPT_IDS}]))")
    theirs_code = (f"import transformers as tr, torch\n"
                   f"m = tr.AutoModelForCausalLM.from_pretrained({str(folder)!r}, dtype=torch.float32).eval()\n"
                   f"with torch.no_grad(): m(torch.tensor([{PROMPT_IDS}]))")
    ours_peak, theirs_peak = peak_memory(ours_code), peak_memory(theirs_code)
    print(f"smollm2-135M peak memory: ours {ours_peak / 2**20:.0f} MiB, transformers {theirs_peak / 2**20:.0f} MiB "
          f"= {ours_peak / theirs_peak:.2f}x")
    report["smollm2-135M/peak_ratio"] = ours_peak / theirs_peak
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
