"""nanoGPT's ckpt.pt opens as the gpt2-family model it is, with meta.pkl's character table.

The checkpoint is written in the test the way nanoGPT's train.py writes it, from a
transformers GPT-2 with exact GELU (the same function nanoGPT computes), so transformers is
the reference for every logit."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from family_support import reference_greedy
from minigpt_tui.engine.core.errors import CheckpointError, GenerationError
from minigpt_tui.engine.analysis.generation import DecisionStepper
from minigpt_tui.engine.analysis.generation_rule import GenerationRule
from minigpt_tui.engine.models.nanogpt import open_nanogpt
from minigpt_tui.engine.analysis.lens import inspect_decision

CHARS = sorted(set("\n !',.:;?abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZé"))
PROMPT = "First Citizen:\nBefore we proceed, hear me speak."


def reference_gpt2(seed: int, zero_biases: bool = False):
    import transformers as tr

    torch.manual_seed(seed)
    config = tr.GPT2Config(n_embd=32, n_head=4, n_layer=2, n_positions=64, vocab_size=len(CHARS) + 3,
                           activation_function="gelu")
    model = tr.GPT2LMHeadModel(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if zero_biases and name.endswith(".bias"):
                param.zero_()
            elif "ln_" in name and name.endswith("weight"):
                param.copy_(1 + 0.3 * torch.randn_like(param))
            else:
                param.copy_(0.3 * torch.randn_like(param))
    return model.eval()


def write_ckpt(model, folder: Path, *, bias: bool = True, compiled: bool = False) -> Path:
    """What nanoGPT's train.py saves: Linear weights, lm_head tied to wte."""
    folder.mkdir(parents=True, exist_ok=True)
    state = {}
    for name, tensor in model.state_dict().items():
        if name.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        if not bias and name.endswith(".bias"):
            continue
        conv = any(part in name for part in ("c_attn.weight", "c_proj.weight", "c_fc.weight"))
        state[name] = tensor.t().contiguous() if conv else tensor.clone()
    state["lm_head.weight"] = state["transformer.wte.weight"]
    if compiled:
        state = {"_orig_mod." + k: v for k, v in state.items()}
    config = model.config
    args = {"n_layer": config.n_layer, "n_head": config.n_head, "n_embd": config.n_embd,
            "block_size": config.n_positions, "bias": bias, "vocab_size": config.vocab_size, "dropout": 0.0}
    torch.save({"model": state, "model_args": args, "iter_num": 250, "best_val_loss": torch.tensor(1.5),
                "config": {"dataset": "shakespeare_char"}}, folder / "ckpt.pt")
    itos = dict(enumerate(CHARS))
    (folder / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": len(CHARS), "itos": itos,
                                                    "stoi": {c: i for i, c in itos.items()}}))
    return folder / "ckpt.pt"


@pytest.mark.parametrize("compiled", [False, True])
def test_a_ckpt_pt_gives_transformers_logits_and_greedy_ids(tmp_path, compiled):
    ref = reference_gpt2(1)
    path = write_ckpt(ref, tmp_path / "out", compiled=compiled)
    ours = open_nanogpt(path)
    ids = ours.tokenizer.encode_prompt(PROMPT)
    assert ids == [CHARS.index(c) for c in PROMPT]
    with torch.no_grad():
        expected = ref(torch.tensor([ids])).logits[0]
        got = ours.model(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    greedy = reference_greedy(ref, ids, 6)
    stepper = DecisionStepper.from_portable(ours, PROMPT, GenerationRule("greedy", max_new_tokens=6))
    assert [d.chosen.id for d in stepper.run()] == greedy
    assert ours.tied_alias and ours.metadata["iter_num"] == 250


def test_without_biases_and_the_views_add_up(tmp_path):
    ref = reference_gpt2(2, zero_biases=True)
    with_bias = open_nanogpt(write_ckpt(ref, tmp_path / "b"), dtype="float64")
    without = open_nanogpt(write_ckpt(ref, tmp_path / "nb", bias=False), dtype="float64")
    assert not any(name.endswith(".bias") for name, _ in without.model.named_parameters())
    ids = without.tokenizer.encode_prompt(PROMPT)
    with torch.no_grad():
        torch.testing.assert_close(without.model(torch.tensor([ids])).logits,
                                   with_bias.model(torch.tensor([ids])).logits, atol=1e-12, rtol=0)
    insight = inspect_decision(without.model, without.tokenizer, ids, 5, lens=True, contributions=True)
    assert abs(insight.contributions[0].total - insight.contributions[0].logit) < 1e-9
    assert insight.contributions[0].norm_bias == 0.0


def test_the_character_table_is_read_as_data_only(tmp_path):
    path = write_ckpt(reference_gpt2(3), tmp_path / "out")
    hostile = pickle.dumps({"itos": {0: "a"}, "run": os.system})
    (path.parent / "meta.pkl").write_bytes(hostile)
    with pytest.raises(CheckpointError, match="names posix.system; only plain data"):
        open_nanogpt(path)
    (path.parent / "meta.pkl").unlink()
    with pytest.raises(CheckpointError, match="no meta.pkl beside it"):
        open_nanogpt(path)


def test_a_character_outside_the_table_is_one_line(tmp_path):
    ours = open_nanogpt(write_ckpt(reference_gpt2(4), tmp_path / "out"))
    with pytest.raises(GenerationError, match="'€' is not in this model's"):
        DecisionStepper.from_portable(ours, "price: €5", GenerationRule("greedy", max_new_tokens=2))


def test_not_a_nanogpt_checkpoint(tmp_path):
    torch.save({"weights": torch.zeros(3)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a nanoGPT checkpoint"):
        open_nanogpt(tmp_path / "other.pt")


def test_infer_takes_a_ckpt_pt(tmp_path, capsys):
    import json

    from conftest import run_cli

    path = write_ckpt(reference_gpt2(5), tmp_path / "out")
    code, out, err = run_cli(capsys, "infer", "--model", str(path), "--prompt", "Before we", "--json")
    assert code == 0, err
    assert json.loads(out)["prompt_ids"] == [CHARS.index(c) for c in "Before we"]
    code, _, err = run_cli(capsys, "infer", "--model", str(path), "--prompt", "€", "--json")
    assert code == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
