"""Run a list of hostile and unlucky commands against the installed ``minigpt-tui`` and count
how each ended: clean (exit 0, or exit 1 with one error line), traceback, hang (past its
time limit), abort (SIGABRT), memory (killed under the address-space limit or out of
memory), data lost (a folder of precious files, a trained run and a token cache entry changed
when the command had no business changing them). The cases are the list below and each topic
module's ``cases()`` in ``tools/attack_cases/``.

    PYTHONPATH=. .venv/bin/python tools/attack_inputs.py [--only SUBSTRING] [--verbose]

Every case is built in a fresh temporary folder; nothing outside it is touched.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from attack_cases import ROUNDS, Case, fifo as _fifo, hf as _hf, link as _link, precious as _precious, write as _write  # noqa: E402

LIMIT_S = 30.0
MEMORY_LIMIT = 6 << 30  # address space per command


def _digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.name in (".lock",) or path.name.startswith(".lock-rank"):
            continue
        digest.update(str(path.relative_to(folder)).encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


LONG = "a" * 300
DEEP = "[" * 100_000 + "]" * 100_000


def cases() -> list[Case]:
    run = "runs/trained"
    found: list[Case] = [
        Case("cache clear on a home folder", lambda r: ["cache", "--cache-dir", str(r / "home"), "clear"]),
        Case("cache clear on the runs folder", lambda r: ["cache", "--cache-dir", str(r / "runs"), "clear"]),
        Case("cache list on a home folder", lambda r: ["cache", "--cache-dir", str(r / "home"), "list"]),
        Case("cache clear of the real cache", lambda r: ["cache", "clear"], may_change=("cache",)),
        Case("corpus link to /etc/passwd", lambda r: ["train", "--preset", "mini", "--steps", "2", "--val-every", "0",
                                                      "--corpus", str(_link(r / "c" / "p.txt", "/etc/passwd").parent)]),
        Case("corpus is /dev/zero", lambda r: ["train", "--preset", "text", "--corpus", "/dev/zero"]),
        Case("corpus is a FIFO", lambda r: ["train", "--preset", "text", "--corpus", str(_fifo(r / "fifo.txt"))]),
        Case("corpus is /proc/kmsg", lambda r: ["train", "--preset", "text", "--corpus", "/proc/kmsg"]),
        Case("batch size 65536", lambda r: ["train", "--preset", "mini", "--config",
                                            str(_write(r / "b.toml", "[train]\nbatch_size = 65536\n"))]),
        Case("--nproc 64 on tiny", lambda r: ["train", "--preset", "tiny", "--nproc", "64"]),
        Case("a 10 MB string in a TOML", lambda r: ["train", "--preset", "tiny", "--config",
                                                    str(_write(r / "s.toml", '[model]\nfamily = "' + "x" * 10_000_000 + '"\n'))]),
        Case("divergence in fp16", lambda r: ["train", "--preset", "mini", "--precision", "fp16", "--config",
                                              str(_write(r / "d.toml", "[train]\nsteps = 2000\nlr = 1e30\nfinal_lr = 1e30\n"
                                                                       "loss_scale = true\n"))], may_change=("runs",)),
        Case("convert a FIFO config.json", lambda r: ["convert", "--hf", str(_hf(r, _fifo)), "--out", str(r / "o.st")]),
        Case("convert a /dev/zero config.json", lambda r: ["convert", "--hf", str(_hf(r, lambda p: p.symlink_to("/dev/zero"))),
                                                           "--out", str(r / "o.st")]),
        Case("convert a deep config.json", lambda r: ["convert", "--hf", str(_hf(r, lambda p: p.write_text(DEEP))),
                                                      "--out", str(r / "o.st")]),
        Case("inspect a deep config.json", lambda r: ["inspect", str(_hf(r, lambda p: p.write_text(DEEP)))]),
        Case("inspect a 5000-digit config.json", lambda r: ["inspect", str(_hf(r, lambda p: p.write_text(
            '{"vocab_size": ' + "9" * 5000 + "}")))]),
        Case("export into an empty folder", lambda r: ["export", "--model", f"{run}:latest", "--out",
                                                       str((r / "empty").mkdir() or r / "empty")]),
        Case("export into a checkpoint folder", lambda r: ["export", "--model", f"{run}:latest", "--out",
                                                           str(next((r / run / "checkpoints").iterdir()) / "hf")]),
        Case("convert --out a dangling link", lambda r: ["convert", "--hf", str(_hf(r, lambda p: p.write_text("{}"))),
                                                         "--out", str(_link(r / "dangling", str(r / "nowhere")))]),
    ]
    for where, after in ((["train", "--preset", "tiny", "--corpus"], []), (["convert", "--hf"], ["--out", "o"]),
                         (["export", "--model"], ["--out", "o"]), (["cache", "--cache-dir"], ["list"]),
                         (["attach"], []), (["inspect"], []), (["generate", "--prompt", "a", "--model"], []),
                         (["train", "--preset", "tiny", "--runs-dir"], []),
                         (["convert", "--hf", "/tmp", "--out", "o", "--tokenizer-from"], []),
                         (["export", "--model", f"{run}:latest", "--out"], []),
                         (["generate", "--model", f"{run}:latest", "--prompt", "a", "--trace-out"], []),
                         (["train", "--preset", "tiny", "--run"], [])):
        found.append(Case(f"name too long: {' '.join(where)}",
                          lambda r, where=where, after=after: [*where, f"/tmp/{LONG}", *after]))
    for round_cases in ROUNDS:
        found += round_cases()
    return found


def classify(done: subprocess.CompletedProcess | None, changed: bool) -> str:
    if changed:
        return "data lost"
    if done is None:
        return "hang"
    if done.returncode in (-6, 134):
        return "abort"
    if "Traceback" in done.stderr:
        return "traceback"
    if done.returncode in (-9, 137) or "MemoryError" in done.stderr or "DefaultCPUAllocator" in done.stderr:
        return "memory"
    errors = [line for line in done.stderr.splitlines() if line.startswith("minigpt-tui: error:")]
    if done.returncode == 0 or (done.returncode == 1 and len(errors) == 1):
        return "clean"
    return f"exit {done.returncode}"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_case(case: Case, trained: Path) -> tuple[str, str]:
    import shutil

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        _precious(root)
        shutil.copytree(trained / "runs", root / "runs")
        shutil.copytree(trained / "cache", root / "cache")
        args = case.make(root)
        watched = {name: _digest(root / name) for name in ("home", "runs", "cache") if name not in case.may_change}
        env = {**os.environ, "MINIGPT_TUI_RUNS_DIR": str(root / "runs"), "MINIGPT_TUI_CACHE_DIR": str(root / "cache")}
        try:
            done = subprocess.run([sys.executable, "-m", "minigpt_tui", *args], capture_output=True, text=True,
                                  env=env, cwd=root, timeout=LIMIT_S, preexec_fn=_limit_memory)
        except subprocess.TimeoutExpired:
            done = None
        changed = any(_digest(root / name) != digest for name, digest in watched.items())
        last = (done.stderr.strip().splitlines() or [""])[-1][:160] if done is not None else "(timed out)"
        return classify(done, changed), last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the cases whose name holds this")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        trained = Path(folder)
        env = {**os.environ, "MINIGPT_TUI_RUNS_DIR": str(trained / "runs"), "MINIGPT_TUI_CACHE_DIR": str(trained / "cache")}
        for preset in ("tiny", "text"):
            name = "trained" if preset == "tiny" else "text"
            subprocess.run([sys.executable, "-m", "minigpt_tui", "train", "--preset", preset, "--run", name,
                            *(["--steps", "200", "--until", "1"] if preset == "text" else []), "--json"],
                           env=env, capture_output=True, check=True)
        counts: Counter[str] = Counter()
        started = time.monotonic()
        for case in cases():
            if args.only and args.only not in case.name:
                continue
            outcome, last = run_case(case, trained)
            counts[outcome] += 1
            if args.verbose or outcome != "clean":
                print(f"{outcome:10} {case.name}: {last}")
    total = sum(counts.values())
    print(f"{total} tried in {time.monotonic() - started:.0f} s: " + ", ".join(
        f"{counts.get(kind, 0)} {kind}" for kind in ("clean", "traceback", "hang", "abort", "memory", "data lost"))
          + "".join(f", {n} {kind}" for kind, n in counts.items()
                    if kind not in ("clean", "traceback", "hang", "abort", "memory", "data lost")))
    return 0 if counts.get("clean", 0) == total else 1


if __name__ == "__main__":
    sys.exit(main())
