"""Round four, corpora: chat templates run bounded (time, size, deterministic globals) and
every template error is one line; ``--train-on assistant`` refuses a conversation too long
to render turn by turn; JSON Lines split on "\\n" only, nesting and record length bounded;
Parquet read in pieces with memory checked from what decodes, dictionary columns read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from minigpt_tui.engine.core import memory
from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.core.errors import ConfigError, CorpusError, InputRefused
from minigpt_tui.engine.core.files import read_small_file
from minigpt_tui.engine.training import chat_sandbox, corpus as corpus_module
from minigpt_tui.engine.training.chat_data import ChatRenderer, ChatTemplate
from minigpt_tui.engine.training.chat_sandbox import BoundedEnvironment
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.training.parquet_corpus import parquet_items

CONVERSATION = [{"role": "system", "content": "  Be brief. "}, {"role": "user", "content": "What is json?"},
                {"role": "assistant", "content": "A text format, héllo 🙂"}]
CHATML = ("{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\n{% endfor %}"
          "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def _render(template: str, messages: list[dict[str, str]] = CONVERSATION, *, spans: bool = False) -> str:
    return ChatRenderer(ChatTemplate(template, "<s>", "</s>"), spans, "chat.jsonl line 1").record(
        "chat.jsonl line 1", messages)[0]


@pytest.mark.parametrize("template, phrase", [
    ("{{ 1/0 }}", "refuses this conversation (ZeroDivisionError: division by zero)"),
    ("{% for i in range(10**9) %}{% endfor %}", "range of 1,000,000,000 numbers, more than 100,000"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "it calls itself too deeply"),
    ("{{ 'a' * 10**8 }}", "it would build text of 100,000,000 characters"),
    ("{{ 'a\nb' | indent(10**9) }}", "it would build text of"),
    ("{{ 'a' | center(10**9) }}", "it would build text of 1,000,000,000 characters"),
    ("{{ '%10000000000s' | format('x') }}", "it would build text of"),
    ("{{ '%10000000000s' % 'x' }}", "it would build text of"),
    ("{{ '%*s' % (10**10, 'x') }}", "takes its width from an argument"),
    ("{{ '{:>{}}'.format('x', 10**10) }}", "it would build text of 10,000,000,000 characters"),
    ("{{ 'a'.ljust(10**10) }}", "it would build text of 10,000,000,000 characters"),
    ("{{ 10**(10**8) }}", "an integer of more than"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
     "it would build text of 16,777,216 characters"),
    ("{% set ns = namespace(s=['ab']) %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
     "it would build a list of"),
    ("{% set s = 'x' * 1000000 %}{% set y %}{% for i in range(100000) %}{{ s }}{% endfor %}{% endset %}{{ y }}",
     "it would build text of 100,000,000,000 characters"),
    ("{% for b in [1] | batch(10**9, 'x') %}{% endfor %}", "a list of 1,000,000,000 items"),
    ("{{ (['x' * 1000000] * 8 * 100) | tojson }}", "it would build text of"),
    ("{{ ('a' * 1000) | replace('', 'b' * 10000) }}", "it would build text of"),
    ("{{ lipsum() }}", "'lipsum' is undefined"),
])
def test_a_hostile_chat_template_is_one_line_within_its_bounds(template, phrase):
    with pytest.raises(CorpusError) as refused:
        _render(template)
    line = str(refused.value)
    assert line.startswith("chat.jsonl line 1: the model's chat template") and phrase in line, line
    assert "\n" not in line


def test_loops_are_counted_so_nested_loops_end(monkeypatch):
    monkeypatch.setattr(chat_sandbox, "STEP_LIMIT", 50_000)
    with pytest.raises(CorpusError, match="it ran more than 50,000 steps"):
        _render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
    # The clock bounds a rendering too (a step checks it every few thousand steps).
    monkeypatch.setattr(chat_sandbox, "RENDER_SECONDS", -1.0)
    with pytest.raises(CorpusError, match="it ran longer than"):
        _render("{% for i in range(10000) %}{% endfor %}")


def test_random_globals_are_gone_so_a_file_always_renders_the_same():
    with pytest.raises(CorpusError, match="not valid Jinja .No filter named 'random'"):
        _render("{{ [1, 2, 3] | random }}" + CHATML)
    assert _render(CHATML) == _render(CHATML)


RICH = """{%- set ns = namespace(turns=0) -%}
{%- for message in messages %}
  {%- set ns.turns = ns.turns + 1 %}
