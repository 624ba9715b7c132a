"""Steering (engine/analysis/steering.py, session/steering.py, ``generate --steer-*``): a
direction added at a site during generation, checked in float64 against the unsteered run
(coefficient 0: every bit), against the residual edited by hand (the remaining blocks run
from it), across the key/value cache, and on a small model trained here to tell two
sentences apart, where a contrast direction turns one continuation into the other."""

from __future__ import annotations

import dataclasses

import json
import math

import pytest
import torch

from cli_support import one_error_line
from conftest import run_cli
from lens_support import BYTES_ONLY, byte_id, varied_model
from minigpt_tui.engine.analysis.generation import DecisionStepper, GenerationRule
from minigpt_tui.engine.analysis.steering import (
    Steering,
    contrast_direction,
    contrast_steering,
    load_direction,
    save_direction,
)
from minigpt_tui.engine.core.config import ModelConfig
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.formats.portable import save_portable_model
from minigpt_tui.engine.models.model import MiniGPT
from minigpt_tui.engine.models.sites import Sites
from minigpt_tui.engine.session.generation_runs import TraceRequest, generate_trace
from minigpt_tui.engine.session.steering import SteeringRequest

PROMPT = "the cat sat on"
GREEDY = GenerationRule("greedy", max_new_tokens=8)


class Portable:
    """What the session's use cases take: a model, its tokenizer, an identity and a path."""

    def __init__(self, model: MiniGPT) -> None:
        self.model, self.tokenizer, self.identity, self.path = model, BYTES_ONLY, None, None


