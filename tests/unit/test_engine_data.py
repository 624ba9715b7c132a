"""Corpus records and split, tokenizer ids and merges, batches and windows, config."""

from __future__ import annotations

import pytest

from minigpt_tui.engine.training.batches import NO_TARGET, DocumentOrder, ReplacementSampler, make_batch, make_examples
from minigpt_tui.engine.core.config import CorpusConfig, SeedConfig, load_config
from minigpt_tui.engine.training.corpus import load_corpus, parse_records
from minigpt_tui.engine.core.errors import ConfigError, CorpusError, TokenizerError
from minigpt_tui.engine.core.tokenizer import BOS, EOS, ByteBPETokenizer


def test_bundled_corpus_splits_every_fourth_record_into_validation():
    corpus = load_corpus(CorpusConfig())
    assert len(corpus.records) == 32
    assert len(corpus.train) == 24 and len(corpus.validation) == 8
    assert [r.index for r in corpus.records if r.split == "validation"] == [3, 7, 11, 15, 19, 23, 27, 31]


def test_corpus_identity_covers_text_and_split():
    texts = ["one", "two", "three", "four"]
    from minigpt_tui.engine.training.corpus import Corpus

    a = Corpus.of_texts(texts, "x", 4)
    b = Corpus.of_texts(texts, "x", 2)
    c = Corpus.of_texts(["one", "two", "three", "four!"], "x", 4)
    assert a.identity != b.identity != c.identity
    assert a.identity == Corpus.of_texts(list(texts), "elsewhere", 4).identity


def test_records_are_lines_or_blank_line_paragraphs(tmp_path):
    assert parse_records("a\nb\n\n") == ["a", "b"]
    assert parse_records("first line\nsecond line\n\nnext para\n") == ["first line\nsecond line", "next para"]
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "b.txt").write_text("three\nfour\n")
    (folder / "a.txt").write_text("one\ntwo\n")
    corpus = load_corpus(CorpusConfig(source=str(folder), val_every=2))
    assert [r.text for r in corpus.records] == ["one", "two", "three", "four"]
    assert corpus.validation == ["two", "four"]