<|{{ message.role | upper }}|>{{ ('%-8s|%3d' % (message.role, loop.index)) }} {{ '{:>6}'.format(loop.index) }}
{{ message.content | trim | center(30) }}{{ message.content | indent(2, true) }}{{ ['a', message.role] | join('-') }}
{{ message.content | replace('o', '00') }} {{ {'turn': ns.turns, 'é': message.role} | tojson }}{{ eos_token ~ '!' * 2 }}
{%- endfor %}{{ messages | length * 3 }}{{ (messages | map(attribute='role') | list) + ['end'] }}"""


def test_a_good_template_renders_as_the_plain_sandbox_renders_it():
    plain = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    plain.filters["tojson"] = lambda value, **kw: json.dumps(value, ensure_ascii=False)
    expected = plain.from_string(RICH).render(messages=CONVERSATION, eos_token="</s>", bos_token="<s>",
                                              add_generation_prompt=False, tools=None, documents=None)
    assert _render(RICH) == expected
    bounded = BoundedEnvironment()
    assert bounded.render(bounded.from_string("{{ x | tojson(indent=2) }}"), {"x": {"a": [1]}}) == \
        json.dumps({"a": [1]}, indent=2)


def test_train_on_assistant_refuses_a_conversation_too_long_to_render_turn_by_turn():
    short = [dict(role=("user", "assistant")[i % 2], content=f"message {i}") for i in range(8)]
    text = _render(CHATML, short, spans=True)
    assert text.startswith("<|user|>\nmessage 0\n")
    talk = [dict(role=("user", "assistant")[i % 2], content=f"message {i}") for i in range(8000)]
    with pytest.raises(CorpusError, match=r"4,000 turns of [\d,]+ characters are more than it may .* use "
                                          "--train-on all"):
        _render(CHATML, talk, spans=True)


def _config(path: Path, preset: str = "mini", **corpus: object):
    return load_config(preset, overrides={"corpus": {"source": str(path), "val_every": 0, **corpus}}).corpus


def test_jsonl_lines_end_at_newline_only_and_nesting_is_bounded(tmp_path):
    texts = ["one\u2028two", "three\u0085four\x1cfive", "six\rseven"]
    path = tmp_path / "sep.jsonl"
    path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
    assert load_corpus(_config(path)).texts == texts
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"text": "a"}\n{"text": "b", "x": ' + "[" * 3000 + "]" * 3000 + "}\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"deep.jsonl line 2: not JSON \(nested deeper than 128 levels\)"):
        load_corpus(_config(deep))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "a}\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=r"broken.jsonl line 1: not JSON \(Unterminated string starting at 9\)"):
        load_corpus(_config(broken))


def test_a_record_longer_than_a_record_may_be_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "RECORD_CHARS_LIMIT", 20)
    path = tmp_path / "notes.jsonl"
    path.write_text(json.dumps({"text": "short"}) + "\n" + json.dumps({"text": "x" * 21}) + "\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"notes.jsonl line 2: a record of 21 characters, more than one record "
                                          r"may hold \(20\); split it"):
        load_corpus(_config(path))
    text = tmp_path / "notes.txt"
    text.write_text("short\n" + "y" * 30 + "\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"notes.txt record 2: a record of 30 characters"):
        load_corpus(_config(text))
    chat = tmp_path / "chat.jsonl"
    chat.write_text(json.dumps({"messages": CONVERSATION}) + "\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"chat.jsonl line 1: a record of \d+ characters"):
        load_corpus(_config(chat, "text", chat_template=CHATML))


pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def test_a_dictionary_parquet_column_reads_as_its_texts(tmp_path):
    texts = [f"The key is {c}." for c in ("red", "blue", "red", "gold")]
    plain, coded = tmp_path / "plain.parquet", tmp_path / "coded.parquet"
    pq.write_table(pa.table({"text": texts}), plain)
    pq.write_table(pa.table({"text": pa.array(texts).dictionary_encode()}), coded)
    assert pq.ParquetFile(coded).schema_arrow.field("text").type.value_type == pa.string()
    assert load_corpus(_config(coded)).texts == texts
    assert load_corpus(_config(coded)).identity == load_corpus(_config(plain)).identity


def test_parquet_rows_come_in_pieces_numbered_across_row_groups(tmp_path):
    path = tmp_path / "groups.parquet"
    pq.write_table(pa.table({"text": ["a", "b", "c", "d", None]}), path, row_group_size=2)
    pieces = parquet_items(path, path.read_bytes(), "text", slice_rows=1)
    assert [(rows.first, rows.values) for rows in (next(pieces), next(pieces), next(pieces))] == \
        [(1, ["a"]), (2, ["b"]), (3, ["c"])]
    with pytest.raises(CorpusError, match=r"groups.parquet row 5: the column 'text' has no value"):
        list(pieces)


def test_parquet_memory_is_estimated_from_rows_before_decoding(tmp_path, monkeypatch):
    path = tmp_path / "many.parquet"
    pq.write_table(pa.table({"text": pa.array([""] * 200_000).dictionary_encode()}), path, compression="zstd")
    assert path.stat().st_size < 10_000  # the file is small; its rows are not
    monkeypatch.setattr(memory, "available_memory", lambda: memory.Available(5_000_000, "machine"))
    with pytest.raises(ConfigError, match=r"reading the 200,000 rows of .*many.parquet needs about 24 MB of memory; "
                                          r"5 MB available"):
        load_corpus(_config(path))


def test_a_kind_with_its_article_reads_once(tmp_path):
    folder = tmp_path / "fifo"
    os.mkfifo(folder)
    with pytest.raises(InputRefused) as refused:
        read_small_file(folder, 10, "a text file")
    assert "not a text file" in str(refused.value) and "a a " not in str(refused.value)
    big = tmp_path / "big.txt"
    big.write_text("x" * 20)
    with pytest.raises(InputRefused, match="more than a token cache record may"):
        read_small_file(big, 10, "token cache record")
