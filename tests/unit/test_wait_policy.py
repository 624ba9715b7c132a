"""Commands whose work is forward passes start torch with threads that sleep while they wait
(so a busy core cannot stall them); training commands keep OpenMP's default; a policy the
user set always wins."""

from __future__ import annotations

import os
import subprocess
import sys

from minigpt_tui.engine.core.threads import INFERENCE_COMMANDS, wait_without_spinning
from tests.conftest import ROOT

PROBE = """
import os, sys
from minigpt_tui.cli import main
main(sys.argv[1:])
import torch  # the command may not have imported it (it was refused first)
print("policy", os.environ.get("OMP_WAIT_POLICY", "-"))
"""


def _policy_after(args: list[str], **extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          env={**env, "PYTHONPATH": str(ROOT), **extra}, cwd=ROOT, timeout=120)
    return done.stdout.strip().splitlines()[-1]


def test_an_inference_command_sets_the_passive_policy_before_torch_starts(tmp_path):
    assert _policy_after(["inspect", str(tmp_path / "missing.safetensors")]) == "policy PASSIVE"


def test_a_training_command_keeps_the_default_policy(tmp_path):
    assert _policy_after(["train", "--preset", "tiny", "--corpus", str(tmp_path / "missing.txt")]) == "policy -"


def test_the_users_policy_wins(tmp_path):
    assert _policy_after(["inspect", str(tmp_path / "x")], OMP_WAIT_POLICY="ACTIVE") == "policy ACTIVE"
    assert _policy_after(["inspect", str(tmp_path / "x")], GOMP_SPINCOUNT="1000") == "policy -"


def test_nothing_changes_once_torch_is_running():
    import torch  # noqa: F401  (started: its OpenMP runtime has read the environment)

    environ: dict[str, str] = {}
    assert wait_without_spinning(environ) is False and environ == {}


def test_the_inference_commands_exist():
    from minigpt_tui.cli import build_parser

    commands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    assert INFERENCE_COMMANDS <= commands and not {"train", "resume", "verify"} & INFERENCE_COMMANDS
