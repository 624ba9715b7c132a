"""Round four, tokenizers: a tokenizer.json or a GGUF vocabulary is bounded before the
``tokenizers`` library (Rust: it aborts the process when an allocation fails and panics on
some patterns) builds or runs it; every refusal is one line of our error family."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from minigpt_tui.engine.core.errors import CheckpointError, TokenizerError
from minigpt_tui.engine.core.library_tokenizer import LibraryTokenizer
from minigpt_tui.engine.core.tokenizer_limits import check_regex
from minigpt_tui.engine.models import gguf_models
from minigpt_tui.engine.models.gguf_models import SPLITS, recovered_merges

ROOT = Path(__file__).resolve().parents[2]
GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
O200K_SPLIT = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
               r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
               r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _document() -> dict:
    """A small byte-level BPE tokenizer.json, trained here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.train_from_iterator(["hello world, a small text about aaa and bbb"] * 20, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return json.loads(raw.to_str())


def _tokenizer(document: dict, vocab_size: int | None = None) -> LibraryTokenizer:
    return LibraryTokenizer.from_text(json.dumps(document), vocab_size, bos_id=None, eos_ids=(), source="t.json")


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text and text.startswith("t.json: ")
    return text


def _with_split(document: dict, pattern: str) -> dict:
    return {**document, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
        document["pre_tokenizer"]]}}


