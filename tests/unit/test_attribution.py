"""Attribution patching against exact references, in float64: each estimate is the
gradient a finite difference measures, exact where the metric is linear in the site, and
integrated gradients add up to the exact patch of a whole site; the agreement with exact
patching on known orderings; the ``patch`` flags."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import run_cli
from lens_support import BYTES_ONLY, varied_model
from minigpt_tui.engine.analysis.attribution import (
    Attributor,
    Estimate,
    agreement,
    attribute,
    attribute_prompts,
    spearman,
)
from minigpt_tui.engine.analysis.patching import Effect, Patch, Patcher, patch_prompts, site_of
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.models.sites import Sites

CLEAN, CORRUPT = "the cat sat", "the dog sat"
ALL_SITES = ("resid", "attn", "mlp", "head")


def _ids(char: str) -> int:
    return BYTES_ONLY.encode(char, bos=False, eos=False)[0]


def _pair(family: str) -> tuple[torch.nn.Module, Attributor]:
    model = varied_model(family)
    attributor = Attributor(model, BYTES_ONLY.encode_prompt(CLEAN), BYTES_ONLY.encode_prompt(CORRUPT), _ids("o"),
                            _ids("x"))
    return model, attributor


def _metric_with(model, attributor: Attributor, sites: Sites) -> float:
    """The metric of the corrupt run with ``sites``' edits, a one-row forward as the attributor's."""
    with torch.no_grad():
        out = model(torch.tensor([list(attributor.corrupt_ids)]), sites=sites, skip_head=True, return_attention=True)
    return float(attributor._metric(out.logits)[0])


@pytest.fixture(scope="module")
def gpt2_file(tmp_path_factory):
    from minigpt_tui.engine.formats.portable import save_portable_model

    path = tmp_path_factory.mktemp("attribution") / "model.safetensors"
    save_portable_model(varied_model("gpt2"), BYTES_ONLY, path)
    return path


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_each_estimate_is_a_central_finite_difference_along_clean_minus_corrupt(family):
    model, attributor = _pair(family)
    estimates = {e.key: e for e in attribute(attributor, ALL_SITES)}
    layers, last = model.config.layers, len(attributor.clean_ids) - 1
    differ = next(i for i, (a, b) in enumerate(zip(attributor.clean_ids, attributor.corrupt_ids)) if a != b)
    cells = [("resid", 0, None, differ), ("resid", 1, None, last), ("resid", layers, None, last),
             ("attn", 0, None, differ + 1), ("mlp", 2, None, last), ("head", 1, 2, last), ("head", 0, 3, differ)]
    eps = 1e-6
    for site, layer, head, position in cells:
        name = site_of(site, layer, layers)
        delta = attributor.clean[name] - attributor.corrupt[name]
        ends = []
        for sign in (1.0, -1.0):
            sites = Sites(model.config).replace(name, lambda v, s=sign: v + s * eps * delta, positions=(position,),
                                                heads=None if head is None else (head,))
            ends.append(_metric_with(model, attributor, sites))
        central = (ends[0] - ends[1]) / (2 * eps)
        change = estimates[(site, layer, head, position)].change
        assert change != 0, (site, layer, head, position)
        assert change == pytest.approx(central, abs=1e-6), (site, layer, head, position)


def test_where_the_metric_is_linear_in_the_site_attribution_is_exact_patching():
    """The final norm's output reaches the metric through the head's product alone: the
    first-order estimate is the patch itself, at every position and at all of them."""
    model, attributor = _pair("gpt2")
    name = "ln_final.hook_normalized"
    changes = attributor.changes(name, attributor.gradients([name])[name])
    whole = Sites(model.config).replace(name, attributor.clean[name])
    exact = _metric_with(model, attributor, whole) - attributor.corrupt_difference
    assert float(changes.sum()) == pytest.approx(exact, abs=1e-12)
    assert exact == pytest.approx(attributor.clean_difference - attributor.corrupt_difference, abs=1e-12)
    last = len(attributor.clean_ids) - 1
    assert changes[:last].abs().max() == 0  # positions before the last: no gradient, no patch effect
    assert float(changes[last]) == pytest.approx(exact, abs=1e-12)


def test_the_grid_is_the_exact_sweeps_and_identical_prompts_estimate_nothing():
    model = varied_model("llama")
    sweep = patch_prompts(model, BYTES_ONLY, "the cat", "the dog", "s", "x", sites=ALL_SITES)
    attributed = attribute_prompts(model, BYTES_ONLY, "the cat", "the dog", "s", "x", sites=ALL_SITES)
    assert [e.key for e in attributed.estimates] == [(e.site, e.layer, e.head, e.position) for e in sweep.effects]
    assert attributed.clean_difference == pytest.approx(sweep.clean_difference, rel=1e-12)
    same = attribute_prompts(model, BYTES_ONLY, "the cat", "the cat", "s", "x", sites=("resid", "head"), steps=2)
    assert all(e.change == 0 and e.restored is None for e in same.estimates)


def test_integrated_gradients_add_up_to_the_patch_of_every_position():
    """Completeness: a site's estimates over its positions approach the exact effect of
    patching all its positions at once; with 64 midpoint steps within 1e-3 (the clean −
    corrupt gap is about 0.9), and the error shrinks about as 1/steps²."""
    model, attributor = _pair("gpt2")
    patcher = Patcher(model, attributor.clean_ids, attributor.corrupt_ids, attributor.answer, attributor.against)
    every = tuple(range(len(attributor.clean_ids)))

    def errors(steps: int, sites: tuple[str, ...]) -> dict[tuple[str, int, int | None], float]:
        totals: dict[tuple[str, int, int | None], float] = {}
        for e in attribute(attributor, sites, steps):
            totals[e.key[:3]] = totals.get(e.key[:3], 0.0) + e.change
        return {row: abs(total - (patcher.difference([Patch(row[0], row[1], every, row[2])])
                                  - patcher.corrupt_difference)) for row, total in totals.items()}

    fine = errors(64, ALL_SITES)
    assert len(fine) == (3 + 1) + 2 * 3 + 3 * 4 and max(fine.values()) < 1e-3, max(fine.values())
    coarse, finer = errors(8, ("attn",)), errors(32, ("attn",))
    assert max(finer.values()) < max(coarse.values()) / 6


def test_integrated_gradients_in_smaller_batches_give_the_same_estimates(monkeypatch):
    from minigpt_tui.engine.analysis import attribution

    _, attributor = _pair("llama")
    whole = attribute(attributor, ("resid", "head"), steps=2)
    calls: list[int] = []
    monkeypatch.setattr(attribution, "IG_ROWS", 5)
    chunked = attribute(attributor, ("resid", "head"), steps=2, progress=lambda done, total: calls.append(total))
    assert calls == [2 * (1 + 3)] * len(calls) and len(calls) == 8  # resid: 4 rows; head: 12 rows in 3
    assert [e.key for e in chunked] == [e.key for e in whole]
    assert [e.change for e in chunked] == pytest.approx([e.change for e in whole], abs=1e-9)


def test_spearman_on_known_orderings():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)  # 1 - 6 * 4 / (5 * 24)
    # Ties share their mean rank: ranks (1, 2.5, 2.5, 4) against (1, 2, 3, 4).
    assert spearman([0.1, 0.5, 0.5, 0.9], [1, 2, 3, 4]) == pytest.approx(4.5 / (4.5 * 5) ** 0.5)
    assert spearman([1, 1, 1], [1, 2, 3]) is None and spearman([1], [2]) is None


def test_agreement_compares_changes_cell_by_cell_and_their_top_cells():
    corrupt = 2.0
    exact_changes = [0.5, -3.0, 0.0, 1.0, 2.0, -0.1, 0.2]
    attributed = [0.4, -2.0, 0.1, 3.0, 1.5, 0.0, -0.2]
    exact = [Effect("attn", layer, None, 0, corrupt + c, None) for layer, c in enumerate(exact_changes)]
    # Given in another order, and with a cell the sweep does not have: matched by cell.
    estimates = [Estimate("attn", layer, None, 0, c, corrupt + c, None)
                 for layer, c in reversed(list(enumerate(attributed)))]
    estimates.append(Estimate("mlp", 0, None, 0, 9.0, corrupt + 9.0, None))
    found = agreement(exact, estimates, corrupt, k=3)
    assert found.cells == 7
    assert found.spearman == pytest.approx(spearman(exact_changes, attributed))
    assert [key[1] for key in found.top_exact] == [1, 4, 3]
    assert [key[1] for key in found.top_attributed] == [3, 1, 4]
    assert found.shared == 3
    with pytest.raises(GenerationError, match="share no site"):
        agreement(exact, [Estimate("mlp", 0, None, 0, 1.0, 3.0, None)], corrupt)


def test_attribution_refuses_bad_steps_and_unequal_prompts():
    model, attributor = _pair("llama")
    with pytest.raises(GenerationError, match="at least 1 step, not 0"):
        attribute(attributor, ("resid",), steps=0)
    with pytest.raises(GenerationError, match="unknown site 'embed'"):
        attribute(attributor, ("embed",))
    with pytest.raises(GenerationError, match="clean prompt is 8 ids and the corrupt one 9"):
        attribute_prompts(model, BYTES_ONLY, "the cat", "the cats", "s", "x")


def test_patch_attribution_json_and_text(gpt2_file, capsys):
    args = ("patch", "--model", str(gpt2_file), "--clean", "ab", "--corrupt", "cb", "--answer", "c",
            "--against", "d", "--sites", "resid,attn,head")
    code, out, err = run_cli(capsys, *args, "--attribution", "--json")
    assert code == 0, err
    data = json.loads(out)
    grid = data["attribution"]
    assert grid["method"] == "gradient" and grid["steps"] is None
    cells = [(e["site"], e["layer"], e["head"], e["position"], e["name"]) for e in data["effects"]]
    assert [(e["site"], e["layer"], e["head"], e["position"], e["name"]) for e in grid["estimates"]] == cells
    assert set(grid["estimates"][0]) == {"site", "layer", "head", "position", "name", "change", "difference",
                                         "restored"}
    agreed = data["agreement"]
    assert agreed["cells"] == len(cells) and agreed["k"] == 5 and -1 <= agreed["spearman"] <= 1
    assert len(agreed["top_exact"]) == len(agreed["top_attributed"]) == 5 and 0 <= agreed["shared"] <= 5
    assert set(agreed["top_exact"][0]) == {"site", "layer", "head", "position", "name"}
    code, out, err = run_cli(capsys, *args, "--attribution-only", "--ig-steps", "2", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert "effects" not in data and "agreement" not in data
    assert data["attribution"]["method"] == "integrated_gradients" and data["attribution"]["steps"] == 2
    assert data["clean_difference"] == data["attribution"]["clean_difference"]
    code, out, err = run_cli(capsys, *args, "--attribution")
    assert code == 0, err
    assert "attribution estimate (the gradient at the corrupt run) of the share restored" in out
    assert "agreement over" in out and "Spearman rank correlation" in out


@pytest.mark.parametrize("steps", ["0", "-3"])
def test_patch_refuses_ig_steps_below_one_in_one_line(gpt2_file, capsys, steps):
    code, out, err = run_cli(capsys, "patch", "--model", str(gpt2_file), "--clean", "ab", "--corrupt", "cb",
                             "--answer", "c", "--against", "d", "--ig-steps", steps)
    assert code == 1 and out == ""
    assert err.strip() == f"minigpt-tui: error: --ig-steps must be at least 1, got {steps}"
