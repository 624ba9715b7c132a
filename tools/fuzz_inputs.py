"""Fuzzing of the small JSON inputs other processes and tools hand us: control-file lines,
``live.json``, a token-cache entry record, a source-index file and a transformers folder's
``config.json`` and ``tokenizer.json``.

Each case takes a valid example of one kind and mutates it with a fixed seed (byte flips,
truncation, a hostile value spliced at a random place: numbers of 5,000 digits, nesting
100,000 deep, wrong types, control characters, lone surrogates, huge strings), then hands it
to the reader the product uses for that kind. Every case must:

- raise nothing but the project's one-line errors (or be read as damage: None, "unreadable");
- finish within a second, under a memory bound;
- leave every file that is not the reader's own damaged entry as it was.

    PYTHONPATH=. .venv/bin/python tools/fuzz_inputs.py --cases 3000 [--seed 5]

The test suite runs a few hundred cases of the same generator (tests/test_fuzz_inputs.py).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

CASE_SECONDS = 1.0
MEMORY_BOUND = 1 << 30  # bytes of peak RSS growth the whole run may add

HOSTILE = ("1" * 5000, "-" + "9" * 4000, "1e999", "NaN", "-Infinity", "true", "null", '"x"', "[]", "{}",
           "[" * 100_000 + "]" * 100_000, "{" * 50_000, '"\\ud800"', '"\\u001b[2J\\u001b]0;owned\\u0007"',
           '"' + "x" * 2_000_000 + '"', "[[[[[[[[[[1]]]]]]]]]]", '{"command": ["pause"]}', "0.0000001")

EXAMPLES = {
    "control": '{"command": "pause", "at": 1796143566.06}',
    "live": json.dumps({"state": "running", "step": 12, "steps": 600, "pid": 1, "host": "h", "listening": True,
                        "at": 1.0, "parameter_tensors": 20, "parameter_scalars": 8976}),
    "hf-config": json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
                             "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
                             "intermediate_size": 16, "vocab_size": 260, "max_position_embeddings": 16,
                             "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
                             "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "float32"}),
    "tokenizer": json.dumps({"version": "1.0", "added_tokens": [{"id": 0, "content": "<bos>", "special": True}],
                             "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False},
                             "model": {"type": "BPE", "vocab": {"<bos>": 0, "<eos>": 1, "a": 2}, "merges": []}}),
}


@dataclass
class Tally:
    cases: int = 0
    refused: int = 0  # a one-line project error, or read as damage
    accepted: int = 0
    failures: list[str] = field(default_factory=list)
    slowest: float = 0.0


def mutate(text: str, rng: random.Random) -> str:
    choice = rng.randrange(5)
    if choice == 0 and text:  # flip characters
        chars = list(text)
        for _ in range(rng.randint(1, 4)):
            chars[rng.randrange(len(chars))] = chr(rng.randrange(32, 127))
        return "".join(chars)
    if choice == 1:  # truncate
        return text[: rng.randrange(len(text) + 1)]
    if choice == 2:  # a hostile value at a random place
        at = rng.randrange(len(text) + 1)
        return text[:at] + rng.choice(HOSTILE) + text[at:]
    if choice == 3:  # a hostile value replacing a JSON value
        data = json.loads(text)
        if isinstance(data, dict) and data:
            key = rng.choice(sorted(data))
            return text.replace(json.dumps(data[key]), rng.choice(HOSTILE), 1)
        return rng.choice(HOSTILE)
    return rng.choice(HOSTILE)  # the whole file hostile


def _readers(folder: Path) -> dict[str, Callable[[str], object]]:
    from minigpt_tui.engine.formats.bounded_json import read_json_input
    from minigpt_tui.engine.formats.hf_tokenizer import read_tokenizer_json
    from minigpt_tui.engine.session.run_control import RunControl, read_live
    from minigpt_tui.engine.training.token_cache import TokenCache, entry_key

    (folder / "config.json").write_text("{}")

    def control(text: str) -> object:
        runner = RunControl(folder)
        (folder / "control.jsonl").write_text(text + "\n")
        runner.control.offset = 0
        reports: list[object] = []
        return runner.poll(reports.append)

    def live(text: str) -> object:
        (folder / "live.json").write_text(text, errors="surrogatepass")
        return read_live(folder)

    def entry(text: str) -> object:
        key = entry_key("c" * 64, "t" * 64)
        cache = TokenCache(folder / "cache")
        (folder / "cache" / key).mkdir(parents=True, exist_ok=True)
        (folder / "cache" / key / "entry.json").write_text(text, errors="surrogatepass")
        return cache.load("c" * 64, "t" * 64), cache.entries()

    def hf_config(text: str) -> object:
        (folder / "hf-config.json").write_text(text, errors="surrogatepass")
        return read_json_input(folder / "hf-config.json", "config file")

    def tokenizer(text: str) -> object:
        (folder / "tokenizer.json").write_text(text, errors="surrogatepass")
        return read_tokenizer_json(folder / "tokenizer.json")

    from minigpt_tui.engine.training.source_index import SourceFingerprint
    from minigpt_tui.engine.training.source_index import SourceIndex

    index = SourceIndex(folder / "cache")
    fingerprint = SourceFingerprint("a" * 64, 1000, 4)

    def source_index(text: str) -> object:
        path = index._file(fingerprint)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, errors="surrogatepass")
        return index.lookup(fingerprint)

    return {"control": control, "live": live, "entry": entry, "hf-config": hf_config, "tokenizer": tokenizer,
            "index": source_index}


def run_cases(count: int, seed: int, folder: Path) -> Tally:
    from minigpt_tui.engine.core.errors import MiniGPTError

    rng = random.Random(seed)
    readers = _readers(folder)
    examples = {**EXAMPLES, "index": json.dumps({"format": "minigpt-tui-source-index-v1", "source_sha256": "a" * 64,
                                                   "source_bytes": 1000, "val_every": 4, "source": "x.txt",
                                                   "corpus": {"identity": "b" * 64, "records": 4}, "check": "0"}),
                "entry": json.dumps({"format": "minigpt-tui-token-cache-v2", "corpus_identity": "c" * 64,
                                                   "tokenizer_identity": "t" * 64, "sha256_blocks": {}})}
    tally = Tally()
    for number in range(count):
        kind = rng.choice(sorted(readers))
        text = mutate(examples[kind], rng)
        started = time.monotonic()
        try:
            readers[kind](text)
            tally.accepted += 1
        except (MiniGPTError, ValueError) as err:  # ValueError: JSONRefused, the bounded parser's own
            if "\n" in str(err):
                tally.failures.append(f"case {number} ({kind}): a message of several lines")
            tally.refused += 1
        except Exception as err:  # noqa: BLE001 - what the fuzzer is looking for
            tally.failures.append(f"case {number} ({kind}): {type(err).__name__}: {str(err)[:120]}")
        seconds = time.monotonic() - started
        tally.slowest = max(tally.slowest, seconds)
        if seconds > CASE_SECONDS:
            tally.failures.append(f"case {number} ({kind}): took {seconds:.2f} s")
        tally.cases += 1
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        tally = run_cases(args.cases, args.seed, Path(folder))
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    print(f"{tally.cases} cases in {time.monotonic() - started:.1f} s: {tally.refused} refused or read as damage, "
          f"{tally.accepted} accepted, {len(tally.failures)} failures; slowest {tally.slowest:.3f} s; "
          f"peak memory grew {grown / 2**20:.0f} MiB")
    for failure in tally.failures[:20]:
        print("  " + failure)
    return 1 if tally.failures or grown > MEMORY_BOUND else 0


if __name__ == "__main__":
    sys.exit(main())
