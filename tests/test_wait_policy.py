"""The command line and the app make OpenMP's workers wait passively (sleep instead of spin)
unless the user chose a policy, before torch is imported."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = ("import os, sys; from minigpt_tui.cli import wait_passively; wait_passively(); "
          "print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)")


def _policy(env_policy: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if env_policy is not None:
        env["OMP_WAIT_POLICY"] = env_policy
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_passive_unless_the_user_chose_a_policy():
    assert _policy(None) == "PASSIVE False"  # set before torch is imported
    assert _policy("ACTIVE") == "ACTIVE False"
