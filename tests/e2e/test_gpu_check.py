"""The GPU check script, run as its own CPU dry run: every step (train on the device and on
the CPU, load the device run's checkpoint on both, resume on both) completes and reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli_env

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_gpu_check_runs_end_to_end_as_a_cpu_dry_run(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--device", "cpu", "--updates", "12",
         "--resume-updates", "4", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, env=cli_env(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr
    figures = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert figures["device_final_step"] == figures["cpu_final_step"] == 12
    assert figures["device_updates_per_second"] > 0 and figures["cpu_updates_per_second"] > 0
    assert figures["logits_max_abs_difference"] == 0.0  # the same checkpoint on the same device
    assert figures["resumed_updates_compared"] == 4
    assert figures["resumed_loss_max_abs_difference"] < 1e-4
