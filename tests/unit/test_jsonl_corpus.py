"""JSON Lines corpora: one record per object's text field; a bad line names its file and
line number, and nothing is written."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli

from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.training.corpus import load_corpus


def _lines(records: list[object]) -> str:
    return "\n".join(json.dumps(r) for r in records) + "\n"


def test_records_come_from_the_field_and_the_identity_follows_it(tmp_path):
    path = tmp_path / "notes.jsonl"
    path.write_text(_lines([{"text": "first note", "body": "A"}, {"text": "second note", "body": "B"}, {}][:2])
                    + "\n" + _lines([{"text": "third", "body": "C"}]), encoding="utf-8")
    texts = load_corpus(load_config("mini", overrides={"corpus": {"source": str(path), "val_every": 0}}).corpus)
    body = load_corpus(load_config("mini", overrides={"corpus": {"source": str(path), "val_every": 0,
                                                                  "text_field": "body"}}).corpus)
    assert texts.texts == ["first note", "second note", "third"]
    assert body.texts == ["A", "B", "C"]
    assert texts.identity != body.identity
    # The source index keys a JSON Lines corpus by its field too: the same bytes read with
    # another field are another corpus.
    config = load_config("text", overrides={"corpus": {"source": str(path), "val_every": 0}})
    stream = load_corpus(config.corpus, cache_dir=tmp_path / "index")
    other = load_corpus(config.replace(corpus={"text_field": "body"}).corpus, cache_dir=tmp_path / "index")
    assert stream.fingerprint is not None and stream.fingerprint != other.fingerprint
    assert other.texts == ["A", "B", "C"]


@pytest.mark.parametrize("content, message", [
    ('{"text": "ok"}\n{"text": "broken\n', "line 2: not JSON"),
    ('{"text": "ok"}\n{"body": "no text"}\n', "line 2: no field 'text'"),
    ('{"text": 12}\n', "line 1: the field 'text' is int, not text"),
    ('["text"]\n', "line 1: no field 'text'"),
])
def test_a_bad_line_is_refused_in_one_line_and_nothing_is_written(tmp_path, capsys, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    code, out, err = run_cli(capsys, "train", "--preset", "mini", "--corpus", str(path), "--steps", "2")
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1
    assert str(path) in lines[0] and message in lines[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_train_reads_a_jsonl_file_with_another_field(tmp_path, capsys):
    path = tmp_path / "chat.jsonl"
    path.write_text(_lines([{"content": f"The key is {c}. Answer: {c}."} for c in ("red", "blue", "green", "gold")]),
                    encoding="utf-8")
    code, out, err = run_cli(capsys, "train", "--preset", "mini", "--corpus", str(path), "--text-field", "content",
                             "--steps", "2", "--val-every", "2", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["corpus_source"] == str(path)
    assert result["data"]["train_examples"] == 2 and result["data"]["validation_examples"] == 2