def test_bad_corpora_are_refused_with_one_line(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(CorpusError, match="no records"):
        load_corpus(CorpusConfig(source=str(empty)))
    with pytest.raises(CorpusError, match="not found"):
        load_corpus(CorpusConfig(source=str(tmp_path / "missing.txt")))
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(CorpusError, match="not UTF-8"):
        load_corpus(CorpusConfig(source=str(binary)))


def test_tokenizer_ids_are_bos_eos_bytes_then_merges():
    tok = ByteBPETokenizer.train(["aba", "ab aba.", "ba ab"], 8)
    assert tok.vocab_size == 266
    assert tok.merges[0] == (ord("a") + 2, ord("b") + 2)  # the most frequent pair first
    assert ByteBPETokenizer().encode("ab") == [BOS, 99, 100, EOS]
    ids = tok.encode("ab aba.")
    assert ids[0] == BOS and ids[-1] == EOS and len(ids) < 9
    assert tok.decode(ids).data == b"ab aba."


def test_merge_ties_break_toward_the_smaller_pair_in_our_id_space():
    # (z, y) and (y, z) each occur once: the tie goes to (y, z), smaller in our ids.
    tok = ByteBPETokenizer.train(["zy", "yz"], 1)
    assert tok.merges == ((ord("y") + 2, ord("z") + 2),)


def test_decoding_keeps_invalid_utf8_as_raw_bytes():
    tok = ByteBPETokenizer()
    ids = [BOS, 0xE2 + 2, 0x82 + 2, EOS]  # a truncated three-byte sequence
    decoded = tok.decode(ids)
    assert decoded.data == b"\xe2\x82"
    assert decoded.valid_utf8 is False
    assert "\ufffd" in decoded.display
    assert tok.piece_text(0xE2 + 2) == "\\xe2"


def test_tokenizer_identity_depends_on_merges_and_rejects_unknown_ids():
    a = ByteBPETokenizer.train(["abab", "abc"], 2)
    b = ByteBPETokenizer.train(["abab", "bcbc"], 2)
    assert a.identity != b.identity
    with pytest.raises(TokenizerError):
        ByteBPETokenizer(((2, 400),))


def test_long_records_are_cut_into_overlapping_context_windows():
    tok = ByteBPETokenizer()
    examples = make_examples(["abcdefghij"], tok, context=4)  # 12 ids
    assert [len(e.ids) for e in examples] == [5, 5, 4]
    targets = [t for e in examples for t in e.ids[1:]]
    assert targets == tok.encode("abcdefghij")[1:]  # every target exactly once


def test_padded_positions_carry_no_target():
    tok = ByteBPETokenizer()
    batch = make_batch(make_examples(["abc", "a"], tok, context=16))
    assert batch.inputs.shape == (2, 4)
    assert batch.targets[1].tolist() == [100 - 1, EOS, NO_TARGET, NO_TARGET]
    assert batch.valid_targets == 6


def test_batch_policies_peek_without_drawing_and_round_trip_their_state():
    sampler = ReplacementSampler(24, 101)
    assert sampler.peek(1, 8) == sampler.peek(1, 8)
    first = sampler.draw(1, 8)
    assert first == [[15, 19, 1, 22, 7, 15, 5, 3]]  # seed 003's first batch
    saved = sampler.state()
    nxt = sampler.draw(1, 8)
    other = ReplacementSampler(24, 0)
    other.load_state(saved)
    assert other.draw(1, 8) == nxt
    order = DocumentOrder(3, (2, 0, 1), 0)
    assert order.draw(2, 1) == [[2], [0]]
    assert (order.cursor, order.epoch) == (2, 0)
    assert order.draw(2, 1) == [[1], [2]]
    assert (order.cursor, order.epoch) == (1, 1)
    restored = DocumentOrder(3, None, 5)
    restored.load_state(order.state())
    assert restored.peek(2, 1) == order.peek(2, 1) == [[0], [1]]


def test_config_overrides_are_validated_with_named_settings(tmp_path):
    user = tmp_path / "user.toml"
    user.write_text("[train]\nsteps = 12\n[model]\ndropout = 0.1\n")
    config = load_config("mini", user)
    assert config.train.steps == 12 and config.model.dropout == 0.1
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nsteps = 'many'\n")
    with pytest.raises(ConfigError, match="train.steps must be an integer"):
        load_config("mini", bad)
    bad.write_text("[train]\nstepz = 3\n")
    with pytest.raises(ConfigError, match="unknown setting train.stepz"):
        load_config("mini", bad)
    bad.write_text("[model]\nwidth = 10\nheads = 3\n")
    with pytest.raises(ConfigError, match="multiple of model.heads"):
        load_config("mini", bad)
    bad.write_text("not toml = = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config("mini", bad)
    with pytest.raises(ConfigError, match="unknown preset"):
        load_config("huge")


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[train]\nrecompute = 1", "train.recompute must be true or false, got 1"),
        ("[train]\nsteps = true", "train.steps must be an integer, got True"),
        ("[train]\nsteps = 2.0", "train.steps must be an integer, got 2.0"),
        ("[train]\nlr = false", "train.lr must be a number, got False"),
        ("[model]\nfamily = 3", "model.family must be a string, got 3"),
        ("[train]\nbetas = [0.9]", "train.betas must be a list of two numbers, got [0.9]"),
        ("[train]\nbetas = [0.9, 'x']", "train.betas must be a number, got 'x'"),
        ("[train]\ndocument_order = 3", "train.document_order must be a list of integers, got 3"),
        ("[train]\ndocument_order = [0, 1.5]", "train.document_order must be an integer, got 1.5"),
    ],
)
def test_a_setting_of_the_wrong_type_is_named_with_the_type_it_needs(tmp_path, toml, message):
    bad = tmp_path / "bad.toml"
    bad.write_text(toml + "\n")
    with pytest.raises(ConfigError) as err:
        load_config("tiny", bad)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("overrides", "message", "field"),
    [
        ({"train": {"steps": 0}}, "train.steps must be at least 1, got 0", "train.steps"),
        ({"train": {"steps": 10**10}}, "train.steps is 10000000000, above the limit of 1,000,000,000", "train.steps"),
        ({"train": {"clip": -1.0}}, "train.clip must be 0 (off) or positive", "train.clip"),
        ({"train": {"threads": -1}}, "train.threads must be 0 (auto: adapts to how busy the machine is) or at least 1",
         "train.threads"),
        ({"corpus": {"val_every": 1}}, "corpus.val_every must be 0 (none) or at least 2", "corpus.val_every"),
        ({"model": {"dropout": 1.0}}, "model.dropout must be in [0, 1)", "model.dropout"),
        ({"model": {"rotary_fraction": 0.0}}, "model.rotary_fraction must be in (0, 1]", "model.rotary_fraction"),
        ({"seeds": {"data": -1}}, "seeds.data must be an unsigned 64-bit integer", "seeds.data"),
        ({"model": {"family": "x"}}, ("model.family must be one of ('llama', 'gpt2', 'qwen2', 'gpt_neo', "
                                      "'gpt_neox', 'qwen3', 'mistral', 'phi3', 'gemma2', 'gemma3'), got 'x'"),
         "model.family"),
        ({"train": {"warmup": 9, "steps": 3}}, ("train.warmup (9 updates) is longer than train.steps (3): train "
                                                "at least 9 updates, or set a shorter warmup ([train] warmup = N "
                                                "in a --config file)"), "train.warmup"),
        ({"train": {"lr": "fast"}}, "train.lr must be a number, got 'fast'", "train.lr"),
    ],
)
def test_a_refusal_names_the_setting_it_refuses(overrides, message, field):
    with pytest.raises(ConfigError) as err:
        load_config("tiny", overrides=overrides)
    assert (str(err.value), err.value.field) == (message, field)


