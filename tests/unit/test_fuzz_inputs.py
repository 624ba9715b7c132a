"""The small JSON inputs other processes and tools hand us (control lines, live.json, cache
entry records, source-index files, transformers config.json and tokenizer.json), mutated
with a fixed seed: only one-line project errors, each case within a second
(tools/fuzz_inputs.py runs more of the same)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.fuzz_inputs import run_cases  # noqa: E402


def test_mutated_inputs_of_every_kind_give_one_line_errors_or_damage_never_a_crash(tmp_path):
    tally = run_cases(600, seed=3, folder=tmp_path)
    assert tally.failures == []
    assert tally.cases == 600 and tally.refused > 100 and tally.accepted > 100
    assert tally.slowest < 1.0