def random_direction(width: int, seed: int = 7, scale: float = 30.0) -> torch.Tensor:
    return scale * torch.randn(width, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def stepped(model: MiniGPT, steering: Steering | None, *, cached: bool = False, prompt: str = PROMPT,
            rule: GenerationRule = GREEDY) -> DecisionStepper:
    sites = None
    if steering is not None:
        sites = steering.sites(model.config, len(BYTES_ONLY.encode_prompt(prompt)), rule.max_new_tokens)
    stepper = DecisionStepper(model, BYTES_ONLY, prompt, rule, use_kv_cache=cached, sites=sites)
    stepper.run()
    return stepper


# -- exactness -----------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("cached", [False, True])
def test_at_coefficient_zero_every_logit_has_the_unsteered_bits(family, cached):
    model = varied_model(family)
    plain = stepped(model, None, cached=cached)
    for positions in ("all", "prompt", "generated"):
        steering = Steering("blocks.1.hook_resid_post", random_direction(16), 0.0, positions)
        assert not steering.sites(model.config, 5, 8).active  # no edit recorded at all
        steered = stepped(model, steering, cached=cached)
        assert [d.chosen.id for d in steered.decisions] == [d.chosen.id for d in plain.decisions]
        for ours, theirs in zip(steered.decisions, plain.decisions, strict=True):
            assert torch.equal(ours.logits, theirs.logits)
    # the same through the session's use case: the trace's decisions are the unsteered trace's
    request = TraceRequest(PROMPT, GREEDY, kv_cache=cached)
    zero = SteeringRequest(contrast=("dog", "cat"), site="blocks.0.hook_resid_post", coefficient=0.0)
    steered_trace = generate_trace(Portable(model), TraceRequest(PROMPT, GREEDY, kv_cache=cached, steering=zero)).trace
    assert steered_trace["decisions"] == generate_trace(Portable(model), request).trace["decisions"]
    assert steered_trace["steering"]["coefficient"] == 0.0


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_steering_a_residual_equals_adding_to_it_by_hand_and_running_the_rest(family):
    model = varied_model(family)
    ids = torch.tensor([BYTES_ONLY.encode_prompt(PROMPT)])
    length = ids.shape[1]
    direction = random_direction(16)
    for layer in range(model.config.layers):
        site = f"blocks.{layer}.hook_resid_post"
        for positions, edited in (("all", range(length)), ("prompt", range(length - 3)),
                                  ("generated", range(length - 4, length))):
            # the forward over the whole sequence, steered (a prompt of length - 3 ids, 3 generated)
            steering = Steering(site, direction, 1.5, positions)
            with torch.no_grad():
                steered = model(ids, sites=steering.sites(model.config, length - 3, 3)).logits
            # by hand: read the residual, add the direction where edited, run the blocks after it
            read = Sites(model.config).read(site)
            with torch.no_grad():
                model(ids, sites=read)
                residual = read[site].clone()
                residual[:, list(edited)] = residual[:, list(edited)] + 1.5 * direction
                explicit = Sites(model.config).read("ln_final.hook_normalized")  # the same (explicit) attention
                by_hand = model(None, entering=(layer + 1, residual), sites=explicit).logits
            assert torch.equal(steered, by_hand), (site, positions)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("positions", ["all", "prompt", "generated"])
def test_cached_and_recomputed_steered_generation_choose_the_same_ids(family, positions):
    model = varied_model(family)
    steering = Steering("blocks.0.hook_mlp_out", random_direction(16, seed=11), 2.0, positions)
    recomputed, cached = stepped(model, steering), stepped(model, steering, cached=True)
    plain = stepped(model, None)
    assert [d.chosen.id for d in cached.decisions] == [d.chosen.id for d in recomputed.decisions]
    for ours, theirs in zip(cached.decisions, recomputed.decisions, strict=True):
        assert torch.allclose(ours.logits, theirs.logits, rtol=0, atol=1e-9)
    # the steering did something: some decision's logits moved
    assert any(not torch.allclose(s.logits, p.logits) for s, p in zip(recomputed.decisions, plain.decisions))


def test_steering_goes_on_past_the_context_with_and_without_the_cache():
    """Past the context the window is recomputed whole; the generated positions are still edited."""
    model = varied_model("gpt2")
    rule = GenerationRule("greedy", max_new_tokens=20)
    prompt = "a longer prompt of words"  # 25 ids with BOS: the window slides from the 8th decision
    steering = Steering("blocks.2.hook_resid_pre", random_direction(16, seed=5), 1.0, "generated")
    cached = stepped(model, steering, cached=True, prompt=prompt, rule=rule)
    recomputed = stepped(model, steering, prompt=prompt, rule=rule)
    assert cached.window_from is not None and len(cached.decisions) == 20
    assert [d.chosen.id for d in cached.decisions] == [d.chosen.id for d in recomputed.decisions]
    plain = stepped(model, None, prompt=prompt, rule=rule)
    assert not torch.equal(plain.decisions[-1].logits, recomputed.decisions[-1].logits)


def test_the_contrast_at_the_last_residual_turns_b_into_a_at_its_last_position():
    """At the last block's output, coefficient 1 at B's last position adds A - B there: the
    first decision after B is A's first decision (within rounding)."""
    model = varied_model("gpt2")
    site = f"blocks.{model.config.layers - 1}.hook_resid_post"
    prompt_a, prompt_b = "a dog ran by", "the cat"  # lengths differ: the last positions are compared
    steering = contrast_steering(model, BYTES_ONLY, site, (prompt_a, prompt_b))
    steered_b = stepped(model, steering, prompt=prompt_b)
    plain_a, plain_b = stepped(model, None, prompt=prompt_a), stepped(model, None, prompt=prompt_b)
    assert torch.allclose(steered_b.decisions[0].logits, plain_a.decisions[0].logits, rtol=0, atol=1e-9)
    assert not torch.allclose(plain_b.decisions[0].logits, plain_a.decisions[0].logits, atol=1e-3)
    # the mean over positions is another direction; unit scales it to norm 1
    mean = contrast_direction(model, BYTES_ONLY, site, prompt_a, prompt_b, reduce="mean", unit=True)
    assert math.isclose(float(mean.norm()), 1.0, rel_tol=1e-12)
    assert not torch.allclose(mean, steering.direction / steering.direction.norm())


# -- a model trained here ------------------------------------------------------------------------
SENTENCES = ("cats say meow. ", "dogs say woof. ")


@pytest.fixture(scope="module")
def trained():
    """A 2-block float64 model trained (Adam, both sentences a step) until it continues each."""
    config = ModelConfig(family="gpt2", width=16, heads=2, kv_heads=2, ffn=32, layers=2, context=32)
    model = MiniGPT(config, BYTES_ONLY.vocab_size, torch.float64)
    model.initialize(1)
    batch = torch.tensor([BYTES_ONLY.encode(s, eos=False) for s in SENTENCES])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tensors this small only wait on a second thread
    try:
        for _ in range(60):
            logits = model(batch[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval()


def first_decision(model: MiniGPT, prompt: str, steering: Steering | None = None):
    return stepped(model, steering, prompt=prompt, rule=GenerationRule("greedy", max_new_tokens=1)).decisions[0]


def log_odds(model: MiniGPT, prompt: str, steering: Steering | None, ours: str, theirs: str) -> float:
    """log p(ours) - log p(theirs) at the first decision after ``prompt``."""
    logits = first_decision(model, prompt, steering).logits
    return float(logits[byte_id(ours)] - logits[byte_id(theirs)])


def test_a_contrast_direction_steers_a_trained_model_toward_a_continuation(trained):
    assert first_decision(trained, "dogs say ").chosen.id == byte_id("w")
    assert first_decision(trained, "cats say ").chosen.id == byte_id("m")
    # "cats" - "dogs" at block 0's output (mean over positions), added at every position: the
    # dogs' sentence leans further toward the cats' continuation with each step of the coefficient
    steering = contrast_steering(trained, BYTES_ONLY, "blocks.0.hook_resid_post", ("cats", "dogs"), reduce="mean")
    leaning = [log_odds(trained, "dogs say ", dataclasses.replace(steering, coefficient=c), "m", "w") for c in (0, 1, 2, 4)]
    assert leaning == sorted(leaning) and leaning[-1] - leaning[0] > 2.0, leaning
    assert leaning[0] == log_odds(trained, "dogs say ", None, "m", "w")  # coefficient 0: the unsteered bits
    # against it, the cats' sentence leans toward the dogs'
    against = [log_odds(trained, "cats say ", dataclasses.replace(steering, coefficient=-c), "w", "m") for c in (0, 1, 2, 4)]
    assert against == sorted(against) and against[-1] - against[0] > 2.0, against
    # at the embeddings the same contrast takes the dogs' "w" from first place to below "m"
    embedded = contrast_steering(trained, BYTES_ONLY, "hook_embed", ("cats", "dogs"), reduce="mean", coefficient=4.0)
    assert log_odds(trained, "dogs say ", embedded, "m", "w") > 0


# -- files, records, refusals --------------------------------------------------------------------
def test_a_saved_direction_loads_with_its_bits_site_and_source(tmp_path):
    model = varied_model("llama")
    made = contrast_steering(model, BYTES_ONLY, "blocks.1.hook_attn_out", ("up", "down"), reduce="mean")
    path = save_direction(made, tmp_path / "up.safetensors")
    loaded = load_direction(path, coefficient=3.0, positions="generated")
    assert torch.equal(loaded.direction, made.direction) and loaded.direction.dtype == torch.float64
    assert loaded.site == "blocks.1.hook_attn_out" and loaded.digest == made.digest
    assert loaded.source["kind"] == "file" and loaded.source["saved"] == made.source
    assert load_direction(path, site="blocks.0.hook_resid_pre").site == "blocks.0.hook_resid_pre"
    # through the session: the file's direction at another site of the same width, checked against the model
    moved = SteeringRequest(file=str(path), site="blocks.2.hook_resid_post", coefficient=0.5).make(Portable(model))
    assert moved.site == "blocks.2.hook_resid_post" and moved.coefficient == 0.5 and moved.digest == made.digest
    with pytest.raises(GenerationError, match="unknown site 'blocks.3.hook_resid_post'"):
        SteeringRequest(file=str(path), site="blocks.3.hook_resid_post").make(Portable(model))


def test_the_trace_records_the_direction_and_compares_without_it(tmp_path):
    model = varied_model("gpt2")
    request = SteeringRequest(contrast=("dog", "cat"), site="blocks.1.hook_resid_post", coefficient=2.0,
                              positions="generated", save=str(tmp_path / "d.safetensors"), compare=True)
    generated = generate_trace(Portable(model), TraceRequest(PROMPT, GREEDY, steering=request))
    record = generated.trace["steering"]
    direction = contrast_direction(model, BYTES_ONLY, "blocks.1.hook_resid_post", "dog", "cat")
    assert record["site"] == "blocks.1.hook_resid_post" and record["coefficient"] == 2.0
    assert record["positions"] == "generated" and record["width"] == 16
    assert record["direction_sha256"] == Steering("x", direction).digest
    assert math.isclose(record["direction_norm"], float(direction.norm()), rel_tol=1e-15)
    assert record["source"] == {"kind": "contrast", "a": "dog", "b": "cat", "reduce": "last", "unit": False}
    json.dumps(generated.trace)  # JSON as it is
    compared = generated.trace["unsteered"]["compared"]
    plain = stepped(model, None)
    assert [row["without"]["id"] for row in compared] == [d.chosen.id for d in plain.decisions]
    assert [row["with"]["id"] for row in compared] == [d.chosen.id for d in generated.stepper.decisions]
    assert any(not row["same"] for row in compared)
    assert torch.equal(load_direction(tmp_path / "d.safetensors").direction, direction)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Steering("blocks.0.hook_resid_post", torch.ones(16), math.nan), "coefficient must be a finite"),
    (lambda: Steering("blocks.0.hook_resid_post", torch.ones(16), math.inf), "coefficient must be a finite"),
    (lambda: Steering("blocks.0.hook_resid_post", torch.ones(16), 1.0, "after"), "positions must be one of"),
    (lambda: Steering("blocks.0.hook_resid_post", torch.ones(2, 16)), "one vector of floats"),
    (lambda: Steering("blocks.0.hook_resid_post", torch.tensor([1.0, math.nan])), "NaN or infinite"),
    (lambda: SteeringRequest(contrast=("a", "b")), "needs the site"),
    (lambda: SteeringRequest(), "either a contrast pair"),
    (lambda: SteeringRequest(contrast=("a", "b"), file="f", site="s"), "either a contrast pair"),
    (lambda: SteeringRequest(file="f", unit=True), "shape a contrast direction"),
    (lambda: SteeringRequest(file="f", save="g"), "only a contrast direction is saved"),
])
def test_bad_steering_is_refused_in_one_line(make, message):
    with pytest.raises(GenerationError, match=message) as err:
        make()
    assert "\n" not in str(err.value)