def test_limits_and_help_come_from_each_settings_declaration():
    from minigpt_tui.engine.core.config import LIMITS, setting_of

    assert LIMITS["model.width"] == 16_384 and LIMITS["train.keep_last"] == 1_000_000 and len(LIMITS) == 23
    assert setting_of("train.steps").span == "1 to 1,000,000,000"
    assert setting_of("train.save_every").span == "0 to 1,000,000,000"
    assert setting_of("corpus.val_every").span == "0 (none) or 2 to 1,000,000,000"
    assert setting_of("train.batch_size").help == "examples per microbatch"


def test_settings_read_as_their_declared_types(tmp_path):
    user = tmp_path / "user.toml"
    user.write_text("[train]\nlr = 1\nbetas = [0, 0.5]\nrecompute = true\n")
    train = load_config("tiny", user).train
    assert (train.lr, train.betas, train.recompute) == (1.0, (0.0, 0.5), True)
    assert type(train.lr) is float and all(type(b) is float for b in train.betas)


def test_one_seed_derives_four_distinct_u64_streams():
    seeds = SeedConfig.derive(42)
    values = [seeds.init, seeds.data, seeds.dropout, seeds.sampling]
    assert len(set(values)) == 4 and all(0 <= v < 2**64 for v in values)
    assert SeedConfig.derive(42) == seeds and SeedConfig.derive(43) != seeds


def test_config_round_trips_through_its_normalized_dict():
    config = load_config("tiny")
    assert type(config).from_dict(config.to_dict()) == config
    assert config.seeds.dropout == 18446744073709551613


def _reference_merges(texts: list[str], merges: int) -> tuple[tuple[int, int], ...]:
    """The definition, recounting everything after each merge: slow and obviously right."""
    from collections import Counter

    from minigpt_tui.engine.core.tokenizer import BYTE_OFFSET, FIRST_MERGE_ID, _merge

    words = [[b + BYTE_OFFSET for b in t.encode()] for t in texts]
    learned: list[tuple[int, int]] = []
    while len(learned) < merges:
        counts = Counter(p for w in words for p in zip(w, w[1:]))
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        learned.append(best)
        words = [_merge(w, best, FIRST_MERGE_ID + len(learned) - 1) for w in words]
    return tuple(learned)


def test_fast_merge_learning_and_batch_encoding_equal_the_definition():
    import random

    rng = random.Random(7)
    for _ in range(200):
        alphabet = rng.choice(["ab", "abc", "ab .", "xyz w", "aé"])
        texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(1, 8))]
        merges = rng.randint(1, 12)
        tok = ByteBPETokenizer.train(texts, merges)
        assert tok.merges == _reference_merges(texts, merges), texts
        unseen = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 15))) for _ in range(4)]
        assert tok.encode_many(unseen) == [tok.encode(t) for t in unseen]


def test_fast_merge_learning_handles_long_runs_repeated_records_and_empty_ones():
    # Runs like "aaaaa" merge their overlapping occurrences left to right; repeated records
    # count once per copy; empty records hold no pair.
    import random

    rng = random.Random(11)
    for _ in range(60):
        alphabet = rng.choice(["a", "aab", "aaab ", "abab", "é"])
        texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(rng.randint(1, 6))]
        texts += rng.choices(texts, k=rng.randint(0, 4)) + [""]
        merges = rng.randint(1, 20)
        tok = ByteBPETokenizer.train(texts, merges)
        assert tok.merges == _reference_merges(texts, merges), texts
        assert tok.encode_many(texts) == [tok.encode(t) for t in texts]
