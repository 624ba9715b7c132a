"""Sparse autoencoders: SAELens' folder layout both ways, the decomposition identity in
float64, TopK's K, training that lowers the loss with equal bits for one seed, one-line
refusals, and the ``sae`` commands end to end."""

from __future__ import annotations

import json

import pytest
import torch

from minigpt_tui.engine.analysis.sae_features import (
    FINAL_SITE,
    TrainingSettings,
    decompose,
    evaluate,
    site_activations,
    split_value,
    train_autoencoder,
)
from minigpt_tui.engine.formats.portable import save_portable_model
from minigpt_tui.engine.formats.safetensors_write import write_safetensors
from minigpt_tui.engine.models.sae import SAEConfig, SAERefused, initialized, read_saelens, write_saelens
from tests.conftest import run_cli
from tests.lens_support import BYTES_ONLY, varied_model

SITE = "blocks.1.hook_resid_post"
TEXTS = ("the cat sat on the mat", "a dog ran in the park", "one two three four five", "she sells sea shells")


def random_sae(kind: str = "relu", d_in: int = 16, d_sae: int = 40, k: int | None = None, seed: int = 5,
               dtype: str = "float64"):
    sae = initialized(SAEConfig(kind, d_in, d_sae, SITE, k, dtype=dtype), seed)
    generator = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for tensor in (sae.W_enc, sae.b_enc, sae.W_dec, sae.b_dec, sae.threshold):
            tensor.copy_(torch.randn(tensor.shape, generator=generator, dtype=torch.float64).to(tensor.dtype))
        sae.threshold.abs_()
    return sae


def activations(model, texts=TEXTS, site=SITE):
    return site_activations(model, [BYTES_ONLY.encode_prompt(t) for t in texts], site)


@pytest.mark.parametrize("kind, k", [("relu", None), ("topk", 3), ("jumprelu", None)])
def test_a_saelens_folder_written_then_read_has_every_bit(tmp_path, kind, k):
    sae = random_sae(kind, k=k)
    write_saelens(sae, tmp_path / "sae")
    back = read_saelens(tmp_path / "sae")
    assert back.config == sae.config
    assert [name for name, _ in back.tensors()] == [name for name, _ in sae.tensors()]
    for (_, a), (_, b) in zip(sae.tensors(), back.tensors()):
        assert a.dtype == b.dtype and torch.equal(a, b)
    config = json.loads((tmp_path / "sae" / "cfg.json").read_text())
    assert config["architecture"] == {"relu": "standard", "topk": "topk", "jumprelu": "jumprelu"}[kind]
    assert config["metadata"]["hook_name"] == SITE


def test_a_folder_in_saelens_older_layout_loads_in_float32(tmp_path):
    """The layout SAELens wrote before version 6: top-level hook_name, activation_fn topk."""
    folder = tmp_path / "old"
    folder.mkdir()
    generator = torch.Generator().manual_seed(1)
    tensors = {"W_enc": (8, 12), "b_enc": (12,), "W_dec": (12, 8), "b_dec": (8,)}
    made = {n: torch.randn(s, generator=generator, dtype=torch.float32) for n, s in tensors.items()}
    write_safetensors(folder / "sae_weights.safetensors", list(made.items()))
    (folder / "cfg.json").write_text(json.dumps({
        "architecture": "standard", "activation_fn": "topk", "activation_fn_kwargs": {"k": 2}, "d_in": 8,
        "d_sae": 12, "dtype": "float32", "hook_name": "blocks.0.hook_resid_pre", "apply_b_dec_to_input": True,
        "normalize_activations": "none"}))
    sae = read_saelens(folder)
    assert (sae.config.kind, sae.config.k, sae.config.hook_name) == ("topk", 2, "blocks.0.hook_resid_pre")
    assert all(torch.equal(made[name], tensor) for name, tensor in sae.tensors())
    x = torch.randn(5, 8, generator=generator)
    expected = torch.relu((x - made["b_dec"]) @ made["W_enc"] + made["b_enc"])
    assert ((sae.encode(x) != 0).sum(-1) <= 2).all()
    assert torch.allclose(sae.encode(x).max(-1).values, expected.max(-1).values)


def _spoil(folder, *, cfg=None, drop=None, shape=None, dtype=None, extra=False):
    tensors = dict(read_saelens_tensors(folder))
    config = json.loads((folder / "cfg.json").read_text())
    config.update(cfg or {})
    for key in [k for k, v in (cfg or {}).items() if v is None]:
        config.pop(key)
    (folder / "cfg.json").write_text(json.dumps(config))
    if drop:
        tensors.pop(drop)
    if shape:
        tensors[shape] = tensors[shape][:-1]
    if dtype:
        tensors[dtype] = tensors[dtype].to(torch.float32)
    if extra:
        tensors["scaling_factor"] = torch.ones(1, dtype=torch.float64)
    (folder / "sae_weights.safetensors").unlink()
    write_safetensors(folder / "sae_weights.safetensors", list(tensors.items()))


