"""The source index: a restart on a cached stream-mode corpus reads no records, keeps the
corpus identity, and never trusts a damaged or stale index entry."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from minigpt_tui.engine.training import corpus as corpus_module
from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.training.corpus import load_corpus, split_records
from minigpt_tui.engine.core.errors import CorpusError
from minigpt_tui.engine.training.source_index import SourceIndex
from minigpt_tui.engine.training.token_cache import TokenCache
from minigpt_tui.engine.training.trainer import TrainingSetup


def reference_identity(texts: list[str], val_every: int) -> str:
    """The corpus identity as it was first defined (one update per record): checkpoints
    record this value, so it must never change."""
    digest = hashlib.sha256(b"minigpt-tui-corpus-v1\0")
    for record in split_records(texts, val_every):
        data = record.text.encode("utf-8")
        digest.update(record.split.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def write_text(path, paragraphs: int = 400) -> None:
    path.write_text("".join(f"paragraph {i}: sphinx of black quartz, judge my vow é\n\n" for i in range(paragraphs)),
                    "utf-8")


def stream_config(path, merges: int = 0):
    return load_config("mini", overrides={"corpus": {"mode": "stream", "source": str(path), "val_every": 7},
                                          "tokenizer": {"merges": merges}})


def prepared(config):
    corpus = load_corpus(config.corpus)
    return corpus, TrainingSetup.build(config, corpus)


def refuse_parsing(monkeypatch):
    def refuse(text):
        raise AssertionError("the records were parsed despite an intact source index entry")

    monkeypatch.setattr(corpus_module, "parse_records", refuse)


def test_the_identity_is_the_one_checkpoints_recorded_before():
    texts = ["one", "", "twó", "three\nlines", "four"] * 30
    corpus = corpus_module.Corpus.of_texts(texts, "x", 4)
    assert corpus.identity == reference_identity(texts, 4)
    assert corpus_module.Corpus.of_texts(texts, "x", 0).identity == reference_identity(texts, 0)
    assert corpus.train == [r.text for r in split_records(texts, 4) if r.split == "train"]
    assert corpus.validation == [r.text for r in split_records(texts, 4) if r.split == "validation"]


def test_a_restart_reads_no_records_and_keeps_identity_counts_and_tokens(monkeypatch, tmp_path):
    text = tmp_path / "text.txt"
    write_text(text)
    first, setup = prepared(stream_config(text))
    assert not first.from_index and first.identity == reference_identity(first.texts, 7)
    assert len(SourceIndex.at().files()) == 1
    refuse_parsing(monkeypatch)
    again, restarted = prepared(stream_config(text))
    assert again.from_index
    assert again.summary() == first.summary()
    assert np.array_equal(restarted.token_stream().train, setup.token_stream().train)
    assert restarted.corpus_summary() == setup.corpus_summary()


def test_records_are_read_on_demand_after_a_restart(tmp_path):
    text = tmp_path / "text.txt"
    write_text(text)
    first, _ = prepared(stream_config(text, merges=20))  # merges: the tokenizer needs the records
    again, _ = prepared(stream_config(text, merges=20))
    assert again.from_index and again.train == first.train and again.validation == first.validation


def test_records_read_after_the_file_changed_are_refused(tmp_path):
    text = tmp_path / "text.txt"
    write_text(text)
    prepared(stream_config(text))
    again = load_corpus(stream_config(text).corpus)
    assert again.from_index
    write_text(text, paragraphs=401)
    with pytest.raises(CorpusError, match="changed while it was in use"):
        again.train


def test_one_changed_byte_gives_a_new_identity_and_new_entries(monkeypatch, tmp_path):
    text = tmp_path / "text.txt"
    write_text(text)
    first, _ = prepared(stream_config(text))
    data = bytearray(text.read_bytes())
    data[100] = ord("X") if data[100] != ord("X") else ord("Y")
    text.write_bytes(bytes(data))
    changed, _ = prepared(stream_config(text))
    assert not changed.from_index and changed.identity != first.identity
    assert changed.identity == reference_identity(changed.texts, 7)
    assert len(SourceIndex.at().files()) == 2
    assert len(TokenCache(tmp_path / "token-cache").entries()) == 2


def test_another_split_rule_is_another_index_entry(tmp_path):
    text = tmp_path / "text.txt"
    write_text(text)
    prepared(stream_config(text))
    other = load_config("mini", overrides={"corpus": {"mode": "stream", "source": str(text), "val_every": 5},
                                           "tokenizer": {"merges": 0}})
    corpus, _ = prepared(other)
    assert not corpus.from_index and corpus.counts.validation_records == 80
    assert len(SourceIndex.at().files()) == 2


@pytest.mark.parametrize("damage", ["garbage", "identity", "counts", "truncated"])
def test_a_damaged_index_entry_is_never_trusted_and_is_rebuilt(tmp_path, damage):
    text = tmp_path / "text.txt"
    write_text(text)
    first, _ = prepared(stream_config(text))
    (entry,) = SourceIndex.at().files()
    stored = json.loads(entry.read_text("utf-8"))
    if damage == "garbage":
        entry.write_bytes(b"\x00\xffnot json")
    elif damage == "identity":  # a plausible identity, but the entry's own hash no longer matches
        stored["corpus"]["identity"] = "0" * 64
        entry.write_text(json.dumps(stored), "utf-8")
    elif damage == "counts":
        stored["corpus"]["train_records"] += 1
        entry.write_text(json.dumps(stored), "utf-8")
    else:
        entry.write_text(entry.read_text("utf-8")[:40], "utf-8")
    again, setup = prepared(stream_config(text))
    assert not again.from_index  # read and split again
    assert again.identity == first.identity
    assert setup.token_stream().train.size > 0
    restored = json.loads(entry.read_text("utf-8"))
    assert restored["corpus"]["identity"] == first.identity  # rewritten whole
    assert load_corpus(stream_config(text).corpus).from_index


def test_a_refused_corpus_writes_no_index_entry(tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("just a few words", "utf-8")
    with pytest.raises(CorpusError, match="fewer than one window"):
        prepared(stream_config(short))
    assert SourceIndex.at().files() == []
    assert not (tmp_path / "token-cache").exists()


def test_records_mode_does_not_use_the_index(monkeypatch, tmp_path):
    text = tmp_path / "text.txt"
    write_text(text)
    prepared(stream_config(text))
    records_mode = load_config("mini", overrides={"corpus": {"source": str(text), "val_every": 7}})
    corpus = load_corpus(records_mode.corpus)
    assert not corpus.from_index and corpus.fingerprint is None


def test_cache_clear_removes_the_index_too(tmp_path):
    text = tmp_path / "text.txt"
    write_text(text)
    prepared(stream_config(text))
    cache = TokenCache(tmp_path / "token-cache")
    assert len(cache.entries()) == 1  # the index is not listed as an entry
    assert len(cache.clear().entries) == 1
    assert SourceIndex.at().files() == []
    assert not load_corpus(stream_config(text).corpus).from_index
