"""One intervention mechanism inside the model's forward: every named site can be read,
replaced or added to (engine/models/sites.py), and an edit that should change nothing
changes no bit, in float64."""

from __future__ import annotations

import pytest
import torch

from lens_support import BYTES_ONLY, FAMILY_SHAPES, varied_model
from minigpt_tui.engine.analysis.generation import DecisionStepper, GenerationRule
from minigpt_tui.engine.analysis.patching import Patch, Patcher
from minigpt_tui.engine.core.config import ModelConfig
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.models.model import MiniGPT
from minigpt_tui.engine.models.sites import Sites, site_names

PROMPT = "the cat sat on"
FAMILIES = ("llama", "gpt2", "gpt_neox")  # rotary + grouped kv heads, learned positions, parallel residual


def model_of(family: str) -> MiniGPT:
    if family in FAMILY_SHAPES:
        return varied_model(family)
    config = ModelConfig(family=family, width=16, heads=4, kv_heads=4, ffn=24, layers=3, context=32)
    model = MiniGPT(config, BYTES_ONLY.vocab_size, torch.float64)
    model.initialize(5)
    return model.eval()


def ids_of(prompt: str = PROMPT) -> torch.Tensor:
    return torch.tensor([BYTES_ONLY.encode_prompt(prompt)])