def read_saelens_tensors(folder):
    return [(name, tensor.clone()) for name, tensor in read_saelens(folder).tensors()]


@pytest.mark.parametrize("spoil, words", [
    ({"drop": "b_enc"}, "lacks b_enc"),
    ({"shape": "W_dec"}, "W_dec has shape"),
    ({"dtype": "b_dec"}, "b_dec is float32"),
    ({"extra": True}, "scaling_factor"),
    ({"cfg": {"d_sae": None}}, "has no 'd_sae'"),
    ({"cfg": {"architecture": "gated"}}, "architecture 'gated'"),
    ({"cfg": {"normalize_activations": "expected_average_only_in"}}, "normalize_activations"),
    ({"cfg": {"dtype": "int8"}}, "dtype 'int8'"),
])
def test_a_bad_saelens_folder_is_refused_in_one_line(tmp_path, spoil, words):
    folder = write_saelens(random_sae(), tmp_path / "sae")
    _spoil(folder, **spoil)
    with pytest.raises(SAERefused) as refused:
        read_saelens(folder)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_topk_keeps_exactly_k_features():
    sae = random_sae("topk", k=4)
    with torch.no_grad():
        sae.b_enc.fill_(1e3)  # every pre-activation positive: the K largest are all kept
    x = torch.randn(50, 16, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    features = sae.encode(x)
    assert ((features != 0).sum(-1) == 4).all()
    pre = sae.pre_activations(x)
    assert torch.equal(features.max(-1).values, pre.max(-1).values)
    kept_floor = torch.where(features != 0, pre, torch.inf).min(-1).values
    dropped_top = torch.where(features == 0, pre, -torch.inf).max(-1).values
    assert (kept_floor >= dropped_top).all()


@pytest.mark.parametrize("kind, k", [("relu", None), ("topk", 5), ("jumprelu", None)])
def test_the_value_is_the_features_plus_the_bias_plus_the_error_in_float64(kind, k):
    sae = random_sae(kind, k=k)
    x = 30 * torch.randn(16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    split = split_value(sae, x)
    assert split.gap <= 1e-12
    assert torch.equal(split.features, sae.encode(x).detach())
    assert torch.allclose(split.parts.sum(0) + split.bias, sae.decode(sae.encode(x)).detach(), rtol=0, atol=1e-12)


def test_at_the_final_norm_the_logit_is_the_sum_of_the_features_bias_and_error():
    model = varied_model("gpt2")
    sae = random_sae(d_in=16)
    sae.config = SAEConfig("relu", 16, 40, FINAL_SITE)
    ids = BYTES_ONLY.encode_prompt("the cat sat")
    result = decompose(model, sae, ids, top=5)
    assert result.exact and result.gap <= 1e-12
    assert abs(result.total - result.logit) <= 1e-9
    assert result.features_logit + result.bias_logit + result.error_logit == pytest.approx(result.total, abs=1e-12)
    assert result.parts and all(p.logit is not None for p in result.parts)
    elsewhere = decompose(model, random_sae(), ids, top=5)
    assert not elsewhere.exact and elsewhere.total is None and elsewhere.gap <= 1e-12
    assert all(p.logit is None and len(p.promotes) == 3 for p in elsewhere.parts)


def test_a_width_or_site_that_does_not_match_is_refused_in_one_line():
    model = varied_model("gpt2")
    sae = random_sae(d_in=12)
    with pytest.raises(SAERefused, match="reads width 12"):
        decompose(model, sae, BYTES_ONLY.encode_prompt("ab"))
    sae.config = SAEConfig("relu", 16, 40, "blocks.9.hook_resid_post")
    with pytest.raises(Exception, match="no site 'blocks.9.hook_resid_post'"):
        decompose(model, sae, BYTES_ONLY.encode_prompt("ab"))


def test_training_lowers_the_loss_and_one_seed_gives_equal_bits():
    model = varied_model("gpt2")
    train = activations(model)
    config = SAEConfig("relu", 16, 32, SITE)
    settings = TrainingSettings(steps=60, batch_size=32, learning_rate=3e-3, l1=1e-3, seed=4, eval_every=30)
    before = evaluate(initialized(config, 4, train.mean(0)), train)
    first, evaluations = train_autoencoder(config, settings, train, train)
    second, _ = train_autoencoder(config, settings, train, train)
    assert [e.step for e in evaluations] == [30, 60]
    assert evaluations[-1].mse < 0.5 * before.mse
    assert evaluations[-1].explained_variance > before.explained_variance
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(first.tensors(), second.tensors()))
    other, _ = train_autoencoder(config, TrainingSettings(**{**settings.__dict__, "seed": 5}), train, train)
    assert not torch.equal(first.W_dec, other.W_dec)


def test_topk_training_keeps_k_and_lowers_the_error():
    model = varied_model("gpt2")
    train = activations(model)
    config = SAEConfig("topk", 16, 32, SITE, k=4)
    sae, evaluations = train_autoencoder(config, TrainingSettings(steps=60, batch_size=32, learning_rate=3e-3),
                                         train, train)
    assert evaluations[-1].l0 <= 4
    assert evaluations[-1].mse < evaluate(initialized(config, 0, train.mean(0)), train).mse


def test_jumprelu_training_learns_thresholds_and_the_l0_weight_buys_sparsity():
    model = varied_model("gpt2")
    train = activations(model)
    config = SAEConfig("jumprelu", 16, 32, SITE)
    settings = TrainingSettings(steps=60, batch_size=32, learning_rate=3e-3, seed=2, l0=0.0, first_threshold=0.5,
                                bandwidth=2.0)
    free, evaluations = train_autoencoder(config, settings, train, train)
    again, _ = train_autoencoder(config, settings, train, train)
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(free.tensors(), again.tensors()))
    assert not torch.equal(free.threshold, torch.full_like(free.threshold, 0.5))  # the thresholds moved
    assert evaluations[-1].mse < evaluate(initialized(config, 2, train.mean(0)), train).mse
    sparse, sparse_evaluations = train_autoencoder(
        config, TrainingSettings(**{**settings.__dict__, "l0": 50.0}), train, train)
    assert sparse_evaluations[-1].l0 < evaluations[-1].l0
    assert (sparse.threshold > 0).all()