def test_a_site_or_width_that_does_not_fit_the_model_is_refused():
    model = varied_model("llama")
    config = model.config
    with pytest.raises(GenerationError, match=r"unknown site 'blocks.9.hook_resid_post' \(sites: hook_embed, "):
        Steering("blocks.9.hook_resid_post", torch.ones(16)).check(config)
    with pytest.raises(GenerationError, match="has width 12 but site 'blocks.0.hook_resid_post' of this model holds 16"):
        Steering("blocks.0.hook_resid_post", torch.ones(12)).check(config)
    with pytest.raises(GenerationError, match="holds attention weights"):
        Steering("blocks.0.attn.hook_pattern", torch.ones(16)).check(config)
    with pytest.raises(GenerationError, match="the same values at 'blocks.0.hook_resid_post': the direction is zero"):
        contrast_direction(model, BYTES_ONLY, "blocks.0.hook_resid_post", "same", "same")
    with pytest.raises(GenerationError, match="longer than the model's context of 32"):
        contrast_direction(model, BYTES_ONLY, "blocks.0.hook_resid_post", "x" * 40, "y")


# -- the command line ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("steering") / "model.safetensors"
    save_portable_model(varied_model("gpt2"), BYTES_ONLY, path)
    return path


def generate(capsys, model_file, *extra):
    return run_cli(capsys, "generate", "--model", str(model_file), "--prompt", "the cat", "--max-new-tokens", "3",
                   *extra)


