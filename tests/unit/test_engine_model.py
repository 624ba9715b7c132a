"""The model: counts, the tied table, causality, recomputation with counter-based dropout."""

from __future__ import annotations

import torch

from minigpt_tui.engine.core.config import ModelConfig, load_config
from minigpt_tui.engine.models.model import DropoutKey, MiniGPT, count_parameters


def tiny_model() -> MiniGPT:
    config = load_config("tiny").model
    model = MiniGPT(config, 266, torch.float64)
    model.initialize(39)
    return model


def test_tiny_preset_has_29_tensors_and_1572_scalars():
    assert count_parameters(tiny_model()) == (29, 1572)


def test_tied_table_is_one_parameter_whose_gradient_combines_both_uses():
    model = tiny_model()
    names = [n for n, _ in model.named_parameters()]
    assert names.count("token_embedding.weight") == 1
    assert model.head_weight is model.token_embedding.weight
    ids = torch.tensor([[0, 5, 9, 12]])
    target = torch.tensor([[5, 9, 12, 1]])

    def loss_of(m: MiniGPT) -> torch.Tensor:
        logits = m(ids).logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))

    loss_of(model).backward()
    combined = model.token_embedding.weight.grad.clone()
    # The head-only contribution: detach the lookup so only the head path carries gradient.
    model.zero_grad()
    table = model.token_embedding.weight
    x = table.detach()[ids]
    out = model(ids, inputs_embeds=x)
    torch.nn.functional.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]), target.reshape(-1)).backward()
    head_only = table.grad.clone()
    lookup_only = combined - head_only
    assert head_only.abs().sum() > 0
    assert lookup_only[[0, 5, 9, 12]].abs().sum() > 0  # rows looked up receive lookup gradient
    assert torch.equal(lookup_only[100], torch.zeros_like(lookup_only[100]))  # unused row: head only


def test_changing_a_future_token_leaves_earlier_logits_unchanged():
    for family in ("llama", "gpt2"):
        config = ModelConfig(family=family, width=8, heads=2, kv_heads=1 if family == "llama" else 2,
                             ffn=16, layers=2, context=16)
        model = MiniGPT(config, 300, torch.float64)
        model.initialize(5)
        a = torch.tensor([[0, 10, 20, 30, 40, 50]])
        b = a.clone()
        b[0, 4] = 99
        la, lb = model(a).logits, model(b).logits
        assert torch.equal(la[0, :4], lb[0, :4]), family
        assert not torch.equal(la[0, 4], lb[0, 4]), family


def test_recomputation_on_and_off_give_bitwise_the_same_update_with_dropout():
    results = []
    for recompute in (False, True):
        model = tiny_model()
        model.train()
        ids = torch.tensor([[0, 99, 100, 34, 99], [0, 100, 99, 34, 1]])
        key = DropoutKey(seed=18446744073709551613, counter=288)
        out = model(ids, dropout=key, recompute=recompute)
        out.logits.sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        results.append((out.logits.detach(), out.consumed, grads))
    (l0, c0, g0), (l1, c1, g1) = results
    assert c0 == c1 > 0
    assert torch.equal(l0, l1)
    assert all(torch.equal(a, b) for a, b in zip(g0, g1))


def test_dropout_masks_depend_only_on_seed_and_counter():
    key = DropoutKey(7, 100)
    m1 = key.mask(0, (4, 4), 0.25, torch.float64)
    m2 = DropoutKey(7, 100).mask(0, (4, 4), 0.25, torch.float64)
    m3 = DropoutKey(7, 116).mask(0, (4, 4), 0.25, torch.float64)
    assert torch.equal(m1, m2)
    assert not torch.equal(m1, m3)
    assert set(m1.unique().tolist()) <= {0.0, 1.0 / 0.75}


def test_grouped_kv_heads_query_head_reads_kv_head_h_div_group():
    import math

    from minigpt_tui.engine.models.model import rope_tables, rotate_half

    config = ModelConfig(family="llama", width=8, heads=4, kv_heads=2, ffn=16, layers=1, context=8)
    model = MiniGPT(config, 270, torch.float64)
    model.initialize(3)
    ids = torch.tensor([[0, 5, 6]])
    weights = model(ids, return_attention=True).attentions[0][0]  # [H, T, S]
    block = model.blocks[0]
    x = block.attn_norm(model.token_embedding(ids))[0]
    hd = config.head_dim
    cos, sin = rope_tables(torch.arange(3), hd, config.rope_base, torch.float64)
    q = block.attn.q_proj(x).view(3, 4, hd).transpose(0, 1)
    k = block.attn.k_proj(x).view(3, 2, hd).transpose(0, 1)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    for h in range(4):
        scores = q[h] @ k[h // 2].T / math.sqrt(hd)
        scores = scores.masked_fill(~torch.ones(3, 3, dtype=torch.bool).tril(), float("-inf"))
        assert torch.allclose(weights[h], torch.softmax(scores, -1), atol=1e-14), h
