"""A run whose updates stop being finite ends as diverged: one line, exit 1, nothing new
saved, the live state says failed and the metrics log stops growing."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import cli_command, cli_env


def test_a_diverging_fp16_run_stops_in_one_line_instead_of_looping(tmp_path):
    config = tmp_path / "diverge.toml"
    config.write_text("[train]\nsteps = 2000\nlr = 1e30\nfinal_lr = 1e30\nsave_every = 5\nloss_scale = true\n"
                      "divergence_patience = 7\n")
    done = subprocess.run(cli_command("train", "--preset", "mini", "--precision", "fp16", "--config", str(config),
                                      "--run", "d"), capture_output=True, text=True, env=cli_env(tmp_path), timeout=120)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("minigpt-tui: error: training diverged at update ") and "Traceback" not in done.stderr
    assert "7 non-finite updates in a row" in lines[-1] and "lr 1e+30" in lines[-1]
    run = tmp_path / "runs" / "d"
    updates = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert sum(1 for r in updates if r["kind"] == "update" and not r["applied"]) <= 7 + 5
    assert json.loads((run / "live.json").read_text())["state"] == "failed"