# -- padding and truncation -----------------------------------------------------------------------
def test_a_fixed_padding_of_a_billion_neither_aborts_nor_pads(tmp_path):
    """It aborted the process (4 GB asked of Rust's allocator) on the first encode; here it
    runs under a 2 GiB address-space limit and the prompt comes back as its own ids."""
    document = _document()
    plain = _tokenizer(document).encode_prompt("hello world")
    padded = {**document, "padding": {"strategy": {"Fixed": 1_000_000_000}, "direction": "Right",
                                      "pad_to_multiple_of": None, "pad_id": 0, "pad_type_id": 0, "pad_token": "<eos>"}}
    (tmp_path / "t.json").write_text(json.dumps(padded))
    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from minigpt_tui.engine.core.library_tokenizer import read_library_tokenizer\n"
        "t = read_library_tokenizer(__import__('pathlib').Path(sys.argv[1]), None, bos_id=None, eos_ids=())\n"
        "print(t.encode_prompt('hello world'), t.encode_many(['hello', 'hello world']))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "t.json")], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = done.stdout.strip().split("] [", 1)
    assert first + "]" == str(plain)
    assert len(json.loads("[" + second)[0]) < len(json.loads("[" + second)[1])  # no batch padding either


def test_a_truncation_to_one_token_never_cuts_a_prompt():
    document = _document()
    whole = _tokenizer(document).encode_prompt("hello world, a small text")
    cut = {**document, "truncation": {"direction": "Right", "max_length": 1, "strategy": "LongestFirst", "stride": 0}}
    tokenizer = _tokenizer(cut)
    assert len(whole) > 1
    assert tokenizer.encode_prompt("hello world, a small text") == whole
    assert tokenizer.encode("hello world, a small text") == whole
    assert tokenizer.encode_many(["hello world, a small text"]) == [whole]


# -- normalizers ------------------------------------------------------------------------------------
def test_forty_doubling_replacements_are_refused_before_the_library_builds_them(monkeypatch):
    document = _document()
    chain = {**document, "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}] * 40}}
    import minigpt_tui.engine.core.library_tokenizer as library

    def never(text):
        raise AssertionError("built before it was checked")

    monkeypatch.setattr(library.Tokenizer, "from_str", staticmethod(never))
    with pytest.raises(TokenizerError) as err:
        _tokenizer(chain)
    assert "normalizer can make a text up to 1,099,511,627,776 times longer" in _one_line(err)


def test_a_few_growing_normalizers_are_accepted_and_applied():
    document = _document()
    grow = {**document, "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "NFKC"}, {"type": "Replace", "pattern": {"String": "a"}, "content": "aa"},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}, {"type": "Prepend", "prepend": "b"}]}}
    tokenizer = _tokenizer(grow)
    assert tokenizer.decode(tokenizer.encode_prompt("a  a")).display == "baa aa"


@pytest.mark.parametrize(("pattern", "expected"), [
    ({"String": ""}, "a Replace normalizer replaces the empty text"),
    ({"Regex": "z*"}, "a Replace normalizer's regex 'z*' can match the empty text"),
    ({"Regex": r"\b"}, r"a Replace normalizer's regex '\\b' can match the empty text"),
])
def test_a_replacement_of_the_empty_text_is_one_line_not_a_panic(pattern, expected):
    document = {**_document(), "normalizer": {"type": "Replace", "pattern": pattern, "content": "x"}}
    with pytest.raises(TokenizerError) as err:
        _tokenizer(document)
    assert _one_line(err).endswith(expected)


# -- regexes ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("pattern", [r"(x+x+)+y", r"(a*)*b", r"(?:\s*\w)+$", r"(\d{1,3})+,"])
def test_a_regex_that_repeats_a_repeating_group_is_refused(pattern):
    with pytest.raises(TokenizerError) as err:
        _tokenizer(_with_split(_document(), pattern))
    assert "the pre_tokenizer's Split regex" in _one_line(err)
    assert "repeats a group that itself repeats" in str(err.value)


@pytest.mark.parametrize("pattern", [GPT2_SPLIT, O200K_SPLIT, *sorted({p for p in SPLITS.values() if p}),
                                     r"\p{N}{1,3}", r" ?[^(\s|[.,!?…。，、।۔،])]+", r"(?:\d{3})+"])
def test_the_split_regexes_of_real_tokenizers_pass(pattern):
    check_regex(pattern, "t.json: the pre_tokenizer's Split regex")
    assert _tokenizer(_with_split(_document(), pattern)).encode_prompt("Hello, 12345 worlds!")


def test_a_regex_longer_than_the_bound_is_refused():
    with pytest.raises(TokenizerError) as err:
        _tokenizer(_with_split(_document(), "a" * 70_000))
    assert "has 70,000 characters" in _one_line(err)


def test_a_panic_inside_the_library_is_one_line_of_our_family():
    """``\\R`` is Oniguruma's, so Python's parser cannot vouch for this pattern and it reaches
    the library, whose backtracking limit then panics (a BaseException) on a long run."""
    tokenizer = _tokenizer(_with_split(_document(), r"(x+x+)+\Ry"))
    assert tokenizer.encode_prompt("xx")
    with pytest.raises(TokenizerError) as err:
        tokenizer.encode_prompt("x" * 5000)
    assert _one_line(err) == ("t.json: the tokenizers library failed while encoding a text "
                              "(Onig: Regex search error: retry-limit-in-match over)")
    with pytest.raises(TokenizerError):
        tokenizer.encode_many(["x" * 5000])


# -- vocabulary size ----------------------------------------------------------------------------------
def test_more_ids_than_the_model_has_rows_is_refused_before_building(monkeypatch):
    import minigpt_tui.engine.core.library_tokenizer as library

    document = _document()
    size = len(document["model"]["vocab"])

    def never(text):
        raise AssertionError("built before it was checked")

    monkeypatch.setattr(library.Tokenizer, "from_str", staticmethod(never))
    with pytest.raises(TokenizerError) as err:
        _tokenizer(document, vocab_size=size - 1)
    assert _one_line(err) == f"t.json: the tokenizer has {size} ids, more than the model's {size - 1} rows"


def test_deep_or_broken_json_is_one_line():
    for text in ("[" * 100_000 + "]" * 100_000, "{\"model\": ", "[1, 2]"):
        with pytest.raises(TokenizerError) as err:
            LibraryTokenizer.from_text(text, None, bos_id=None, eos_ids=(), source="t.json")
        _one_line(err)


# -- GGUF vocabularies --------------------------------------------------------------------------------
def _llama_writer(path: Path):
    """A GGUF writer with a one-block llama's settings (width 8, 2 heads, ffn 16)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    for name, setting in (("block_count", 1), ("context_length", 16), ("embedding_length", 8),
                          ("feed_forward_length", 16), ("attention.head_count", 2), ("attention.head_count_kv", 2)):
        writer.add_uint32(f"llama.{name}", setting)
    return writer


def _finish(writer, rows: int) -> None:
    """The model's tensors (zeros; ``rows`` embedding rows), then the file written."""
    shapes = {"token_embd.weight": (rows, 8), "output_norm.weight": (8,), "blk.0.attn_norm.weight": (8,),
              "blk.0.ffn_norm.weight": (8,), "blk.0.attn_q.weight": (8, 8), "blk.0.attn_k.weight": (8, 8),
              "blk.0.attn_v.weight": (8, 8), "blk.0.attn_output.weight": (8, 8), "blk.0.ffn_gate.weight": (16, 8),
              "blk.0.ffn_up.weight": (16, 8), "blk.0.ffn_down.weight": (8, 16)}
    for name, shape in shapes.items():
        writer.add_tensor(name, np.zeros(shape, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _gguf(path: Path, tokens: list[str], rows: int) -> Path:
    """A one-block llama GGUF with a SentencePiece vocabulary and ``rows`` embedding rows."""
    writer = _llama_writer(path)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([-float(i) for i in range(len(tokens))])
    writer.add_token_types([1] * len(tokens))
    _finish(writer, rows)
    return path


def test_a_vocabulary_larger_than_the_embedding_is_refused_before_any_tensor_or_merge(tmp_path, monkeypatch):
    path = _gguf(tmp_path / "v.gguf", [f"t{i}" for i in range(5000)], rows=40)

    def never(*args, **kwargs):
        raise AssertionError("reached before the vocabulary was checked")

    monkeypatch.setattr(gguf_models, "GGUFData", never)
    monkeypatch.setattr(gguf_models, "recovered_merges", never)
    monkeypatch.setattr(gguf_models.LibraryTokenizer, "from_text", never)
    with pytest.raises(CheckpointError) as err:
        gguf_models.open_gguf_model(path)
    assert str(err.value) == f"{path}: the vocabulary has 5,000 tokens, more than the model's 40 embedding rows"


def test_a_million_character_gguf_token_is_refused_in_one_line(tmp_path):
    path = _gguf(tmp_path / "long.gguf", ["a", "b", "a" * 1_000_000], rows=3)
    started = time.perf_counter()
    with pytest.raises(CheckpointError) as err:
        gguf_models.open_gguf_model(path)
    assert str(err.value) == f"{path}: a vocabulary token of 1,000,000 characters (at most 16,384 are accepted)"
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("tokenizer.ggml.pre", ["a", "b"], "tokenizer.ggml.pre an array of 2 items is not known"),
    ("tokenizer.ggml.token_type", 7, "tokenizer.ggml.token_type must be a list of whole numbers"),
    ("tokenizer.ggml.scores", ["x", "y", "z"], "tokenizer.ggml.scores must give one number per token"),
])
def test_tokenizer_metadata_of_the_wrong_type_is_one_line(tmp_path, key, value, expected):
    """The tokenizer's own reading of the keys (the file's metadata check may name them first)."""
    import gguf

    from minigpt_tui.engine.formats.gguf_file import read_gguf_header

    tokens = ["a", "b", "ab"]
    writer = _llama_writer(tmp_path / "m.gguf")
    model = "gpt2" if key == "tokenizer.ggml.pre" else "llama"
    writer.add_tokenizer_model(model)
    writer.add_token_list(tokens)
    if model == "gpt2":
        writer.add_token_merges(["a b"])
    if key != "tokenizer.ggml.scores":
        writer.add_token_scores([0.0, -1.0, -2.0])
    if key != "tokenizer.ggml.token_type":
        writer.add_token_types([1, 1, 1])
    writer.add_key_value(key, value, gguf.GGUFValueType.ARRAY if isinstance(value, list) else gguf.GGUFValueType.INT32,
                         sub_type=gguf.GGUFValueType.STRING if isinstance(value, list) else None)
    _finish(writer, rows=3)
    with pytest.raises(CheckpointError) as err:
        gguf_models.gguf_tokenizer(read_gguf_header(tmp_path / "m.gguf"), 3)
    assert expected in str(err.value) and "\n" not in str(err.value)


# -- merge recovery --------------------------------------------------------------------------------------
def _every_cut(tokens: list[str], scores: list[float]) -> list[list[str]]:
    """The definition, cut by cut (quadratic in a token's length)."""
    index = {token: i for i, token in enumerate(tokens)}
    found = []
    for token, score in zip(tokens, scores):
        pairs = sorted(((token[:c], token[c:]) for c in range(1, len(token)) if token[:c] in index and token[c:] in index),
                       key=lambda pair: (index[pair[0]], index[pair[1]]))
        found += [(left, right, score) for left, right in pairs]
    found.sort(key=lambda item: (item[2], len(item[0]), len(item[1])), reverse=True)
    return [[left, right] for left, right, _ in found]


def test_recovered_merges_are_the_definitions_with_long_tokens_too():
    rng = np.random.default_rng(4)
    pieces = ["▁", "a", "b", "c", "ab", "abc", "▁a", "ca", "x" * 40, "y" * 30]
    tokens = list(dict.fromkeys(pieces + ["".join(rng.choice(pieces, size=rng.integers(2, 9))) for _ in range(400)]))
    assert max(map(len, tokens)) > 64  # the long-token path is taken
    for scores in ([-float(i) for i in range(len(tokens))], [float(rng.integers(0, 5)) for _ in tokens]):
        assert recovered_merges(tokens, scores) == _every_cut(tokens, scores)


def test_a_million_character_token_costs_no_quadratic_time():
    tokens = ["a", "b", "ab", "▁", "▁a", "a" * 1_000_000, "▁" * 400_000]
    started = time.perf_counter()
    merges = recovered_merges(tokens, [0.0] * len(tokens))
    assert time.perf_counter() - started < 1.0
    assert merges == [["a", "b"], ["▁", "a"]]


def test_a_vocabulary_whose_merges_cost_too_much_is_refused(monkeypatch):
    monkeypatch.setattr(gguf_models, "MERGE_WORK", 200_000)
    tokens = ["a" * k for k in range(1, 400)]
    with pytest.raises(TokenizerError, match="would take too long"):
        recovered_merges(tokens, [0.0] * len(tokens))
