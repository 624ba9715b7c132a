"""The trainer's AdamW is torch's AdamW bit for bit, and training loads no compiler."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from minigpt_tui.engine.training.optimizer import AdamW


def _optimizer_steps(optimizer_class: type, kernel: dict, steps: int = 5) -> tuple[list[torch.Tensor], dict]:
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU(), torch.nn.Linear(5, 3)).double()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = optimizer_class([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=3e-3, betas=(0.9, 0.95), eps=1e-8, **kernel)
    data = torch.randn(steps, 4, 6, dtype=torch.float64)
    for batch in data:
        model(batch).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        for group in optimizer.param_groups:
            group["lr"] *= 0.9  # a schedule changes the groups between steps
    return [p.detach().clone() for p in model.parameters()], optimizer.state_dict()


@pytest.mark.parametrize("kernel", [{"foreach": False}, {"fused": True}], ids=["per-parameter", "fused"])
def test_the_update_and_the_state_equal_torchs_adamw_bit_for_bit(kernel):
    ours, our_state = _optimizer_steps(AdamW, kernel)
    theirs, their_state = _optimizer_steps(torch.optim.AdamW, kernel)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
    assert our_state["param_groups"] == their_state["param_groups"]
    for index, moments in their_state["state"].items():
        assert moments.keys() == our_state["state"][index].keys()
        assert all(torch.equal(moments[key], our_state["state"][index][key]) for key in moments)


def test_a_state_dict_loads_back_and_the_next_update_matches():
    weights, state = _optimizer_steps(AdamW, {"foreach": False}, steps=3)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU(), torch.nn.Linear(5, 3)).double()
    with torch.no_grad():
        for p, w in zip(model.parameters(), weights, strict=True):
            p.copy_(w)
    params = list(model.parameters())
    optimizer = AdamW([{"params": [p for p in params if p.dim() >= 2]}, {"params": [p for p in params if p.dim() < 2]}],
                      lr=1.0, foreach=False)
    optimizer.load_state_dict(state)
    assert optimizer.param_groups[0]["lr"] == state["param_groups"][0]["lr"]
    assert optimizer.state_dict()["state"].keys() == state["state"].keys()
    assert type(optimizer).__name__ == "AdamW"  # checkpoints record the class name


def test_training_in_exact_precision_imports_no_compiler(tmp_path):
    # (Recomputing activations goes through torch.utils.checkpoint, which does load it.)
    script = (
        "import sys\n"
        "from minigpt_tui.cli import main\n"
        "try:\n"
        f"    main(['train', '--preset', 'mini', '--steps', '3', '--runs-dir', {str(tmp_path)!r}, '--json'])\n"
        "except SystemExit as stop:\n"
        "    assert not stop.code, stop.code\n"
        "print('torch._dynamo' in sys.modules, 'sympy' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False False"


def test_exact_precision_turns_deterministic_algorithms_on_and_fast_turns_them_off():
    from minigpt_tui.engine.core.config import load_config
    from minigpt_tui.engine.training.trainer import apply_precision

    threads = torch.get_num_threads()
    try:
        apply_precision(load_config("tiny").train)
        assert torch.are_deterministic_algorithms_enabled() and torch.get_num_threads() == 1
        apply_precision(load_config("text").train)
        assert not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)
        torch.set_num_threads(threads)