def test_the_straight_through_threshold_gradient_is_minus_the_kernel():
    from minigpt_tui.engine.analysis import sae_features

    pre = torch.tensor([[0.95, 1.2, 0.3]], dtype=torch.float64)
    threshold = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64, requires_grad=True)
    sae_features._Step.apply(pre, threshold, 0.2).sum().backward()
    assert threshold.grad.tolist() == [-5.0, 0.0, 0.0]  # only 0.95 lies within 0.1 of its threshold
    threshold.grad = None
    out = sae_features._JumpReLU.apply(pre, threshold, 0.2)
    assert out.tolist() == [[0.0, 1.2, 0.0]]
    out.sum().backward()
    assert threshold.grad.tolist() == [-5.0, 0.0, 0.0]  # -threshold x kernel


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "model.safetensors"
    save_portable_model(varied_model("gpt2"), BYTES_ONLY, path)
    return path


def test_sae_train_then_decompose_on_the_command_line(capsys, tmp_path, model_file):
    out = tmp_path / "features"
    code, stdout, _ = run_cli(capsys, "sae", "train", "--model", str(model_file), "--site", FINAL_SITE,
                              "--features", "24", "--kind", "topk", "--k", "3", "--steps", "20", "--eval-every", "10",
                              "--corpus", "bundled:tiny.txt", "--out", str(out), "--json")
    assert code == 0
    report = json.loads(stdout)
    assert [e["step"] for e in report["evaluations"]] == [10, 20]
    assert report["config"]["k"] == 3 and (out / "sae_weights.safetensors").is_file()
    code, stdout, _ = run_cli(capsys, "sae", "decompose", "--model", str(model_file), "--sae", str(out),
                              "--prompt", "the cat", "--json")
    assert code == 0
    data = json.loads(stdout)
    assert data["exact_logit"] and data["identity_gap"] <= 1e-12 and abs(data["total"] - data["logit"]) <= 1e-9
    assert data["active_features"] <= 3
    code, stdout, _ = run_cli(capsys, "sae", "decompose", "--model", str(model_file), "--sae", str(out),
                              "--prompt", "the cat")
    assert code == 0 and "logit = Σ features" in stdout


@pytest.mark.parametrize("flags, words", [
    (("--kind", "topk"), "--k is needed"),
    (("--kind", "gated"), "--kind must be one of relu, topk, jumprelu"),
    (("--steps", "ten"), "--steps must be a whole number"),
    (("--site", "blocks.0.attn.hook_pattern"), "attention weights"),
    (("--site", "blocks.7.hook_resid_post"), "no site"),
    (("--corpus", "missing.txt"), "corpus not found"),
    (("--k", "3"), "--k is needed with --kind topk, and only with it"),
])
def test_sae_train_refuses_in_one_line(capsys, tmp_path, model_file, flags, words):
    base = {"--site": SITE, "--features": "8", "--steps": "2", "--kind": "relu"}
    base.update(dict(zip(flags[::2], flags[1::2])))
    base.setdefault("--corpus", "bundled:tiny.txt")
    argv = [token for pair in base.items() for token in pair]
    code, _, err = run_cli(capsys, "sae", "train", "--model", str(model_file), "--out", str(tmp_path / "x"), *argv)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and words in lines[0], err
    assert not (tmp_path / "x").exists()


def test_sae_train_never_replaces_a_folder(capsys, tmp_path, model_file):
    (tmp_path / "x").mkdir()
    code, _, err = run_cli(capsys, "sae", "train", "--model", str(model_file), "--site", SITE, "--features", "8",
                           "--steps", "2", "--corpus", "bundled:tiny.txt", "--out", str(tmp_path / "x"))
    assert code == 1 and len(err.strip().splitlines()) == 1 and "already exists" in err
