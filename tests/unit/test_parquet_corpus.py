"""Parquet corpora: one record per row of the text column (``--text-field``), the same
records and identity as the JSON Lines file of the same texts; chat records from a
``messages`` column; a missing or non-text column, a null, a damaged file or a missing
pyarrow refused in one line, and nothing written."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from conftest import run_cli
from family_support import make_chat_folder, make_family_folder, training_text

from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.training.chat_data import hf_chat_template
from minigpt_tui.engine.training.corpus import load_corpus

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

TEXTS = [f"The key is {c}. Answer: {c}." for c in ("red", "blue", "green", "gold", "grey", "pink")]


def _parquet(path: Path, **columns) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def _corpus(path: Path, preset: str = "mini", **corpus):
    return load_corpus(load_config(preset, overrides={"corpus": {"source": str(path), "val_every": 3,
                                                                 **corpus}}).corpus)


def test_a_parquet_file_gives_the_records_and_identity_of_the_same_jsonl(tmp_path):
    path = _parquet(tmp_path / "notes.parquet", text=TEXTS, body=[t.upper() for t in TEXTS], n=list(range(6)))
    jsonl = tmp_path / "notes.jsonl"
    jsonl.write_text("\n".join(json.dumps({"text": t}) for t in TEXTS) + "\n", encoding="utf-8")
    corpus = _corpus(path)
    assert corpus.texts == TEXTS and corpus.identity == _corpus(jsonl).identity
    body = _corpus(path, text_field="body")
    assert body.texts == [t.upper() for t in TEXTS] and body.identity != corpus.identity
    # The source index keys a Parquet corpus by its column too.
    stream = _corpus(path, "text")
    assert stream.fingerprint != _corpus(path, "text", text_field="body").fingerprint
    # A folder of Parquet files: their rows in file-name order, blank texts skipped.
    folder = tmp_path / "folder"
    folder.mkdir()
    _parquet(folder / "a.parquet", text=TEXTS[:3])
    _parquet(folder / "b.parquet", text=["  ", *TEXTS[3:]])
    assert _corpus(folder).texts == TEXTS


@pytest.mark.parametrize("columns, message", [
    ({"body": TEXTS}, "no column 'text' (--text-field names another; its columns: body)"),
    ({"text": list(range(6))}, "the column 'text' holds int64, not text"),
    ({"text": ["one", None, "three"]}, "row 2: the column 'text' has no value (null)"),
])
def test_a_bad_parquet_file_is_refused_in_one_line_and_nothing_is_written(tmp_path, capsys, columns, message):
    path = _parquet(tmp_path / "bad.parquet", **columns)
    code, _, err = run_cli(capsys, "train", "--preset", "mini", "--corpus", str(path), "--steps", "2")
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1, err
    assert str(path) in lines[0] and message in lines[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_damaged_parquet_file_is_refused_in_one_line(tmp_path, capsys):
    path = _parquet(tmp_path / "notes.parquet", text=TEXTS)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    code, _, err = run_cli(capsys, "train", "--preset", "text", "--corpus", str(path), "--steps", "2")
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and f"{path}: not a readable Parquet file (" in lines[0], err
    assert "Traceback" not in err


def test_without_pyarrow_a_parquet_corpus_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    path = _parquet(tmp_path / "notes.parquet", text=TEXTS)
    real = importlib.import_module

    def without_pyarrow(name: str, *args):
        if name.split(".")[0] == "pyarrow":
            raise ImportError(f"No module named '{name}'")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", without_pyarrow)
    code, _, err = run_cli(capsys, "train", "--preset", "mini", "--corpus", str(path), "--steps", "2")
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1, err
    assert str(path) in lines[0] and "pip install 'minigpt-tui[parquet]'" in lines[0]


def test_a_messages_column_holds_chat_records_rendered_as_from_jsonl(tmp_path):
    template = ("{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{{ eos_token }}{% endfor %}"
                "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
    folder = make_chat_folder(tmp_path / "model", template)
    conversations = [[{"role": "user", "content": f"Name {c}."}, {"role": "assistant", "content": c}] for c in ("red", "blue", "green")]
    path = _parquet(tmp_path / "chat.parquet", messages=conversations)
    jsonl = tmp_path / "chat.jsonl"
    jsonl.write_text("\n".join(json.dumps({"messages": c}) for c in conversations) + "\n", encoding="utf-8")
    settings = hf_chat_template(folder).settings()
    for train_on in ("all", "assistant"):
        chat = _corpus(path, "text", train_on=train_on, **settings)
        same = _corpus(jsonl, "text", train_on=train_on, **settings)
        assert chat.chat and chat.texts == same.texts and chat.identity == same.identity
        assert chat.texts[0] == "<|user|>\nName red.<|endoftext|><|assistant|>\nred<|endoftext|>"


def test_a_transformers_model_fine_tunes_on_a_parquet_file(tmp_path, capsys):
    folder = make_family_folder("gpt2", tmp_path / "gpt2")
    path = _parquet(tmp_path / "notes.parquet", text=training_text() * 3)
    code, out, err = run_cli(capsys, "train", "--preset", "finetune", "--init-from", str(folder), "--corpus", str(path),
                             "--precision", "exact", "--steps", "2", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["step"] == 2 and result["data"]["mode"] == "stream" and result["data"]["train_tokens"] > 0
