"""Differential fuzzing of the safetensors reader against ``safetensors.safe_open``.

A real model file (the tiny preset's, saved by this package) is mutated with a fixed seed:
bit and byte flips in the header and the data, truncation, appended bytes, a changed
length prefix, spliced header ranges, and structural edits (a hostile value put at a
random place of the header or of a metadata record: numbers of 5,000 digits, 2**63,
nesting 2,000 deep, unpaired surrogates, wrong types, duplicated keys, control
characters). Each case is opened by ``safe_open``, by our header reader, by ``inspect``'s
engine call and by the model loader, and must:

- be refused by our reader whenever ``safe_open`` refuses it (our reader may refuse more
  only for the stricter rules the guide documents (docs/guide/files-you-did-not-write.md): duplicate keys, a header not starting
  with ``{``, entry fields besides dtype/shape/data_offsets, a dimension of 2**63 or more);
- raise nothing but the project's one-line errors;
- finish within a second, and leave the process under a memory bound;
- leave the file and its folder exactly as they were.

    PYTHONPATH=. .venv/bin/python tools/fuzz_reader.py --fuzz 5000 [--seed 7]

The test suite runs a few hundred cases of the same generator (tests/test_hostile_input.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import resource
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Violations our reader reports where safe_open accepts the file, each documented in the
# guide (docs/guide/files-you-did-not-write.md, "Where the reader is stricter than safetensors").
DOCUMENTED_STRICTER = frozenset({"duplicate-name", "header-start", "bad-entry", "bad-shape"})
CASE_SECONDS = 1.0

_HOSTILE_VALUES = (
    "1" * 5000,  # more digits than Python converts
    str(2**63),
    str(2**64),
    "-1",
    "1.5",
    "1e400",
    "true",
    "null",
    '"x"',
    "[]",
    "{}",
    "[" * 2000 + "]" * 2000,
    '"\\ud800"',
    '"\\u001b[2J\\u001b]0;owned\\u0007"',
    '{"dtype":"F64","shape":[0,9223372036854775808],"data_offsets":[0,0]}',
    "4096",
    "100000",
    str(2**31),
)


@dataclass
class CaseResult:
    index: int
    mutation: str
    safe_open_accepts: bool
    ours_accepts: bool
    violation: str | None
    seconds: float
    problems: list[str] = field(default_factory=list)


def base_model_bytes(folder: Path) -> bytes:
    """The tiny preset's model file, freshly initialized and saved by this package."""
    from minigpt_tui.engine.formats.portable import save_portable_model
    from minigpt_tui.engine.core.config import load_config
    from minigpt_tui.engine.training.corpus import load_corpus
    from minigpt_tui.engine.training.trainer import Trainer, TrainingSetup, apply_precision

    config = load_config("tiny")
    apply_precision(config.train)
    trainer = Trainer(TrainingSetup.build(config, load_corpus(config.corpus)))
    path = folder / "base.safetensors"
    save_portable_model(trainer.model, trainer.tokenizer, path)
    data = path.read_bytes()
    path.unlink()
    return data


def _split(data: bytes) -> tuple[int, bytes, bytes]:
    n = int.from_bytes(data[:8], "little")
    return n, data[8 : 8 + n], data[8 + n :]


def _join(header: bytes, rest: bytes) -> bytes:
    return struct.pack("<Q", len(header)) + header + rest


def _random_path(value: Any, rng: random.Random) -> list[Any]:
    path: list[Any] = []
    while isinstance(value, (dict, list)) and value and rng.random() < 0.75:
        key = rng.choice(list(value)) if isinstance(value, dict) else rng.randrange(len(value))
        path.append(key)
        value = value[key]
    return path