def hooked_values(model: MiniGPT, ids: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """What each module computes in a forward without sites, caught by PyTorch's own module
    hooks (the way activations were reached by hand before the sites), and the logits."""
    seen: dict[str, torch.Tensor] = {}

    def keep(name: str, value: torch.Tensor) -> None:  # a hook returning None changes nothing
        seen.setdefault(name, value)

    handles = [model.token_embedding.register_forward_hook(lambda m, a, out: keep("hook_embed", out)),
               model.final_norm.register_forward_hook(
                   lambda m, a, out: keep("ln_final.hook_normalized", out))]
    for layer, block in enumerate(model.blocks):
        name = f"blocks.{layer}"
        handles += [
            block.register_forward_pre_hook(lambda m, a, n=name: keep(f"{n}.hook_resid_pre", a[0])),
            block.register_forward_hook(lambda m, a, out, n=name: keep(f"{n}.hook_resid_post", out[0])),
            block.attn.register_forward_hook(lambda m, a, out, n=name: keep(f"{n}.hook_attn_out", out[0])),
            block.attn.o_proj.register_forward_pre_hook(lambda m, a, n=name: keep(f"{n}.attn.hook_z", a[0])),
            block.ffn.register_forward_hook(lambda m, a, out, n=name: keep(f"{n}.hook_mlp_out", out)),
        ]
        if not block.parallel:  # the feed-forward norm reads the residual after the attention add
            handles.append(block.ffn_norm.register_forward_pre_hook(
                lambda m, a, n=name: keep(f"{n}.hook_resid_mid", a[0])))
    try:
        with torch.no_grad():
            out = model(ids, return_attention=True)
    finally:
        for handle in handles:
            handle.remove()
    for layer, weights in enumerate(out.attentions):
        seen[f"blocks.{layer}.attn.hook_pattern"] = weights
    if model.config.positions == "learned":
        seen["hook_pos_embed"] = model.position_embedding.weight[: ids.shape[1]][None]
    return seen, out.logits


def run(model: MiniGPT, sites: Sites | None, ids: torch.Tensor | None = None) -> torch.Tensor:
    with torch.no_grad():
        return model(ids_of() if ids is None else ids, sites=sites).logits


@pytest.mark.parametrize("family", FAMILIES)
def test_reading_every_site_gives_what_the_modules_compute_and_changes_nothing(family):
    model = model_of(family)
    expected, logits = hooked_values(model, ids_of())
    sites = Sites(model.config).read("*")
    assert torch.equal(run(model, sites), logits)
    assert tuple(sites.values) == sites.names == site_names(model.config)  # every site, in forward order
    assert set(expected) == set(sites.names)
    for name in sites.names:
        assert torch.equal(sites[name], expected[name]), name
    patterns = Sites(model.config).read("blocks.*.attn.hook_pattern")
    run(model, patterns)
    assert list(patterns.values) == [f"blocks.{layer}.attn.hook_pattern" for layer in range(3)]


@pytest.mark.parametrize("family", FAMILIES)
def test_replacing_a_site_with_its_own_value_or_adding_zero_changes_no_bit(family):
    model = model_of(family)
    plain = run(model, None)
    read = Sites(model.config).read("*")
    run(model, read)
    for name in read.names:  # each site alone
        assert torch.equal(run(model, Sites(model.config).replace(name, read[name].clone())), plain), name
    # every site at once: by a function, adding zeros, adding a direction at coefficient 0
    width = model.config.width
    direction = torch.randn(width, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    same, zeros, nothing = Sites(model.config), Sites(model.config), Sites(model.config)
    for name in read.names:
        same.replace(name, lambda value: value.clone())
        zeros.add(name, torch.zeros(read[name].shape[-1], dtype=torch.float64))
        if read[name].shape[-1] == width:
            nothing.add(name, direction, 0.0)
    assert not nothing.active  # a coefficient of 0 is no edit at all
    for sites in (same, zeros, nothing):
        assert torch.equal(run(model, sites), plain)


@pytest.mark.parametrize("family", FAMILIES)
def test_adding_a_direction_equals_running_the_blocks_after_it_by_hand(family):
    model = model_of(family)
    ids = ids_of()
    t = ids.shape[1]
    read = Sites(model.config).read("*")
    run(model, read, ids)
    direction = torch.randn(model.config.width, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    rope = model.rotary(0, t, ids.device)
    for layer in range(model.config.layers):
        for positions in (None, (2, t - 1)):
            steered = run(model, Sites(model.config).add(f"blocks.{layer}.hook_resid_post", direction, 3.0,
                                                        positions=positions), ids)
            with torch.no_grad():
                x = read[f"blocks.{layer}.hook_resid_post"].clone()
                at = list(range(t)) if positions is None else list(positions)
                x[:, at] = x[:, at] + 3.0 * direction
                for block in model.blocks[layer + 1:]:
                    x = block(x, rope, None, 0)[0]
                by_hand = model.final_norm(x) @ model.head_weight.t()
            assert (steered - by_hand).abs().max() <= 1e-12, (layer, positions)
            assert not torch.equal(steered, run(model, None, ids))


def old_head_patching(patcher: Patcher, runs: list[tuple[Patch, ...]]) -> torch.Tensor:
    """The metric of a batch of head patches as patching computed it before the sites: the
    blocks walked by hand from the corrupt residual, a forward pre-hook on each patched
    block's output map putting the clean columns into each run's row."""
    model, clean, hd = patcher.model, patcher.clean, patcher.model.config.head_dim
    start = min(p.layer for patches in runs for p in patches)
    x = patcher.corrupt[f"blocks.{start}.hook_resid_pre"].expand(patcher.rows, -1, -1).contiguous()

    def hook(row: int, patch: Patch):
        def pre(_module, args):
            value, at = args[0].clone(), list(patch.positions)
            columns = slice(patch.head * hd, (patch.head + 1) * hd)
            value[row, at, columns] = clean[f"blocks.{patch.layer}.attn.hook_z"][0, at, columns]
            return (value, *args[1:])
        return pre

    handles = [model.blocks[p.layer].attn.o_proj.register_forward_pre_hook(hook(row, p))
               for row, patches in enumerate(runs) for p in patches]
    try:
        with torch.no_grad():
            rope = model.rotary(0, x.shape[1], x.device)
            for block in model.blocks[start:]:
                x = block(x, rope, None, 0, None, True)[0]
            pair = (model.final_norm(x)[:, -1] @ patcher._pair.t()).to(torch.float64)
    finally:
        for handle in handles:
            handle.remove()
    return (pair[:, 0] - pair[:, 1])[:len(runs)]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_per_head_replace_equals_the_old_patching_bit_for_bit(dtype):
    model = varied_model("llama", dtype=dtype)
    clean, corrupt = BYTES_ONLY.encode_prompt("the cat sat"), BYTES_ONLY.encode_prompt("the dog sat")
    for rows in (None, 1):
        patcher = Patcher(model, clean, corrupt, 5, 6, rows=rows)
        runs = [(Patch("head", layer, (position,), head),) for layer in (1, 2) for head in range(4)
                for position in (3, len(clean) - 1)][: patcher.rows]
        runs[0] = (Patch("head", 1, (3, 4), 0), Patch("head", 2, (4,), 3))  # two heads in one run
        assert torch.equal(patcher._batch(runs), old_head_patching(patcher, runs))
        # and through the model's forward from the embeddings: the same bits
        with torch.no_grad():
            whole = model(torch.tensor([list(corrupt)] * patcher.rows), sites=patcher.sites(runs), skip_head=True,
                          return_attention=True)
        assert torch.equal(patcher._metric(whole)[:len(runs)], old_head_patching(patcher, runs))


def test_head_edits_touch_only_their_heads_and_positions():
    model = varied_model("gpt2")
    ids = ids_of()
    sites = Sites(model.config).replace("blocks.1.attn.hook_z", lambda z: z * 0, positions=(4,), heads=(2,))
    sites.replace("blocks.0.attn.hook_pattern", lambda p: p * 0, positions=(5,), heads=(1,)).read("blocks.*.attn.*")
    run(model, sites, ids)
    z, pattern = sites["blocks.1.attn.hook_z"], sites["blocks.0.attn.hook_pattern"]
    hd = model.config.head_dim
    zeroed = torch.zeros_like(z, dtype=torch.bool)
    zeroed[0, 4, 2 * hd:3 * hd] = True
    assert bool((z[zeroed] == 0).all()) and bool((z[~zeroed] != 0).all())
    assert bool((pattern[0, 1, 5] == 0).all()) and float(pattern[0, 1, 4].sum()) == pytest.approx(1.0)
    assert float(pattern[0, 0, 5].sum()) == pytest.approx(1.0)


def test_positions_are_absolute_under_the_key_value_cache():
    """A steered generation edits the same positions whether each decision recomputes the
    prefix or continues the cache: the same ids, the logits within rounding; at coefficient
    0 every bit is the unsteered run's."""
    model = varied_model("llama")
    direction = torch.randn(model.config.width, dtype=torch.float64, generator=torch.Generator().manual_seed(3))

    def generate(use_cache: bool, coefficient: float) -> DecisionStepper:
        sites = Sites(model.config).add("blocks.1.hook_resid_post", direction, coefficient, positions=(1, 9, 12))
        stepper = DecisionStepper(model, BYTES_ONLY, "the cat", GenerationRule(max_new_tokens=12),
                                  use_kv_cache=use_cache, sites=sites)
        stepper.run()
        return stepper

    recomputed, cached, plain = generate(False, 4.0), generate(True, 4.0), generate(False, 0.0)
    assert recomputed.generated_ids == cached.generated_ids
    for ours, theirs in zip(recomputed.decisions, cached.decisions):
        assert torch.allclose(ours.logits, theirs.logits, rtol=0, atol=1e-9)
    unsteered = DecisionStepper(model, BYTES_ONLY, "the cat", GenerationRule(max_new_tokens=12))
    unsteered.run()
    assert all(torch.equal(a.logits, b.logits) for a, b in zip(plain.decisions, unsteered.decisions))
    assert not all(torch.equal(a.logits, b.logits) for a, b in zip(recomputed.decisions, unsteered.decisions))


def test_a_read_keeps_the_gradient_for_attribution():
    model = varied_model("gpt2")
    sites = Sites(model.config).read("blocks.1.hook_resid_pre")
    logits = model(ids_of(), sites=sites).logits
    grad, = torch.autograd.grad(logits[0, 1, 5], sites["blocks.1.hook_resid_pre"])
    assert grad.shape == sites["blocks.1.hook_resid_pre"].shape and bool(grad[0, :2].abs().sum(dim=-1).gt(0).all())
    assert bool((grad[0, 2:] == 0).all())  # causal: position 1's logit reads no later position


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_unknown_sites_and_bad_edits_are_refused_in_one_line_naming_the_valid_ones():
    model = varied_model("llama")
    sites = Sites(model.config)
    with pytest.raises(GenerationError) as error:
        sites.replace("blocks.3.hook_resid_pre", torch.zeros(16))
    message = one_line(error)
    assert "unknown site 'blocks.3.hook_resid_pre'" in message
    assert "hook_embed, blocks.{0..2}.hook_resid_pre" in message and "ln_final.hook_normalized" in message
    assert "hook_pos_embed" not in message and "blocks.{0..2}.hook_resid_mid" in message  # llama: rotary, sequential
    with pytest.raises(GenerationError, match="no site matches 'blocks.*.hook_result'") as error:
        sites.read("blocks.*.hook_result")
    one_line(error)
    with pytest.raises(GenerationError, match="has no heads") as error:
        sites.add("blocks.0.hook_resid_post", torch.zeros(16), heads=(0,))
    with pytest.raises(GenerationError, match="head 4 does not exist") as error:
        sites.replace("blocks.0.attn.hook_z", torch.zeros(16), heads=(4,))
    with pytest.raises(GenerationError, match="was not read") as error:
        sites["blocks.0.hook_resid_post"]
    with pytest.raises(GenerationError, match=r"do not broadcast") as error:
        run(model, Sites(model.config).replace("blocks.0.hook_mlp_out", torch.zeros(3)))
    one_line(error)
    with pytest.raises(ValueError, match="other settings"):
        run(model, Sites(varied_model("gpt2").config))
