"""What verifying the content identity costs when a checkpoint is loaded.

Every load for training or inference recomputes the model identity of ``model.safetensors``
and the content digest of ``training.safetensors`` from their tensors (so weights edited
under a re-signed manifest are refused). The baseline is the same load trusting the
manifest's SHA-256 alone (``load_checkpoint(recompute_digests=False)``, what loading did
before). Both sides read and hash every file against the manifest; the files are in the
page cache for both. The sides are timed like for like (``timing.interleaved``: warmed
up, rotating order) for ROUNDS rounds; the figure is the median of the per-round ratios
(verified / baseline) with their range, for the small preset (1.64M scalars, float32) and
the mini preset, for a whole checkpoint and for its model file alone (what ``infer``
reads).

    .venv/bin/python benchmarks/bench_load_verification.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from timing import interleaved, ratio

from minigpt_tui.engine.training.checkpoints import load_checkpoint, save_checkpoint
from minigpt_tui.engine.formats.portable import read_portable
from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.training.trainer import Trainer, TrainingSetup, apply_precision

ROUNDS = 41
WARMUP = 3


def saved_checkpoint(preset: str, folder: Path) -> Path:
    config = load_config(preset)
    apply_precision(config.train)
    trainer = Trainer(TrainingSetup.build(config, load_corpus(config.corpus)))
    trainer.update()  # AdamW has its moments
    return save_checkpoint(trainer, folder / "checkpoints")


def main() -> None:
    print(f"load average {os.getloadavg()[0]:.2f}; {ROUNDS} rounds after {WARMUP} warm-up rounds")
    with tempfile.TemporaryDirectory(prefix="minigpt-bench-verify-") as tmp:
        for preset in ("small", "mini"):
            folder = saved_checkpoint(preset, Path(tmp) / preset)
            model = folder / "model.safetensors"
            size = sum(p.stat().st_size for p in folder.iterdir())
            print(f"{preset} ({size / 2**20:.1f} MiB checkpoint)")
            pairs = (
                ("checkpoint verified", lambda: load_checkpoint(folder, recompute_digests=True),
                 "checkpoint, manifest only", lambda: load_checkpoint(folder, recompute_digests=False)),
                ("model file verified", lambda: read_portable(model, verify_identity=True),
                 "model file, manifest only", lambda: read_portable(model, verify_identity=False)),
            )
            for name, verified, base_name, baseline in pairs:
                timings = interleaved({name: verified, base_name: baseline}, ROUNDS, warmup=WARMUP)
                print(f"  {timings[name].line()}")
                print(f"  {timings[base_name].line()}")
                print(f"  {ratio(timings[name], timings[base_name])}")


if __name__ == "__main__":
    main()
