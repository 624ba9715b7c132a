"""Head roles: each score reads the attention it names, and the command scores every head."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import run_cli
from lens_support import BYTES_ONLY, varied_model
from minigpt_tui.engine.analysis.head_roles import ROLES, repeated_sequences, role_scores, score_heads


def _pattern(key_of, length: int = 9) -> torch.Tensor:
    """One head attending from each query q wholly to key_of(q) (q itself when None)."""
    weights = torch.zeros(1, 1, length, length, dtype=torch.float64)
    for q in range(length):
        key = key_of(q)
        weights[0, 0, q, q if key is None or key < 0 else key] = 1.0
    return weights


@pytest.mark.parametrize(("role", "key_of"), [
    ("previous_token", lambda q: q - 1),
    ("first_token", lambda q: 0),
    ("induction", lambda q: q - 4 + 1 if q >= 5 else None),  # BOS, then R (4 ids) twice
    ("duplicate_token", lambda q: q - 4 if q >= 5 else None),
])
def test_each_role_scores_one_for_the_head_that_does_it(role, key_of):
    scores = role_scores(_pattern(key_of), start=1, k=4)
    assert float(scores[role][0]) == pytest.approx(1.0)
    others = [r for r in ROLES if r != role and not (role == "induction" and r == "previous_token")]
    assert all(float(scores[r][0]) < 1.0 for r in others)


def test_sequences_repeat_and_skip_special_ids():
    ids = repeated_sequences(300, 6, bos=0, excluded={1})
    assert ids.shape == (4, 13) and bool((ids[:, 0] == 0).all())
    assert torch.equal(ids[:, 1:7], ids[:, 7:]) and not bool(((ids[:, 1:] == 0) | (ids[:, 1:] == 1)).any())


def test_every_head_is_scored_and_the_command_prints_them(tmp_path, capsys):
    model = varied_model("gpt2")
    roles = score_heads(model, BYTES_ONLY)
    assert len(roles) == model.config.layers * model.config.heads
    assert all(0.0 <= getattr(r, role) <= 1.0 for r in roles for role in ROLES)
    from minigpt_tui.engine.formats.portable import save_portable_model

    path = tmp_path / "model.safetensors"
    save_portable_model(model, BYTES_ONLY, path)
    code, out, err = run_cli(capsys, "heads", "--model", str(path), "--json")
    assert code == 0, err
    heads = json.loads(out)["heads"]
    assert [(h["layer"], h["head"]) for h in heads] == [(r.layer, r.head) for r in roles]
    assert heads[0]["induction"] == pytest.approx(roles[0].induction, abs=1e-12)