def test_generate_steers_records_saves_and_compares(model_file, tmp_path, capsys):
    saved = tmp_path / "dir.safetensors"
    code, out, err = generate(capsys, model_file, "--steer-from", "a dog", "the cat", "--steer-site",
                              "blocks.1.hook_resid_post", "--steer-coefficient", "2", "--save-steering", str(saved),
                              "--json", "--steer-compare")
    assert code == 0, err
    trace = json.loads(out)
    assert trace["steering"]["coefficient"] == 2.0 and trace["steering"]["source"]["a"] == "a dog"
    assert len(trace["unsteered"]["compared"]) == 3
    code, out, err = generate(capsys, model_file, "--steer-file", str(saved), "--steer-coefficient", "2",
                              "--steer-compare")
    assert code == 0, err
    assert "steering: 2 x direction at blocks.1.hook_resid_post · positions all" in out
    assert "decisions without and with the steering" in out and "output without:" in out
    code, out, err = generate(capsys, model_file, "--steer-file", str(saved), "--steer-coefficient", "0", "--json")
    assert code == 0, err
    code, plain, err = generate(capsys, model_file, "--json")
    assert json.loads(out)["decisions"] == json.loads(plain)["decisions"]


@pytest.mark.parametrize(("extra", "message"), [
    (("--steer-from", "a", "b"), "a contrast direction needs the site"),
    (("--steer-from", "a", "b", "--steer-site", "blocks.7.hook_resid_post"), "unknown site 'blocks.7.hook_resid_post'"),
    (("--steer-from", "a", "b", "--steer-site", "x", "--steer-coefficient", "nan"), "coefficient must be a finite"),
    (("--steer-from", "a", "b", "--steer-site", "x", "--steer-coefficient", "big"), "--steer-coefficient must be a number"),
    (("--steer-from", "a", "b", "--steer-site", "x", "--steer-positions", "late"), "positions must be one of"),
    (("--steer-from", "a", "b", "--steer-site", "x", "--steer-reduce", "max"), "reduces positions by one of"),
    (("--steer-from", "same", "same", "--steer-site", "blocks.0.hook_resid_post"), "the direction is zero"),
    (("--steer-site", "blocks.0.hook_resid_post"), "--steer-site steers: give the direction"),
    (("--steer-compare",), "--steer-compare steers: give the direction"),
    (("--steer-file", "missing.safetensors"), "missing.safetensors"),
    (("--steer-from", "a", "b", "--steer-site", "blocks.0.hook_resid_post", "--lens"), "without --steer-*"),
])
def test_generate_refuses_bad_steering_in_one_line(model_file, capsys, extra, message):
    code, _out, err = generate(capsys, model_file, *extra)
    assert code == 1
    assert message in one_error_line(err)


def test_generate_refuses_a_file_of_another_width_or_kind(model_file, tmp_path, capsys):
    narrow = save_direction(Steering("blocks.0.hook_resid_post", torch.ones(8, dtype=torch.float64)),
                            tmp_path / "narrow.safetensors")
    code, _out, err = generate(capsys, model_file, "--steer-file", str(narrow))
    assert code == 1 and "has width 8 but site 'blocks.0.hook_resid_post' of this model holds 16" in one_error_line(err)
    code, _out, err = generate(capsys, model_file, "--steer-file", str(model_file))
    assert code == 1 and "is not a steering file" in one_error_line(err)
    existing = tmp_path / "exists.safetensors"
    existing.write_bytes(b"x")
    code, _out, err = generate(capsys, model_file, "--steer-from", "a", "b", "--steer-site",
                               "blocks.0.hook_resid_post", "--save-steering", str(existing))
    assert code == 1 and "exists" in one_error_line(err) and existing.read_bytes() == b"x"
