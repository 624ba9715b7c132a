"""How long a GGUF fine-tune takes to reach its first update, from the command.

The model is a SmolLM2-135M shape (llama: 30 layers, width 576, 9 heads, 3 kv heads, 49,152
ids, tied head) with random weights, written here as a Q8_0 GGUF file by the gguf package,
with a byte-level BPE tokenizer of 2,000 ids trained here. The text is 1 MB gathered from
the documentation and licence files of the installed packages. The command is
``minigpt-tui train --preset finetune --init-from model.gguf --corpus text.txt`` in a new
process, 2 threads, with an empty token cache each time: the seconds from the start of the
process to the first update in the run's ``metrics.jsonl`` cover starting Python, reading
and dequantizing the file, encoding the text and the first update (8 microbatches of 256
tokens). The target is 30 s; the figure is reported as a ratio to it, with the spread.

    .venv/bin/python benchmarks/bench_gguf_finetune.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

TARGET_S = 30.0
TEXT_BYTES = 1_000_000


def make_gguf(path: Path) -> Path:
    import transformers as tr
    from family_support import byte_level_tokenizer
    from gguf_support import write_gguf

    config = tr.LlamaConfig(hidden_size=576, num_attention_heads=9, num_key_value_heads=3, intermediate_size=1536,
                            num_hidden_layers=30, vocab_size=49152, max_position_embeddings=2048,
                            tie_word_embeddings=True)
    torch.manual_seed(0)
    model = tr.LlamaForCausalLM(config)
    return write_gguf(model, byte_level_tokenizer(vocab=2000), "llama", path, quant="Q8_0")


def make_text(path: Path) -> Path:
    """1 MB of English prose from the installed packages' own documentation and licences."""
    site = Path(sysconfig.get_paths()["purelib"])
    parts: list[str] = []
    size = 0
    for file in sorted(site.rglob("*")):
        if file.suffix.lower() not in {".md", ".rst", ".txt"} and not file.name.startswith(("LICENSE", "README")):
            continue
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        parts.append(text)
        size += len(text.encode("utf-8"))
        if size >= TEXT_BYTES:
            break
    path.write_bytes("\n\n".join(parts).encode("utf-8")[:TEXT_BYTES].decode("utf-8", "ignore").encode("utf-8"))
    return path


def first_update_seconds(root: Path, model: Path, text: Path, round_: int) -> float:
    env = dict(os.environ, MINIGPT_TUI_RUNS_DIR=str(root / f"runs-{round_}"),
               MINIGPT_TUI_CACHE_DIR=str(root / f"cache-{round_}"), OMP_NUM_THREADS="2")
    metrics = root / f"runs-{round_}" / "bench" / "metrics.jsonl"
    command = [sys.executable, "-m", "minigpt_tui", "train", "--preset", "finetune", "--init-from", str(model),
               "--corpus", str(text), "--run", "bench", "--threads", "2", "--json"]
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while process.poll() is None:
            if metrics.exists() and any(json.loads(line).get("kind") == "update"
                                        for line in metrics.read_text().splitlines() if line.strip()):
                return time.perf_counter() - start
            time.sleep(0.05)
        raise SystemExit(f"the run ended before its first update: {process.stderr.read()}")
    finally:
        process.kill()
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = make_gguf(root / "smollm2-135M-Q8_0.gguf")
        text = make_text(root / "text.txt")
        print(f"GGUF file {model.stat().st_size:,} bytes; text {text.stat().st_size:,} bytes")
        seconds = [first_update_seconds(root, model, text, r) for r in range(args.rounds)]
    median = statistics.median(seconds)
    print(f"first update after {median:.1f} s (rounds {', '.join(f'{s:.1f}' for s in seconds)}); "
          f"{median / TARGET_S:.2f}x the {TARGET_S:.0f} s target "
          f"({min(seconds) / TARGET_S:.2f}x-{max(seconds) / TARGET_S:.2f}x)")


if __name__ == "__main__":
    main()
