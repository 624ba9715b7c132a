"""The model built from declared parts computes what the two-family model it replaced
computed, bit for bit, on any machine: ``legacy_model.py`` is that model's code as it was.
Parameters (names, order, initial values), forward logits with dropout, attention weights,
the KV-cache path and every gradient are compared in exact and fast precision."""

from __future__ import annotations

import pytest
import torch

import legacy_model
from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.models.model import DropoutKey, MiniGPT

PRESETS = ("tiny", "mini", "small", "text")


def _pair(preset: str, precision: str) -> tuple[MiniGPT, legacy_model.MiniGPT]:
    config = load_config(preset).model
    if preset == "small":  # the same parts at a third of the size: the test stays quick
        config = load_config(preset, overrides={"model": {"width": 48, "ffn": 96, "context": 32}}).model
    dtype = torch.float64 if precision == "exact" else torch.float32
    fused = precision == "fast"
    new, old = MiniGPT(config, 300, dtype, fused), legacy_model.MiniGPT(config, 300, dtype, fused)
    new.initialize(11)
    old.initialize(11)
    return new, old


def _ids(model: MiniGPT, batch: int = 2) -> torch.Tensor:
    generator = torch.Generator().manual_seed(3)
    return torch.randint(0, model.vocab_size, (batch, model.config.context), generator=generator)


@pytest.mark.parametrize("precision", ["exact", "fast"])
@pytest.mark.parametrize("preset", PRESETS)
def test_training_forward_and_gradients_are_the_same_bits(preset, precision):
    new, old = _pair(preset, precision)
    assert [n for n, _ in new.named_parameters()] == [n for n, _ in old.named_parameters()]
    for (_, a), (_, b) in zip(new.named_parameters(), old.named_parameters()):
        assert torch.equal(a, b)
    ids = _ids(new)
    key = DropoutKey(seed=5, counter=1000)
    outputs = []
    for model in (new, old):
        model.train()
        out = model(ids, dropout=key if model is new else legacy_model.DropoutKey(5, 1000),
                    recompute=preset == "tiny")
        (out.logits.square().mean()).backward()
        outputs.append((out.logits.detach(), out.consumed, [p.grad.clone() for p in model.parameters()]))
    assert torch.equal(outputs[0][0], outputs[1][0]) and outputs[0][1] == outputs[1][1]
    for a, b in zip(outputs[0][2], outputs[1][2]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("precision", ["exact", "fast"])
@pytest.mark.parametrize("preset", PRESETS)
def test_evaluation_attention_and_the_cache_are_the_same_bits(preset, precision):
    new, old = _pair(preset, precision)
    new.eval()
    old.eval()
    ids = _ids(new, batch=1)
    with torch.no_grad():
        a, b = new(ids, return_attention=True), old(ids, return_attention=True)
        assert torch.equal(a.logits, b.logits)
        assert all(torch.equal(x, y) for x, y in zip(a.attentions, b.attentions))
        caches: list[list] = [[], []]
        for position in range(ids.shape[1]):
            step = ids[:, position:position + 1]
            x = new(step, cache=caches[0]).logits
            y = old(step, cache=caches[1]).logits
            assert torch.equal(x, y)
