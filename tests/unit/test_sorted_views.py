"""One vocabulary for the places inside a model, the views sorted by what matters, and the
command line's lens, contributions, patching and heads output in that vocabulary."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from lens_support import BYTES_ONLY, varied_model
from minigpt_tui.engine.analysis.head_roles import score_heads
from minigpt_tui.engine.analysis.lens import inspect_decision
from minigpt_tui.engine.analysis.site_names import head_name, patch_site_name, resid_name
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.session.generation import parse_head
from minigpt_tui.engine.session.insight import head_focus, heads_by_focus, largest_parts
from minigpt_tui.widgets.attention_view import attention_rows
from minigpt_tui.widgets.contributions_view import contribution_rows, contributions_text
from minigpt_tui.widgets.lens_view import lens_text


@pytest.fixture(scope="module")
def insight():
    model = varied_model("gpt2")
    return inspect_decision(model, BYTES_ONLY, BYTES_ONLY.encode_prompt("Heat map"), 72, lens=True,
                            contributions=True)


@pytest.fixture(scope="module")
def gpt2_file(tmp_path_factory):
    from minigpt_tui.engine.formats.portable import save_portable_model

    path = tmp_path_factory.mktemp("sorted") / "model.safetensors"
    save_portable_model(varied_model("gpt2"), BYTES_ONLY, path)
    return path


# -- names ----------------------------------------------------------------------------------------
def test_every_place_has_one_name():
    assert [resid_name(i) for i in range(3)] == ["embed", "block 0 resid", "block 1 resid"]
    assert head_name(18, 6) == "block 18 head 6"
    assert patch_site_name("resid", 0) == "embed" and patch_site_name("resid", 4) == "block 3 resid"
    assert patch_site_name("attn", 3) == "block 3 attn" and patch_site_name("mlp", 3) == "block 3 mlp"
    assert patch_site_name("head", 3, 1) == "block 3 head 1"


def test_the_lens_rows_and_the_contribution_parts_use_the_names(insight):
    assert [row.site for row in insight.lens] == ["embed", "block 0 resid", "block 1 resid", "block 2 resid"]
    assert [row.to_json()["site"] for row in insight.lens] == [row.site for row in insight.lens]
    names = [part.name for part in insight.contributions[0].parts()]
    assert names[:6] == ["embed", "block 0 head 0", "block 0 head 1", "block 0 head 2", "block 0 head 3",
                         "block 0 attn bias"]
    assert names[6] == "block 0 mlp" and names[-1] == "final norm bias"
    parts = insight.contributions[0].to_json()["parts"]
    assert [p["name"] for p in parts] == names and parts[0]["value"] == insight.contributions[0].embedding


def test_the_app_lens_names_its_streams_as_the_command_line_does(insight):
    lines = lens_text(insight.lens, 72, "G", 258).plain.splitlines()
    assert [line[:14].strip() for line in lines[2:6]] == [row.site for row in insight.lens]


@pytest.mark.parametrize("typed", ["18.6", "18 6", "b18 h6", "L18 H6", "l18 h6", "block 18 head 6"])
def test_a_head_can_be_typed_in_any_of_its_written_forms(typed):
    assert parse_head(typed, 30, 9) == (18, 6)


def test_a_typed_head_with_other_words_is_refused():
    with pytest.raises(GenerationError, match="names no head"):
        parse_head("layer 18 head 6", 30, 9)


# -- sorting --------------------------------------------------------------------------------------
def test_parts_largest_first_whatever_their_sign_and_the_rows_still_add_up(insight):
    parts = insight.contributions[0]
    rows = contribution_rows(parts, largest_first=True)
    sizes = [abs(value) for _, value in rows]
    assert sizes == sorted(sizes, reverse=True)
    assert sorted(rows) == sorted(contribution_rows(parts))  # the same parts, another order
    assert sum(value for _, value in rows) == pytest.approx(parts.total, abs=1e-12)
    text = contributions_text([parts], half=10).plain.splitlines()
    assert text[0] == "largest |contribution| first · b: model order"
    assert text[3].startswith(rows[0][0])
    model_order = contributions_text([parts], half=10, largest_first=False).plain.splitlines()
    assert model_order[0] == "model order · b: largest first" and model_order[3].startswith("embed ")


def test_equal_sizes_keep_the_models_order():
    from minigpt_tui.engine.analysis.lens import Part

    parts = [Part("a", 1.0), Part("b", -2.0), Part("c", -1.0), Part("d", 2.0)]
    assert [p.name for p in largest_parts(parts)] == ["b", "d", "a", "c"]


def test_a_heads_focus_leaves_out_the_first_position():
    assert head_focus(0, 0, (0.9, 0.02, 0.08)) == head_focus(0, 0, (0.9, 0.02, 0.08))
    focus = head_focus(2, 1, (0.9, 0.02, 0.08))
    assert (focus.position, focus.weight, focus.name) == (2, 0.08, "block 2 head 1")
    assert head_focus(0, 0, (1.0,)).weight == 1.0  # one position: the only one there is
    attention = (((0.98, 0.01, 0.01), (0.2, 0.7, 0.1)), ((0.1, 0.1, 0.8), (0.5, 0.25, 0.25)))
    assert [f.name for f in heads_by_focus(attention)] == ["block 1 head 0", "block 0 head 1", "block 1 head 1",
                                                           "block 0 head 0"]
    assert [f.name for f in heads_by_focus(attention, largest_first=False)] == [
        "block 0 head 0", "block 0 head 1", "block 1 head 0", "block 1 head 1"]


def test_attention_rows_sharpest_first_or_in_model_order():
    from types import SimpleNamespace

    attention = (((0.98, 0.01, 0.01), (0.2, 0.7, 0.1)), ((0.1, 0.1, 0.8), (0.5, 0.25, 0.25)))
    decision = SimpleNamespace(attention=attention, prefix_length=3, window_start=0)
    prefix = tuple(SimpleNamespace(text=t) for t in ("<bos>", "a", " b"))
    rows = ["".join(text for text, _ in row) for row in attention_rows(decision, prefix)]
    assert rows[0].endswith("^a·")
    assert rows[1].startswith("block 1 head 0") and rows[1].endswith("0.80 at 2 '·b'")
    assert rows[4].startswith("block 0 head 0") and rows[4].endswith("0.01 at 1 'a'")
    in_order = ["".join(t for t, _ in row) for row in attention_rows(decision, prefix, largest_first=False)]
    assert [row[:14] for row in in_order[1:5]] == ["block 0 head 0", "block 0 head 1", "block 1 head 0",
                                                   "block 1 head 1"]


# -- the command line -----------------------------------------------------------------------------
def test_generate_lists_the_largest_parts_and_sums_the_rest(gpt2_file, insight, capsys):
    code, out, err = run_cli(capsys, "generate", "--model", str(gpt2_file), "--prompt", "Heat map",
                             "--max-new-tokens", "1", "--contributions", "--parts", "3", "--lens")
    assert code == 0, err
    assert "the 3 largest of 20 parts (--parts all: every one), largest |contribution| first" in out
    assert "the other 17 parts" in out
    assert "block 2 resid" in out and "embed: the embeddings" in out and "hook_resid" not in out
    code, out, err = run_cli(capsys, "generate", "--model", str(gpt2_file), "--prompt", "Heat map",
                             "--max-new-tokens", "1", "--contributions", "--parts", "all", "--model-order")
    assert code == 0, err
    assert "all 20 parts, in model order" in out and "the other" not in out
    lines = [line for line in out.splitlines() if line.startswith("│ ")]
    parts = [line.split("│")[1].strip() for line in lines]
    assert parts[parts.index("embed"):][:2] == ["embed", "block 0 head 0"]


def test_generate_refuses_a_parts_count_below_one(gpt2_file, capsys):
    code, out, err = run_cli(capsys, "generate", "--model", str(gpt2_file), "--prompt", "a", "--contributions",
                             "--parts", "0")
    assert code == 1 and "--parts must be at least 1 or 'all', got 0" in err


def test_heads_lists_each_roles_top_heads_by_score_with_a_legend(gpt2_file, capsys):
    roles = score_heads(varied_model("gpt2"), BYTES_ONLY)
    code, out, err = run_cli(capsys, "heads", "--model", str(gpt2_file), "--top", "2")
    assert code == 0, err
    assert "block N head H: head H of block N, both counted from 0" in out
    best = sorted(roles, key=lambda r: -r.induction)[:2]
    table = out[out.index("induction:"):out.index("previous-token:")]
    named = [line.split("│")[1].strip() for line in table.splitlines() if line.startswith("│ block")]
    assert named == [r.name for r in best]
    assert f"{len(roles) - 2} more heads: --all lists them" in table
    code, out, err = run_cli(capsys, "heads", "--model", str(gpt2_file), "--all")
    table = out[out.index("first-token:"):]
    assert sum(line.startswith("│ block") for line in table.splitlines()) == len(roles)
    code, out, err = run_cli(capsys, "heads", "--model", str(gpt2_file), "--json")
    heads = json.loads(out)["heads"]
    assert [(h["name"], h["layer"], h["head"]) for h in heads] == [(r.name, r.layer, r.head) for r in roles]


def test_patch_names_its_rows_and_adds_the_name_to_json(gpt2_file, capsys):
    args = ("patch", "--model", str(gpt2_file), "--clean", "ab", "--corrupt", "cb", "--answer", "c",
            "--against", "d", "--sites", "resid,attn,head")
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    rows = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│ ")]
    assert rows[:5] == ["embed", "block 0 resid", "block 1 resid", "block 2 resid", "block 0 attn"]
    assert "block 2 head 3" in rows
    code, out, err = run_cli(capsys, *args, "--json")
    effects = json.loads(out)["effects"]
    assert {(e["site"], e["layer"], e["head"], e["name"]) for e in effects} >= {
        ("resid", 0, None, "embed"), ("resid", 3, None, "block 2 resid"), ("head", 1, 2, "block 1 head 2")}
