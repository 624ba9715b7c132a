"""Round four, corpora: chat templates that divide by zero, recurse, loop or build huge text
(each a one-line refusal within the bounds), a long conversation under ``--train-on
assistant``, JSON Lines records too long or nested too deep, valid records with U+2028 or
U+0085 inside a string, Parquet files of tens of millions of rows, a dictionary column."""

from __future__ import annotations

import json
from pathlib import Path

from attack_cases import Case, write

TRAIN = ["train", "--preset", "text", "--steps", "1", "--set", "train.eval_every=0"]
CONVERSATION = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Red."}]
CHATML = ("{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\n{% endfor %}"
          "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
RAN = ("runs", "cache")  # a command that trains may write its run and its token cache


def _chat(root: Path, template: str, conversation: list[dict[str, str]] = CONVERSATION,
          copies: int = 8) -> list[str]:
    corpus = write(root / "chat.jsonl", (json.dumps({"messages": conversation}) + "\n") * copies)
    config = write(root / "chat.toml", "[corpus]\nchat_template = " + json.dumps(template) + "\n")
    return [*TRAIN, "--corpus", str(corpus), "--config", str(config)]


def _template(name: str, template: str) -> Case:
    return Case(f"r4 corpus: chat template {name}", lambda r: _chat(r, template))


def _parquet(path: Path, texts: object, *, dictionary: bool = False) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    column = texts if isinstance(texts, pa.Array) else pa.array(texts)
    if dictionary:
        column = column.dictionary_encode()
    pq.write_table(pa.table({"text": column}), path, compression="zstd")
    return path


def _many_rows(path: Path, rows: int, last: str) -> Path:
    """A small zstd file of ``rows`` rows, all blank but the last (a file that decodes large)."""
    import pyarrow as pa

    indices = pa.array([0] * (rows - 1) + [1], type=pa.int32())
    texts = pa.DictionaryArray.from_arrays(indices, pa.array(["", last])).cast(pa.string())
    return _parquet(path, texts)


def cases() -> list[Case]:
    templates = [
        _template("divides by zero", "{{ 1/0 }}"),
        _template("ranges 10**9 numbers", "{% for i in range(10**9) %}{% endfor %}"),
        _template("recurses", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
        _template("repeats a text 10**8 times", "{{ 'a' * 10**8 }}"),
        _template("indents by 10**9", "{{ 'a\nb' | indent(10**9) }}"),
        _template("centers in 10**9", "{{ 'a' | center(10**9) }}"),
        _template("formats a width of 10**10", "{{ '%10000000000s' | format('x') }}"),
        _template("pads with str.format", "{{ '{:>10000000000}'.format('x') }}"),
        _template("nests two loops of 100000", "{% for i in range(100000) %}{% for j in range(100000) %}"
                                               "{% endfor %}{% endfor %}"),
        _template("doubles a text 60 times", "{% set ns = namespace(s='ab') %}{% for i in range(60) %}"
                                             "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}"),
        _template("joins a block of 100000 copies", "{% set s = 'x' * 1000000 %}{% set y %}{% for i in "
                                                    "range(100000) %}{{ s }}{% endfor %}{% endset %}{{ y }}"),
        _template("uses lipsum", "{{ lipsum() }}" + CHATML),
        _template("uses random", "{{ [1, 2] | random }}" + CHATML),
    ]
    long_talk = [dict(CONVERSATION[i % 2], content=f"message {i}") for i in range(8000)]
    return [
        *templates,
        Case("r4 corpus: --train-on assistant, 8000 messages",
             lambda r: [*_chat(r, CHATML, long_talk, copies=2), "--train-on", "assistant"]),
        Case("r4 corpus: a 100 MB one-record JSON Lines file",
             lambda r: [*TRAIN, "--corpus", str(write(r / "big.jsonl", json.dumps({"text": "ab " * 33_400_000})
                                                      + "\n"))]),
        Case("r4 corpus: a JSON Lines record nested 3000 deep",
             lambda r: [*TRAIN, "--corpus", str(write(r / "deep.jsonl", '{"text": "a", "x": ' + "[" * 3000
                                                      + "]" * 3000 + "}\n"))]),
        Case("r4 corpus: JSON Lines records with U+2028 and U+0085 in a string",
             lambda r: [*TRAIN, "--corpus", str(write(r / "sep.jsonl", "".join(
                 json.dumps({"text": f"line {i}\u2028 more\u0085 text of record {i}."}, ensure_ascii=False) + "\n"
                 for i in range(400))))], may_change=RAN),
        Case("r4 corpus: a zstd Parquet file of 10 M rows",
             lambda r: [*TRAIN, "--corpus", str(_many_rows(r / "ten.parquet", 10_000_000, "the one text"))]),
        Case("r4 corpus: a zstd Parquet file of 50 M rows",
             lambda r: [*TRAIN, "--corpus", str(_many_rows(r / "fifty.parquet", 50_000_000, "the one text"))]),
        Case("r4 corpus: a dictionary-encoded Parquet text column",
             lambda r: [*TRAIN, "--corpus", str(_parquet(r / "dict.parquet", [f"The key is {c}. Answer: {c}."
                                                                            for c in ("red", "blue", "gold") * 200],
                                                         dictionary=True))], may_change=RAN),
    ]
