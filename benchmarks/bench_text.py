"""Your own text at real speed: side-by-side figures for the text pipeline.

Sections (each prints ratios with their spread over interleaved, warmed-up rounds):

- ``encode``: encoding a generated ~20 MB text with our stream encoder against the
  ``tokenizers`` library called directly with the same vocabulary and merges (same
  threads), and learning merges with our trainer against the ``tokenizers`` BPE trainer
  (``merges``: the merge training alone; set ``RAYON_NUM_THREADS=1`` for one library thread,
  as our trainer uses).
- ``update``: one training update of the gpt2 family in float32 (the trainer's whole
  update: batch, forward, backward, clip, AdamW) against nanoGPT-style model code written
  below (fused qkv projection, SDPA, tied head), at width 128 / 4 layers / context 64 and
  width 384 / 6 layers / context 256, batch 12, with 1 and 2 threads.
- ``text``: ``minigpt-tui train --preset text`` against a nanoGPT-style bare loop, each a
  whole process (tokenization and evaluation included), on a generated ~1 MB English text,
  same tokens and schedule: wall time ratio, and both final models' validation loss computed
  here on the same tokens (the whole validation split, tiled) from their saved weights.
- ``memory``: peak resident memory of ``train --preset text`` on a generated 100 MB text
  against the size of its token array, and the start time of a second run (cache hit).
- ``restart``: whole-process ``train --preset text --until 1`` on a generated 100 MB text,
  first run and cache hit, against a cache hit on a 1 MB text, interleaved rounds.

The texts are built at run time from text files already on this machine (documentation
and licences shipped with installed Python packages); nothing is downloaded or committed.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_text.py            # every section (long)
    PYTHONPATH=. .venv/bin/python benchmarks/bench_text.py update [--small-only]
    PYTHONPATH=. .venv/bin/python benchmarks/bench_text.py encode
    PYTHONPATH=. .venv/bin/python benchmarks/bench_text.py merges [--merges 256] [--rounds 9]
    PYTHONPATH=. .venv/bin/python benchmarks/bench_text.py text [--steps 2000] [--rounds 1] [--threads 2] [--together]
    PYTHONPATH=. .venv/bin/python benchmarks/bench_text.py memory
    PYTHONPATH=. .venv/bin/python benchmarks/bench_text.py restart [--rounds 5] [--baseline OTHER-CHECKOUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]


# -- generated English text -----------------------------------------------------------------
def english_text(size: int) -> str:
    """About ``size`` bytes of prose: paragraphs of the text files shipped with installed
    packages (README, licences, docs), in a fixed order, repeated when they run out."""
    roots = sorted({Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()})
    roots.append(Path(sys.base_prefix) / "lib")
    seen: set[str] = set()
    paragraphs: list[str] = []
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.suffix.lower() not in (".txt", ".md", ".rst") or not path.is_file():
                continue
            try:
                text = path.read_text("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            for block in text.split("\n\n"):
                lines = [ln.strip() for ln in block.splitlines() if ln.strip()]
                # Prose-like: mostly letters, not code or tables.
                joined = " ".join(lines)
                letters = sum(c.isalpha() or c == " " for c in joined)
                if len(joined) < 80 or letters < 0.85 * len(joined) or joined in seen:
                    continue
                seen.add(joined)
                paragraphs.append(joined)
            if sum(len(p) for p in paragraphs) > size:
                break
        if sum(len(p) for p in paragraphs) > size:
            break
    if not paragraphs:
        raise SystemExit("no text files found to build a benchmark text from")
    out: list[str] = []
    total = 0
    while total < size:
        for p in paragraphs:
            out.append(p)
            total += len(p) + 2
            if total >= size:
                break
    return "\n\n".join(out) + "\n"


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} (min {min(values):.3f}, max {max(values):.3f}, n={len(values)})"


# -- nanoGPT-style model code (the baseline of `update` and `text`) ---------------------------
class BareAttention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)  # q, k, v in one projection
        self.c_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class BareBlock(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = BareAttention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.c_proj = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))


class BareGPT(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, layers: int, context: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(BareBlock(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        # The text preset's initialization: matrices N(0, 0.02), biases 0, norms 1 (nanoGPT also
        # scales its residual output projections by 1/sqrt(2 * layers); neither side does here).
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def logits(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()  # tied head

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.logits(idx)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def bare_optimizer(model: nn.Module, lr: float, betas: tuple[float, float], decay: float) -> torch.optim.AdamW:
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas)


# -- update -------------------------------------------------------------------------------
UPDATE_SHAPES = [
    {"width": 128, "heads": 4, "layers": 4, "context": 64, "batch": 12},
    {"width": 384, "heads": 6, "layers": 6, "context": 256, "batch": 12},
]


def bench_update(work: Path, rounds: int, updates: int, shapes: list[dict[str, int]]) -> list[dict[str, object]]:
    from minigpt_tui.engine.core.config import load_config
    from minigpt_tui.engine.training.corpus import load_corpus
    from minigpt_tui.engine.training.trainer import Trainer, TrainingSetup, apply_precision

    results = []
    text_path = work / "update.txt"
    text_path.write_text(english_text(400_000), "utf-8")
    os.environ.setdefault("MINIGPT_TUI_CACHE_DIR", str(text_path.parent / "cache"))
    for threads in (1, 2):
        for shape in shapes:
            model = {"family": "gpt2", "width": shape["width"], "heads": shape["heads"], "kv_heads": shape["heads"],
                     "ffn": 4 * shape["width"], "layers": shape["layers"], "context": shape["context"]}
            config = load_config("text", overrides={"model": model, "corpus": {"source": str(text_path)}})
            config = config.replace(train={"threads": threads, "batch_size": shape["batch"], "eval_every": 0})
            apply_precision(config.train)
            trainer = Trainer(TrainingSetup.build(config, load_corpus(config.corpus)))
            bare = BareGPT(trainer.tokenizer.vocab_size, shape["width"], shape["heads"], shape["layers"], shape["context"])
            opt = bare_optimizer(bare, 1e-3, (0.9, 0.99), 0.1)
            windows = trainer.train_examples
            generator = torch.Generator().manual_seed(0)

            def bare_update() -> None:
                starts = torch.randint(len(windows), (shape["batch"],), generator=generator)
                batch = windows.batch(starts.numpy())
                loss = bare(batch.inputs, batch.targets)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(bare.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)

            for _ in range(3):  # warm-up
                trainer.update()
                bare_update()
            ratios, ours_ms, bare_ms = [], [], []
            for _ in range(rounds):
                start = time.perf_counter()
                for _ in range(updates):
                    trainer.update()
                ours = (time.perf_counter() - start) / updates
                start = time.perf_counter()
                for _ in range(updates):
                    bare_update()
                theirs = (time.perf_counter() - start) / updates
                ratios.append(ours / theirs)
                ours_ms.append(ours * 1e3)
                bare_ms.append(theirs * 1e3)
            row = {"threads": threads, **shape, "ours_ms": statistics.median(ours_ms),
                   "bare_ms": statistics.median(bare_ms), "ratio": spread(ratios)}
            print(f"update w{shape['width']} L{shape['layers']} T{shape['context']} B{shape['batch']} "
                  f"threads {threads}: ours {row['ours_ms']:.1f} ms, nanoGPT-style {row['bare_ms']:.1f} ms, "
                  f"ours/nanoGPT-style {row['ratio']}", flush=True)
            results.append(row)
    return results


# -- encode ---------------------------------------------------------------------------------
def bench_encode(rounds: int, megabytes: int, merges: int) -> dict[str, object]:
    from tokenizers import Tokenizer

    from minigpt_tui.engine.training.corpus import parse_records
    from minigpt_tui.engine.training.fast_encoder import FastEncoder
    from minigpt_tui.engine.formats.hf_tokenizer import tokenizer_json
    from minigpt_tui.engine.training.stream import encode_records
    from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer

    text = english_text(megabytes * 1_000_000)
    records = parse_records(text)
    train_text = merge_training_records(records, megabytes)
    tokenizer = ByteBPETokenizer.train(train_text, merges)
    library = Tokenizer.from_str(json.dumps(tokenizer_json(tokenizer)))
    FastEncoder(tokenizer)  # warm imports

    def ours() -> float:
        start = time.perf_counter()
        encode_records(records, tokenizer)
        return time.perf_counter() - start

    def theirs() -> float:
        start = time.perf_counter()
        library.encode_batch(records, add_special_tokens=False)
        return time.perf_counter() - start

    ours(), theirs()
    encode_ratios, ours_s, theirs_s = [], [], []
    for _ in range(rounds):
        a, b = ours(), theirs()
        ours_s.append(a)
        theirs_s.append(b)
        encode_ratios.append(a / b)
    size = len(text.encode("utf-8")) / 1e6
    print(f"encode {size:.1f} MB, {merges} merges, threads {os.environ.get('RAYON_NUM_THREADS', 'library default')}: "
          f"ours {statistics.median(ours_s):.2f} s, tokenizers {statistics.median(theirs_s):.2f} s, "
          f"ours/tokenizers {spread(encode_ratios)}", flush=True)

    merge_row = bench_merges(rounds, train_text, merges)
    return {"encode_mb": size, "encode_ratio": spread(encode_ratios), **merge_row}


def bench_merges(rounds: int, train_text: list[str], merges: int) -> dict[str, object]:
    """Our trainer against the ``tokenizers`` BpeTrainer on the same records, each record one
    word for both (no pre-splitting: the library's byte-level step without its regex), the
    same number of merges; rounds alternate which side runs first."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from minigpt_tui.engine.core.tokenizer import learn_merges

    def our_training() -> float:
        start = time.perf_counter()
        learned = learn_merges(train_text, merges)
        seconds = time.perf_counter() - start
        if len(learned) != merges:
            raise SystemExit(f"our trainer learned {len(learned)} merges, not {merges}")
        return seconds

    def library_training() -> float:
        bpe = Tokenizer(models.BPE())
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        trainer = trainers.BpeTrainer(vocab_size=256 + merges, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        start = time.perf_counter()
        bpe.train_from_iterator(train_text, trainer)
        seconds = time.perf_counter() - start
        learned = bpe.get_vocab_size() - 256
        if learned != merges:
            raise SystemExit(f"the library learned {learned} merges, not {merges}")
        return seconds

    our_training(), library_training()  # warm-up
    ours_s, theirs_s, ratios = [], [], []
    for r in range(rounds):
        if r % 2:
            b, a = library_training(), our_training()
        else:
            a, b = our_training(), library_training()
        ours_s.append(a)
        theirs_s.append(b)
        ratios.append(a / b)
    train_mb = sum(len(t.encode("utf-8")) for t in train_text) / 1e6
    threads = os.environ.get("RAYON_NUM_THREADS", f"library default ({os.cpu_count()} cores)")
    print(f"merge training {train_mb:.2f} MB, {merges} merges, library threads {threads}: "
          f"ours {statistics.median(ours_s):.3f} s, tokenizers BpeTrainer {statistics.median(theirs_s):.3f} s, "
          f"ours/tokenizers {spread(ratios)}; load average {Path('/proc/loadavg').read_text().split()[0]}", flush=True)
    return {"train_mb": train_mb, "train_ratio": spread(ratios), "train_ours_s": ours_s, "train_theirs_s": theirs_s}


def merge_training_records(records: list[str], megabytes: int) -> list[str]:
    """The records merges are learned from: the first ~0.5 MB of a ``megabytes`` MB text."""
    return records[: max(1, len(records) // (megabytes * 2))]


# -- text: whole processes ----------------------------------------------------------------------
# The bare loop reads the same paragraphs, splits them by the same rule (record i, 1-based, is
# validation when i % 10 == 0), joins each split as BOS bytes EOS with ids = byte + 2, and
# follows the text preset's schedule: update s (1-based) uses lr * s / warmup during warmup,
# then cosine to final_lr over the remaining updates; AdamW betas (0.9, 0.99), weight decay
# 0.1 on matrices only, global-norm clip 1, no dropout, batches of 12 windows of 65 tokens at
# offsets drawn uniformly with replacement, 20 batches per split every 250 updates. It saves
# its final weights so the benchmark evaluates both final models on the same tokens.
BARE_LOOP = r'''
import json, math, sys, time
import numpy as np, torch
from safetensors.torch import save_file
sys.path.insert(0, sys.argv[3])
from benchmarks.bench_text import BareGPT, bare_optimizer, bare_split_tokens
torch.set_num_threads(int(sys.argv[5]))
torch.manual_seed(1337)
train, val = bare_split_tokens(open(sys.argv[1], encoding="utf-8").read())
steps, block, batch, warmup, lr, final_lr = int(sys.argv[2]), 64, 12, 100, 1e-3, 1e-4
model = BareGPT(258, 128, 4, 4, block)
opt = bare_optimizer(model, lr, (0.9, 0.99), 0.1)
def lr_at(step):  # 1-based, as the text preset's schedule
    if step <= warmup: return lr * step / warmup
    progress = (step - warmup) / (steps - warmup)
    return final_lr + (lr - final_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
def get_batch(data):
    ix = torch.randint(len(data) - block, (batch,))
    w = torch.from_numpy(data[ix.numpy()[:, None] + np.arange(block + 1)])
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()
@torch.no_grad()
def estimate(data):
    model.eval()
    losses = [float(model(*get_batch(data))) for _ in range(20)]
    model.train()
    return sum(losses) / len(losses)
last = None
for it in range(steps + 1):
    if it % 250 == 0 or it == steps:
        last = {"step": it, "train": estimate(train), "val": estimate(val)}
    if it == steps:
        break
    for g in opt.param_groups: g["lr"] = lr_at(it + 1)
    x, y = get_batch(train)
    loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, sys.argv[4])
print(json.dumps(last))
'''


def bare_split_tokens(text: str) -> tuple[np.ndarray, np.ndarray]:
    """The bare loop's token arrays: each paragraph as BOS bytes EOS (ids: byte + 2), record
    i (1-based) validation when i % 10 == 0."""
    from minigpt_tui.engine.training.corpus import parse_records

    records = parse_records(text)

    def encode(parts: list[str]) -> np.ndarray:
        return np.concatenate([np.concatenate(([0], np.frombuffer(p.encode("utf-8"), dtype=np.uint8).astype(np.int64) + 2,
                                               [1])) for p in parts])

    train = [r for i, r in enumerate(records) if (i + 1) % 10]
    validation = [r for i, r in enumerate(records) if (i + 1) % 10 == 0]
    return encode(train), encode(validation)


@torch.no_grad()
def tiled_loss(logits_of: Callable[[torch.Tensor], torch.Tensor], tokens: np.ndarray, context: int) -> float:
    """Mean loss over every non-overlapping window of ``context + 1`` tokens from the start:
    each covered target predicted once, in batches of 64 windows."""
    starts = np.arange(0, tokens.size - context, context)
    span = np.arange(context + 1)
    total, count = 0.0, 0
    for first in range(0, starts.size, 64):
        windows = torch.from_numpy(tokens[starts[first : first + 64, None] + span].astype(np.int64))
        logits = logits_of(windows[:, :-1])
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), windows[:, 1:].reshape(-1),
                                       reduction="sum"))
        count += windows[:, 1:].numel()
    return total / count


def final_losses_on_the_same_tokens(corpus: Path, our_checkpoint: str, bare_weights: Path) -> dict[str, float]:
    """Both final models on the whole validation split, tiled, from the saved files; also
    checks that our run's validation tokens are the bare loop's."""
    from safetensors.torch import load_file

    from minigpt_tui.engine.models.model_file import load_portable_model
    from minigpt_tui.engine.training.corpus import CorpusConfig, load_corpus
    from minigpt_tui.engine.training.stream import encode_records
    from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer

    _, validation = bare_split_tokens(corpus.read_text("utf-8"))
    ours_split = encode_records(load_corpus(CorpusConfig(source=str(corpus), val_every=10)).validation, ByteBPETokenizer())
    if not np.array_equal(ours_split.astype(np.int64), validation):
        raise SystemExit("the bare loop's validation tokens differ from the text preset's")
    ours = load_portable_model(our_checkpoint).model.eval()
    context = ours.config.context
    bare = BareGPT(258, 128, 4, 4, context)
    bare.load_state_dict(load_file(str(bare_weights)))
    bare.eval()
    return {
        "ours": tiled_loss(lambda ids: ours(ids).logits, validation, context),
        "bare": tiled_loss(bare.logits, validation, context),
        "tokens": int(validation.size),
    }


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def bench_text(work: Path, rounds: int, steps: int, threads: int = 2, together: bool = False) -> dict[str, object]:
    """Whole processes, both under ``nice -n 10`` with the same thread count, in alternating
    order (ours first in odd rounds, the bare loop first in even ones), with the load average
    before each. ``together`` starts both at once instead (each timed from the common start
    to its own end): on a machine loaded by other work both then meet the same load."""
    corpus = work / "english.txt"
    corpus.write_text(english_text(1_000_000), "utf-8")
    env = dict(os.environ, PYTHONPATH=str(ROOT), MINIGPT_TUI_RUNS_DIR=str(work / "runs"),
               MINIGPT_TUI_CACHE_DIR=str(work / "cache"))
    (work / "bare.py").write_text(BARE_LOOP, "utf-8")
    nice = ["nice", "-n", "10"]
    ours_s, bare_s, ratios, common = [], [], [], []

    def ours_command(r: int) -> list[str]:
        subprocess.run([sys.executable, "-m", "minigpt_tui", "cache", "clear"], env=env, capture_output=True, check=True)
        return [*nice, sys.executable, "-m", "minigpt_tui", "train", "--preset", "text", "--corpus", str(corpus),
                "--steps", str(steps), "--threads", str(threads), "--run", f"r{r}", "--json"]

    def bare_command(r: int) -> list[str]:
        return [*nice, sys.executable, str(work / "bare.py"), str(corpus), str(steps), str(ROOT),
                str(work / f"bare-r{r}.safetensors"), str(threads)]

    def timed(*commands: list[str]) -> list[tuple[float, dict[str, Any]]]:
        """Start the commands at once; each one's seconds to its end and its JSON output."""
        outputs = [(work / f"out-{i}.json", work / f"err-{i}.txt") for i in range(len(commands))]
        start = time.perf_counter()
        running = []
        for command, (out_path, err_path) in zip(commands, outputs):
            with out_path.open("w") as out, err_path.open("w") as err:  # files: a full pipe would stall a side
                running.append(subprocess.Popen(command, env=env, stdout=out, stderr=err))
        ends: dict[int, float] = {}
        while len(ends) < len(running):
            for i, process in enumerate(running):
                if i not in ends and process.poll() is not None:
                    ends[i] = time.perf_counter() - start
            time.sleep(0.05)
        results = []
        for i, (process, (out_path, err_path)) in enumerate(zip(running, outputs)):
            if process.returncode:
                raise SystemExit(f"{' '.join(commands[i][:6])}... failed: {err_path.read_text()[-400:]}")
            results.append((ends[i], json.loads(out_path.read_text())))
        return results

    for r in range(rounds):
        loads = [load_average()]
        if together:
            (ours, result), (theirs, bare) = timed(ours_command(r), bare_command(r))
            order = "both at once"
        elif r % 2 == 0:
            [(ours, result)] = timed(ours_command(r))
            loads.append(load_average())
            [(theirs, bare)] = timed(bare_command(r))
            order = "ours first"
        else:
            [(theirs, bare)] = timed(bare_command(r))
            loads.append(load_average())
            [(ours, result)] = timed(ours_command(r))
            order = "bare loop first"
        final = final_losses_on_the_same_tokens(corpus, result["checkpoints"][-1], work / f"bare-r{r}.safetensors")
        ours_s.append(ours)
        bare_s.append(theirs)
        ratios.append(ours / theirs)
        common.append(final)
        print(f"text round {r + 1} ({order}, {threads} threads each; load average before: {' | '.join(loads)}): "
              f"ours {ours:.1f} s, bare loop {theirs:.1f} s, ratio {ours / theirs:.3f}; own evaluations: ours "
              f"{result['evaluations'][-1]['validation_loss']:.4f} (20 fixed batches), bare loop {bare['val']:.4f} "
              f"(20 fresh batches); whole validation split ({final['tokens']} tokens, tiled): ours "
              f"{final['ours']:.4f}, bare loop {final['bare']:.4f}, difference {final['ours'] - final['bare']:+.4f}",
              flush=True)
    size = corpus.stat().st_size / 1e6
    differences = [c["ours"] - c["bare"] for c in common]
    print(f"text preset on {size:.2f} MB, {steps} updates, {threads} threads, {rounds} rounds: whole-process time "
          f"ours/bare loop {spread(ratios)}; validation loss on the same tokens: ours "
          f"{statistics.median(c['ours'] for c in common):.4f}, bare loop "
          f"{statistics.median(c['bare'] for c in common):.4f}, difference {spread(differences)}", flush=True)
    return {"ratio": spread(ratios), "ours_s": ours_s, "bare_s": bare_s, "common": common}


# -- memory -----------------------------------------------------------------------------------
def write_big_text(path: Path, megabytes: int) -> Path:
    """A text of about ``megabytes`` MB: the generated English block, repeated."""
    block = english_text(4_000_000)
    with path.open("w", encoding="utf-8") as out:
        written = 0
        while written < megabytes * 1_000_000:
            out.write(block)
            out.write("\n")
            written += len(block) + 1
    return path


def measured_train(work: Path, corpus: Path, tree: Path = ROOT) -> dict[str, Any]:
    """``train --preset text --corpus CORPUS --until 1 --json`` as a whole process: its wall
    time (start to exit, so to the end of update 1 plus the final save), the time until its
    run folder was written (preparation done: corpus, tokens, model and optimizer ready, the
    step-0 evaluation next), its CPU time (user + system, all threads: less sensitive than
    wall time to other work on a shared machine), peak RSS and result. ``tree``: the source tree to run (another
    checkout of the project as a baseline; each tree has its own cache)."""
    cache = "cache" if tree == ROOT else f"cache-{tree.name}"
    env = dict(os.environ, PYTHONPATH=str(tree), MINIGPT_TUI_RUNS_DIR=str(work / "runs"),
               MINIGPT_TUI_CACHE_DIR=str(work / cache))
    measure = (
        "import resource, subprocess, sys, time, json; wall = time.time(); start = time.perf_counter(); "
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
        "use = resource.getrusage(resource.RUSAGE_CHILDREN); peak = use.ru_maxrss * 1024; "
        "print(json.dumps({'rc': done.returncode, 'peak': peak, 'seconds': time.perf_counter() - start, "
        "'cpu': use.ru_utime + use.ru_stime, 'wall': wall, 'stdout': done.stdout, 'stderr': done.stderr[-400:]}))"
    )
    command = [sys.executable, "-c", measure, sys.executable, "-m", "minigpt_tui", "train", "--preset", "text",
               "--corpus", str(corpus), "--until", "1", "--json"]
    # In the tree's folder: Python puts the working folder first on the path, before PYTHONPATH.
    out = json.loads(subprocess.run(command, env=env, capture_output=True, text=True, check=True, cwd=tree).stdout)
    if out["rc"] != 0:
        raise SystemExit(f"train --preset text on {corpus} failed: {out['stderr']}")
    result = json.loads(out["stdout"])
    ready = (Path(result["run_dir"]) / "identities.json").stat().st_mtime - out["wall"]
    return {"peak": out["peak"], "seconds": out["seconds"], "cpu": out["cpu"], "ready": ready, "result": result}


PREPARATION = """
import json, sys, time
import torch
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.session.inputs import RunChoices
from minigpt_tui.engine.training.trainer import TrainingSetup, apply_precision
config = RunChoices("text", None, corpus=sys.argv[1]).resolve()
apply_precision(config.train)
wall, cpu = time.perf_counter(), time.process_time()
setup = TrainingSetup.build(config, load_corpus(config.corpus))
import minigpt_tui
print(json.dumps({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
                  "identity": setup.corpus.identity, "tokens": setup.token_stream().tokens,
                  "tree": str(minigpt_tui.__file__)}))
"""


def measured_preparation(work: Path, corpus: Path, tree: Path = ROOT) -> dict[str, Any]:
    """The corpus-dependent start-up alone, in a process that has imported torch: reading
    the corpus and getting its token arrays (from the cache when it holds them)."""
    cache = "cache" if tree == ROOT else f"cache-{tree.name}"
    env = dict(os.environ, PYTHONPATH=str(tree), MINIGPT_TUI_CACHE_DIR=str(work / cache))
    done = subprocess.run([sys.executable, "-c", PREPARATION, str(corpus)], env=env, capture_output=True, text=True,
                          cwd=tree)
    if done.returncode != 0:
        raise SystemExit(f"preparation on {corpus} failed: {done.stderr[-400:]}")
    out = json.loads(done.stdout)
    if not out["tree"].startswith(str(tree)):
        raise SystemExit(f"measured {out['tree']}, not the tree {tree}")
    return out


def bench_memory(work: Path, megabytes: int) -> dict[str, object]:
    corpus = write_big_text(work / "big.txt", megabytes)
    rows = []
    for label in ("first run (encodes, writes the cache)", "second run (cache hit)"):
        out = measured_train(work, corpus)
        result = out["result"]
        tokens = result["data"]["train_tokens"] + result["data"]["validation_tokens"]
        array = tokens * 2
        rows.append({"label": label, "peak_bytes": out["peak"], "array_bytes": array, "seconds": out["seconds"]})
        print(f"memory {corpus.stat().st_size / 1e6:.0f} MB text, {label}: peak RSS {out['peak'] / 1e9:.2f} GB, "
              f"token array {array / 1e9:.2f} GB, peak - array {(out['peak'] - array) / 1e9:.2f} GB "
              f"(target <= 1 GB); whole process to the end of update 1: {out['seconds']:.1f} s", flush=True)
    return {"rows": rows}


# -- restart ----------------------------------------------------------------------------------
def bench_restart(work: Path, rounds: int, megabytes: int, baseline: Path | None) -> dict[str, object]:
    """Whole-process ``train --preset text --until 1`` on a generated large text: the first
    run (reads, splits, encodes, writes the cache) and the restart that finds it in the
    cache, against the same restart on a 1 MB text (the start-up that does not depend on
    the text's size: Python, torch, model, the step-0 evaluation, update 1, the save), and
    with ``baseline`` the same first run and restart from another checkout of the project.
    Interleaved rounds, each with emptied caches."""
    import shutil

    big = write_big_text(work / "big.txt", megabytes)
    small = write_big_text(work / "small.txt", 1)
    measured_train(work, small)  # warm-up: the page cache holds Python, torch and both texts
    plan: list[tuple[str, Path, Path]] = [("first", big, ROOT), ("restart", big, ROOT), ("small restart", small, ROOT)]
    if baseline is not None:
        plan += [("baseline first", big, baseline), ("baseline restart", big, baseline)]
    keys = [key for key, _, _ in plan]
    times: dict[str, list[float]] = {key: [] for key in keys}
    ready: dict[str, list[float]] = {key: [] for key in keys}
    cpu: dict[str, list[float]] = {key: [] for key in keys}
    peaks: dict[str, list[float]] = {key: [] for key in keys}
    prepared: dict[str, list[float]] = {"restart preparation": [], "baseline restart preparation": []}
    prepared_cpu: dict[str, list[float]] = {key: [] for key in prepared}
    for r in range(rounds):
        for folder in work.glob("cache*"):
            shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(work / "runs", ignore_errors=True)
        for key, corpus, tree in plan:
            if key == "small restart":
                measured_train(work, small)  # its own first run: fill the cache
            out = measured_train(work, corpus, tree)
            times[key].append(out["seconds"])
            ready[key].append(out["ready"])
            cpu[key].append(out["cpu"])
            peaks[key].append(out["peak"] / 1e9)
        # The corpus-dependent part alone, both trees alternating, their caches now full.
        for _ in range(3):
            for key, tree in [("restart preparation", ROOT)] + ([("baseline restart preparation", baseline)]
                                                                if baseline is not None else []):
                out = measured_preparation(work, big, tree)
                prepared[key].append(out["wall"])
                prepared_cpu[key].append(out["cpu"])
        print(f"restart round {r + 1}: " + ", ".join(
            f"{key} {times[key][-1]:.2f} s (ready at {ready[key][-1]:.2f} s)" for key in keys), flush=True)
    size = big.stat().st_size / 1e6
    for key in keys:
        print(f"restart {size:.0f} MB text, {key}: whole process to the end of update 1 {spread(times[key])} s; "
              f"run folder written (preparation done) at {spread(ready[key])} s; CPU time {spread(cpu[key])} s; "
              f"peak RSS {spread(peaks[key])} GB",
              flush=True)
    for key in prepared:
        if prepared[key]:
            print(f"{key} ({size:.0f} MB, corpus and token arrays only, torch already imported): "
                  f"wall {spread(prepared[key])} s, CPU {spread(prepared_cpu[key])} s", flush=True)
    if baseline is not None:
        ratios = [a / b for a, b in zip(prepared["restart preparation"], prepared["baseline restart preparation"])]
        print(f"restart preparation, this tree / baseline: {spread(ratios)}", flush=True)
    above = [a - b for a, b in zip(times["restart"], times["small restart"])]
    print(f"restart on {size:.0f} MB minus restart on 1 MB (same round), whole process: {spread(above)} s", flush=True)
    if baseline is not None:
        for key in ("first", "restart"):
            for name, figures in (("whole process", times), ("run folder written", ready), ("CPU time", cpu)):
                ratios = [a / b for a, b in zip(figures[key], figures[f"baseline {key}"])]
                print(f"{key}, {name}: this tree / baseline {baseline}: {spread(ratios)}", flush=True)
    return {"seconds": times, "ready_seconds": ready, "cpu_seconds": cpu, "peak_gb": peaks,
            "preparation_seconds": prepared, "preparation_cpu_seconds": prepared_cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("section", nargs="?", default="all",
                        choices=["all", "update", "encode", "merges", "text", "memory", "restart"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=20, help="updates per round (update)")
    parser.add_argument("--megabytes", type=int, default=0, help="text size (encode: 20, memory and restart: 100)")
    parser.add_argument("--merges", type=int, default=256, help="merges (encode, merges)")
    parser.add_argument("--steps", type=int, default=2000, help="updates (text)")
    parser.add_argument("--threads", type=int, default=2, help="text: threads of each side (the preset's 2)")
    parser.add_argument("--together", action="store_true", help="text: start both sides at once in each round")
    parser.add_argument("--small-only", action="store_true", help="update: only width 128 / 4 layers / context 64")
    parser.add_argument("--baseline", type=Path, help="restart: another checkout of the project to compare with")
    args = parser.parse_args()
    run_all = args.section == "all"
    with tempfile.TemporaryDirectory(prefix="bench-text-") as folder:
        work = Path(folder)
        if run_all or args.section == "encode":
            bench_encode(args.rounds, args.megabytes or 20, args.merges)
        if args.section == "merges":
            from minigpt_tui.engine.training.corpus import parse_records

            megabytes = args.megabytes or 20
            records = parse_records(english_text(megabytes * 1_000_000))
            bench_merges(args.rounds, merge_training_records(records, megabytes), args.merges)
        if run_all or args.section == "update":
            bench_update(work, args.rounds, args.updates, UPDATE_SHAPES[:1] if args.small_only else UPDATE_SHAPES)
        if run_all or args.section == "text":
            bench_text(work, 1 if run_all else args.rounds, args.steps, args.threads, args.together)
        if run_all or args.section == "memory":
            bench_memory(work, args.megabytes or 100)
        if run_all or args.section == "restart":
            bench_restart(work, args.rounds, args.megabytes or 100, args.baseline)


if __name__ == "__main__":
    main()
