"""Per-token loss and activation patching, on our models and on models from elsewhere:
scores add up to the evaluation loss of the same windows; patching is exact at both ends."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from conftest import run_cli
from family_support import make_family_folder
from lens_support import varied_model
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.models.hf_models import open_hf_model
from minigpt_tui.engine.analysis.patching import Patch, Patcher, patch_prompts
from minigpt_tui.engine.analysis.scoring import score_text, windows
from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer

BYTES = ByteBPETokenizer()
TEXT = "the cat sat on the mat; the dog sat on the log. " * 3


def test_windows_score_every_id_once_with_context():
    for count, window, stride in ((10, 4, 2), (5, 4, 2), (100, 32, 31), (7, 8, 4), (33, 8, 1)):
        spans = windows(count, window, stride)
        scored = [t for _, end, first in spans for t in range(first, end)]
        assert scored == list(range(1, count))
        assert all(end - start <= window and first > start for start, end, first in spans)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_scores_add_up_to_the_loss_of_the_same_windows(family):
    model = varied_model(family)  # context 32: the text needs several windows
    scored = score_text(model, BYTES, TEXT, stride=12)
    ids = scored.ids
    assert scored.windows > 2 and [t.position for t in scored.tokens] == list(range(1, len(ids)))
    total, count = 0.0, 0
    with torch.no_grad():
        for start, end, first in windows(len(ids), 32, 12):
            logits = model(torch.tensor([ids[start:end]])).logits[0].to(torch.float64)
            targets = torch.tensor(ids[first:end])
            rows = logits[first - start - 1:end - start - 1]
            total += float(F.cross_entropy(rows, targets, reduction="sum"))
            count += len(targets)
    assert count == len(scored.tokens)
    assert scored.mean_loss == pytest.approx(total / count, rel=1e-12)
    worst = max(scored.tokens, key=lambda t: t.loss)
    assert worst.rank >= 1 and worst.top[0][2] >= worst.probability


def test_scoring_refuses_an_empty_text_and_a_bad_stride():
    model = varied_model("llama")
    with pytest.raises(GenerationError, match="empty"):
        score_text(model, BYTES, "")
    with pytest.raises(GenerationError, match="--stride must be between 1 and 31"):
        score_text(model, BYTES, TEXT, stride=32)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_patching_is_exact_at_both_ends(family):
    model = varied_model(family)
    clean, corrupt = BYTES.encode_prompt("the cat sat"), BYTES.encode_prompt("the dog sat")
    answer, against = BYTES.encode("o", bos=False, eos=False)[0], BYTES.encode("x", bos=False, eos=False)[0]
    patcher = Patcher(model, clean, corrupt, answer, against)
    assert patcher.clean_difference != patcher.corrupt_difference
    differ = tuple(i for i, (a, b) in enumerate(zip(clean, corrupt)) if a != b)
    # The embeddings where the prompts differ: the corrupt run becomes the clean run.
    assert patcher.difference([Patch("resid", 0, differ)]) == patcher.clean_difference
    # The last residual at the last position: what the head reads is the clean one.
    last = model.config.layers
    assert patcher.difference([Patch("resid", last, (len(clean) - 1,))]) == patcher.clean_difference
    # A position where the prompts agree, before they differ: nothing changes there.
    assert patcher.difference([Patch("resid", 0, (0,))]) == patcher.corrupt_difference
    # Every head of a block patched together is the block's attention output, less its bias.
    heads = [Patch("head", 1, tuple(range(len(clean))), h) for h in range(model.config.heads)]
    together = patcher.difference(heads)
    block = patcher.difference([Patch("attn", 1, tuple(range(len(clean))))])
    assert together == pytest.approx(block, abs=1e-9)


def test_patching_a_site_with_its_own_corrupt_value_changes_nothing():
    model = varied_model("llama")
    ids = BYTES.encode_prompt("the cat sat")
    patcher = Patcher(model, ids, ids, 5, 6)  # clean and corrupt the same prompt
    for patch in (Patch("resid", 2, (3,)), Patch("attn", 0, (1, 2)), Patch("mlp", 2, (4,)), Patch("head", 1, (3,), 2)):
        assert patcher.difference([patch]) == patcher.corrupt_difference


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_patched_run_from_its_block_equals_the_whole_forward(dtype):
    """A patched run starts at the patched block from the corrupt run's residual there; the
    same batch from the embeddings (every block recomputed) gives the same bits."""
    model = varied_model("llama", dtype=dtype)
    clean, corrupt = BYTES.encode_prompt("the cat sat"), BYTES.encode_prompt("the dog sat")
    patcher = Patcher(model, clean, corrupt, 5, 6)
    assert patcher.rows > 1  # the batched path is the one under test
    with torch.no_grad():
        whole = model(torch.tensor([list(corrupt)]), return_attention=True).logits[0, -1].to(torch.float64)
    assert float(whole[5] - whole[6]) == pytest.approx(patcher.corrupt_difference, rel=1e-5)
    layers, last = model.config.layers, len(corrupt) - 1
    first = next(i for i, (a, b) in enumerate(zip(clean, corrupt)) if a != b)  # where the prompts differ
    patches = [Patch("resid", layers, (last,)), Patch("resid", layers - 1, (first, last)), Patch("attn", 1, (first,)),
               Patch("mlp", layers - 1, (last,)), Patch("head", 1, (first + 1,), 1), Patch("mlp", 0, (first,))]
    for patch in patches:
        with torch.no_grad():
            out = model(torch.tensor([list(corrupt)] * patcher.rows), sites=patcher.sites([(patch,)]),
                        skip_head=True, return_attention=True)
            from_the_start = float(patcher._metric(out)[0])
        assert patcher.difference([patch]) == from_the_start, patch
        assert from_the_start != patcher.corrupt_difference, patch


def test_a_sweep_covers_every_site_and_position():
    model = varied_model("gpt2")
    result = patch_prompts(model, BYTES, "the cat", "the dog", "s", "x", sites=("resid", "attn", "mlp", "head"))
    length, layers, heads = len(result.clean_ids), model.config.layers, model.config.heads
    counts = {site: sum(1 for e in result.effects if e.site == site) for site in ("resid", "attn", "mlp", "head")}
    assert counts == {"resid": (layers + 1) * length, "attn": layers * length, "mlp": layers * length,
                      "head": layers * heads * length}
    last = [e for e in result.effects if e.site == "resid" and e.layer == layers and e.position == length - 1]
    assert last[0].restored == 1.0


def test_patching_refuses_unequal_prompts_and_long_answers():
    model = varied_model("llama")
    with pytest.raises(GenerationError, match="clean prompt is 8 ids and the corrupt one 9"):
        patch_prompts(model, BYTES, "the cat", "the cats", "s", "x")
    merged = ByteBPETokenizer.train(["ab ab ab"], 2)
    with pytest.raises(GenerationError, match="must be one token; it encodes to 2"):
        patch_prompts(model, merged, "ab", "ba", "xy", "a")


def test_score_and_patch_on_a_model_from_elsewhere(tmp_path, capsys):
    folder = make_family_folder("gpt_neox", tmp_path / "neox", seed=4)
    opened = open_hf_model(folder, dtype="float64")
    tokenizer = opened.tokenizer
    clean = tokenizer.encode_prompt("The json module")
    corrupt = [*clean[:2], (clean[2] + 7) % tokenizer.vocab_size, *clean[3:]]
    patcher = Patcher(opened.model, clean, corrupt, 10, 11)
    assert patcher.difference([Patch("resid", 0, (2,))]) == patcher.clean_difference
    last = opened.model.config.layers
    assert patcher.difference([Patch("resid", last, (len(patcher.clean_ids) - 1,))]) == patcher.clean_difference
    text = tmp_path / "text.txt"
    text.write_text("The json module exposes an API familiar to users of the standard library.")
    code, out, err = run_cli(capsys, "score", "--model", str(folder), "--text", str(text), "--json",
                             "--compare", str(folder))
    assert code == 0, err
    data = json.loads(out)
    assert data["tokens_scored"] == len(data["ids"]) - 1
    assert all(t["change"] == 0 for t in data["compare"]["tokens"])
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    code, _, err = run_cli(capsys, "score", "--model", str(folder), "--text", str(empty))
    assert code == 1 and "empty" in err and len(err.strip().splitlines()) == 1
    code, out, err = run_cli(capsys, "patch", "--model", str(folder), "--clean", "The json", "--corrupt", "The json",
                             "--answer", "s", "--against", "x", "--json")
    assert code == 0, err
    effects = json.loads(out)["effects"]
    assert effects and all(e["restored"] is None for e in effects)  # clean and corrupt agree: nothing to restore
