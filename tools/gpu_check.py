"""The GPU check: train on a GPU, save, load on the CPU, compare, resume on both, time both.

Run it on a machine with a GPU (``python tools/gpu_check.py --out DIR``); it writes
``gpu_check.json`` and prints the same figures. ``--device cpu`` runs every step on the CPU as a
dry run of the script itself (the figures then compare the CPU with itself).

Steps, each through the installed command line as a user would run them:
1. ``train --preset small --device DEVICE`` for ``--updates`` updates in fast precision, saving
   at the end; the same on the CPU; updates per second of each (after the first update's
   warm-up, from the run's metrics).
2. The device run's checkpoint loads in this process on the CPU (it is written as CPU tensors)
   and on the device; the largest logit difference between the two on a fixed prompt.
3. The device run resumes on the CPU (``--allow-environment-change``) and on the device for
   ``--resume-updates`` more updates; the largest batch-loss difference between the two.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _cli(*args: str, env: dict[str, str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "minigpt_tui", *args, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"gpu check: {' '.join(args[:2])} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout)


def _updates(run_dir: Path) -> list[dict[str, Any]]:
    """The run's update records, from its metrics file."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, filter(str.strip, lines)) if r.get("kind") == "update"]


def _update_seconds(run_dir: Path) -> list[float]:
    """Seconds of each update after the first (its warm-up)."""
    return [float(r["seconds"]) for r in _updates(run_dir) if r["step"] > 1]


def _batch_losses(run_dir: Path, after: int) -> dict[int, float]:
    return {r["step"]: float(r["loss"]) for r in _updates(run_dir) if r["step"] > after}


def _logits(checkpoint: Path, device: str) -> Any:
    import torch

    from minigpt_tui.engine.models.model_file import load_portable_model

    loaded = load_portable_model(checkpoint)
    assert loaded.tokenizer is not None
    ids = torch.tensor([loaded.tokenizer.encode_prompt("The quick brown fox")], device=device)
    with torch.no_grad():
        return loaded.model.to(device)(ids).logits.float().cpu()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="the device to check (default: cuda)")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--resume-updates", type=int, default=20)
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for gpu_check.json")
    args = parser.parse_args()

    import torch

    runs = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    env = {**os.environ, "MINIGPT_TUI_RUNS_DIR": str(runs), "MINIGPT_TUI_CACHE_DIR": str(runs / "cache")}
    # The preset's own schedule (300 updates); each process stops early with --until.
    common = ("--preset", "small", "--precision", "fast", "--until", str(args.updates), "--save-every", "0")
    figures: dict[str, Any] = {"device": args.device, "torch": torch.__version__}
    if args.device == "cuda" and torch.cuda.is_available():
        figures["device_name"] = torch.cuda.get_device_name(0)

    timed: dict[str, float] = {}
    for side, kind in (("device", args.device), ("cpu", "cpu")):
        started = time.perf_counter()
        result = _cli("train", *common, "--device", kind, "--run", f"on-{side}", env=env)
        seconds = _update_seconds(runs / f"on-{side}")
        timed[side] = len(seconds) / sum(seconds)
        figures[f"{side}_updates_per_second"] = round(timed[side], 2)
        figures[f"{side}_process_seconds"] = round(time.perf_counter() - started, 1)
        figures[f"{side}_final_step"] = result["step"]
    figures["device_vs_cpu_speed"] = round(timed["device"] / timed["cpu"], 2)

    saved = sorted((runs / "on-device" / "checkpoints").glob("step-*"))[-1]
    on_cpu, on_device = _logits(saved, "cpu"), _logits(saved, args.device)
    figures["logits_max_abs_difference"] = float((on_cpu - on_device).abs().max())

    resumed: dict[str, dict[int, float]] = {}
    for side, kind in (("cpu", "cpu"), ("device", args.device)):
        forked = f"resumed-on-{side}"
        # A resume continues its run folder: each resume gets its own copy of the device run.
        shutil.copytree(runs / "on-device", runs / forked)
        start = sorted((runs / forked / "checkpoints").glob("step-*"))[-1]
        _cli("resume", "--checkpoint", str(start), "--device", kind, "--allow-environment-change",
             "--until", str(args.updates + args.resume_updates), env=env)
        resumed[side] = _batch_losses(runs / forked, args.updates)
    shared = sorted(set(resumed["cpu"]) & set(resumed["device"]))
    figures["resumed_updates_compared"] = len(shared)
    figures["resumed_loss_max_abs_difference"] = max(
        (abs(resumed["cpu"][s] - resumed["device"][s]) for s in shared), default=None)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