def _hostile_edit(document: Any, rng: random.Random) -> str:
    """``document`` as JSON text with one hostile value (raw text) at a random place, or
    one key duplicated."""
    marker = "\u0000HOSTILE\u0000"
    path = _random_path(document, rng)
    if not path:
        return json.dumps(document)
    target = document
    for key in path[:-1]:
        target = target[key]
    if isinstance(target, dict) and rng.random() < 0.15:
        text = json.dumps(document)
        key = json.dumps(path[-1])
        return text.replace(key + ":", key + ":" + json.dumps(target[path[-1]]) + "," + key + ":", 1)
    target[path[-1]] = marker
    return json.dumps(document).replace(json.dumps(marker), rng.choice(_HOSTILE_VALUES), 1)


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One mutation of a safetensors file: (what was done, the new bytes)."""
    n, header, rest = _split(data)
    kind = rng.choice(
        ("header-bit", "header-bit", "header-byte", "data-byte", "truncate", "append", "length",
         "splice", "header-value", "header-value", "record-value", "record-value")
    )
    if kind == "header-bit":
        at = 8 + rng.randrange(n)
        out = bytearray(data)
        out[at] ^= 1 << rng.randrange(8)
        return f"{kind}@{at}", bytes(out)
    if kind == "header-byte":
        at = 8 + rng.randrange(n)
        out = bytearray(data)
        out[at] = rng.choice(b'{}[]",:0123456789 \x00\xff\\u' + bytes([rng.randrange(256)]))
        return f"{kind}@{at}", bytes(out)
    if kind == "data-byte" and rest:
        at = 8 + n + rng.randrange(len(rest))
        out = bytearray(data)
        out[at] ^= 0xFF
        return f"{kind}@{at}", bytes(out)
    if kind == "truncate":
        at = rng.randrange(len(data))
        return f"{kind}@{at}", data[:at]
    if kind == "append":
        extra = bytes(rng.randrange(256) for _ in range(rng.choice((1, 7, 8, 64))))
        return f"{kind}+{len(extra)}", data + extra
    if kind == "length":
        new = rng.choice((0, 1, n - 1, n + 1, n + 8, 2**63, 2**64 - 1, 100_000_001, rng.randrange(2**32)))
        return f"{kind}={new}", struct.pack("<Q", new % 2**64) + data[8:]
    if kind == "splice":
        a, b = sorted(rng.randrange(n) for _ in range(2))
        piece = header[a:b]
        spliced = header[:a] + piece + piece + header[b:] if rng.random() < 0.5 else header[:a] + header[b:]
        return f"{kind}[{a}:{b}]", _join(spliced, rest)
    document = json.loads(header)
    if kind == "record-value":
        metadata = document.get("__metadata__") or {}
        if metadata:
            key = rng.choice(sorted(metadata))
            try:
                record = json.loads(metadata[key])
            except json.JSONDecodeError:
                record = metadata[key]
            metadata[key] = _hostile_edit(record, rng)
            return f"{kind}:{key}", _join(json.dumps(document).encode(), rest)
    return "header-value", _join(_hostile_edit(document, rng).encode("utf-8", "surrogatepass"), rest)


def _safe_open_accepts(path: Path) -> bool:
    from safetensors import safe_open

    try:
        with safe_open(str(path), "np") as handle:
            handle.keys()
            handle.metadata()
    except Exception:  # noqa: BLE001 - any refusal counts as a refusal
        return False
    return True


def _state(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def check_case(index: int, mutation: str, path: Path) -> CaseResult:
    """Open the file at ``path`` every way the product does; name what went wrong."""
    from minigpt_tui.engine.formats.inspect import inspect_path
    from minigpt_tui.engine.models.model_file import load_portable_model
    from minigpt_tui.engine.formats.safetensors_read import InvalidSafetensors, read_header
    from minigpt_tui.engine.core.errors import MiniGPTError

    before = _state(path.parent)
    start = time.perf_counter()
    problems: list[str] = []
    violation: str | None = None
    ours = True
    try:
        read_header(path)
    except InvalidSafetensors as err:
        ours, violation = False, err.violation
    except MiniGPTError:
        ours = False
    except Exception as err:  # noqa: BLE001 - the defect being looked for
        ours = False
        problems.append(f"read_header raised {type(err).__name__}: {str(err)[:120]}")
    for label, call in (("inspect", inspect_path), ("load", load_portable_model)):
        try:
            call(path)
        except MiniGPTError as err:
            if "\n" in str(err):
                problems.append(f"{label}: a multi-line message")
        except Exception as err:  # noqa: BLE001
            problems.append(f"{label} raised {type(err).__name__}: {str(err)[:120]}")
    seconds = time.perf_counter() - start
    accepts = _safe_open_accepts(path)
    if not accepts and ours:
        problems.append("safe_open refuses this file but our reader accepts it")
    if accepts and not ours and violation not in DOCUMENTED_STRICTER:
        problems.append(f"our reader refuses ({violation}) what safe_open accepts, and the guide does not say why")
    if seconds > CASE_SECONDS:
        problems.append(f"took {seconds:.2f} s")
    if _state(path.parent) != before:
        problems.append("the folder changed on disk")
    return CaseResult(index, mutation, accepts, ours, violation, seconds, problems)


def run_fuzz(cases: int, seed: int, folder: Path, progress: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    base = base_model_bytes(folder)
    rng = random.Random(seed)
    results = []
    for index in range(cases):
        mutation, data = mutate(base, rng)
        case_folder = folder / "case"
        case_folder.mkdir(exist_ok=True)
        path = case_folder / "model.safetensors"
        path.write_bytes(data)
        result = check_case(index, mutation, path)
        results.append(result)
        if progress is not None:
            progress(result)
        path.unlink()
    return results


def peak_memory_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fuzz", type=int, default=1000, metavar="N", help="number of mutated files (default 1000)")
    parser.add_argument("--seed", type=int, default=7, help="mutation seed (default 7)")
    args = parser.parse_args(argv)

    def show(result: CaseResult) -> None:
        if result.problems:
            print(f"case {result.index} ({result.mutation}): {'; '.join(result.problems)}")

    with tempfile.TemporaryDirectory(prefix="minigpt-fuzz-") as tmp:
        import torch  # noqa: F401 - counted before the cases, not in their memory

        baseline = peak_memory_bytes()
        started = time.perf_counter()
        results = run_fuzz(args.fuzz, args.seed, Path(tmp), show)
        elapsed = time.perf_counter() - started
    failed = [r for r in results if r.problems]
    refused_by_both = sum(1 for r in results if not r.safe_open_accepts and not r.ours_accepts)
    stricter = sum(1 for r in results if r.safe_open_accepts and not r.ours_accepts)
    print(
        f"{len(results)} cases (seed {args.seed}) in {elapsed:.1f} s: {refused_by_both} refused by both, "
        f"{stricter} refused only by our stricter rules, {len(results) - refused_by_both - stricter} accepted by both; "
        f"slowest {max(r.seconds for r in results):.3f} s; peak memory {peak_memory_bytes() / 2**20:.0f} MiB "
        f"(before the cases {baseline / 2**20:.0f} MiB); {len(failed)} failing"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
