"""Round four, deletion: no output a user names is written inside a checkpoint folder (its
files are removed by retention, and a checkpoint holds its own files only), however the
path reaches it; a resume of a run another process holds is refused as in use."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from attack_cases import Case, link

RUN = "runs/trained"
HOLD_SECONDS = 20  # the lock holder ends by itself; the case is over well before


def _checkpoint(root: Path) -> Path:
    """The trained run's latest checkpoint folder."""
    return sorted((root / RUN / "checkpoints").glob("step-*"))[-1]


def _linked(root: Path) -> Path:
    """A link beside the precious folders that leads into the checkpoint folder."""
    return link(root / "elsewhere" / "into-checkpoint", str(_checkpoint(root)))


def _held(root: Path) -> str:
    """Start a process that holds the trained run's lock (as a trainer does) and wait until
    it does; it lets go by itself after HOLD_SECONDS."""
    lock = root / RUN / ".lock"
    holder = ("import fcntl, json, os, sys, time\n"
              "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
              "fcntl.flock(fd, fcntl.LOCK_EX)\n"
              "os.ftruncate(fd, 0); os.pwrite(fd, json.dumps({'pid': os.getpid(), 'since': time.time()}).encode(), 0)\n"
              f"time.sleep({HOLD_SECONDS})\n")
    subprocess.Popen([sys.executable, "-c", holder, str(lock)], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and b"pid" not in (lock.read_bytes() if lock.exists() else b""):
        time.sleep(0.05)
    return "trained:latest"


def cases() -> list[Case]:
    latest = "trained:latest"
    return [
        Case("r4 deletion: generate --trace-out inside a checkpoint folder",
             lambda r: ["generate", "--model", latest, "--prompt", "a", "--trace-out",
                        str(_checkpoint(r) / "trace.json")]),
        Case("r4 deletion: generate --trace-out --force over a checkpoint's model file",
             lambda r: ["generate", "--model", latest, "--prompt", "a", "--force", "--trace-out",
                        str(_checkpoint(r) / "model.safetensors")]),
        Case("r4 deletion: generate --trace-out through a link into a checkpoint folder",
             lambda r: ["generate", "--model", latest, "--prompt", "a", "--trace-out",
                        str(_linked(r) / "trace.json")]),
        Case("r4 deletion: probes --out inside a checkpoint folder",
             lambda r: ["probes", "--model", latest, "--out", str(_checkpoint(r) / "probes.json")]),
        Case("r4 deletion: contrast --out inside a checkpoint folder",
             lambda r: ["contrast", "--model", latest, "--model", latest, "--prompt", "a", "--out",
                        str(_checkpoint(r) / "contrast.json")]),
        Case("r4 deletion: export-tensorboard --out inside a checkpoint folder",
             lambda r: ["export-tensorboard", "trained", "--out", str(_checkpoint(r) / "events")]),
        Case("r4 deletion: train --tensorboard inside a checkpoint folder",
             lambda r: ["train", "--preset", "tiny", "--until", "1", "--run", "other", "--tensorboard",
                        str(_checkpoint(r) / "events")]),
        Case("r4 deletion: resume --tensorboard inside a checkpoint folder",
             lambda r: ["resume", "--checkpoint", latest, "--until", "3", "--tensorboard",
                        str(_linked(r) / "events")]),
        Case("r4 deletion: verify --keep inside a checkpoint folder",
             lambda r: ["verify", "--keep", str(_checkpoint(r) / "runs")]),
        Case("r4 deletion: export --out through a link into a checkpoint folder",
             lambda r: ["export", "--model", latest, "--out", str(_linked(r) / "hf")]),
        Case("r4 deletion: resume of a run another process holds",
             lambda r: ["resume", "--checkpoint", _held(r), "--until", "3"]),
    ]
