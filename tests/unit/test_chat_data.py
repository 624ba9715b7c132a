"""Chat data: JSON Lines records with ``messages``, rendered with the model's own chat
template exactly as transformers renders and tokenizes them; ``--train-on assistant`` counts
only the assistant's tokens (those transformers marks in its generation blocks); a fine-tune
on chat data stopped and resumed equals one that never stopped; bad records are refused in
one line naming the file and line, and nothing is written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from family_support import make_chat_folder

from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.formats.gguf_file import read_gguf_header
from minigpt_tui.engine.session.opening import open_model
from minigpt_tui.engine.training.batches import NO_TARGET
from minigpt_tui.engine.training.chat_data import gguf_chat_template, hf_chat_template
from minigpt_tui.engine.training.chat_tokens import chat_tokens
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.training.stream import TokenWindows

# The assistant's turns inside generation blocks, so transformers' own assistant mask is the reference.
TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}<|assistant|>\n"
    "{% generation %}{{ message['content'] }}{{ eos_token }}{% endgeneration %}"
    "{% elif message['role'] in ['system', 'user'] %}<|{{ message['role'] }}|>\n{{ message['content'] }}"
    "{{ eos_token }}{% else %}{{ raise_exception('roles are system, user and assistant') }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# A richer one: namespace, loop controls, tojson, trimmed blocks and stripped indentation.
RICH_TEMPLATE = """{%- set ns = namespace(turns=0) -%}
{%- for message in messages %}
  {%- if message.role == 'system' %}<|system|>
{{ message.content | trim }}{{ eos_token }}
  {%- continue %}
  {%- endif %}
  {%- set ns.turns = ns.turns + 1 %}
<|{{ message.role }}|>
{{ message.content }} {{ {'turn': ns.turns, 'é': message.role} | tojson }}{{ eos_token }}
{%- endfor %}
{%- if add_generation_prompt %}
<|assistant|>
{% endif %}"""

CONVERSATIONS = [
    [{"role": "system", "content": "Be brief. "}, {"role": "user", "content": "What is json?"},
     {"role": "assistant", "content": "A text format."}, {"role": "user", "content": "And pathlib?"},
     {"role": "assistant", "content": "Paths as objects: héllo 🙂"}],
    [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Red."}],
    [{"role": "user", "content": "Say nothing."}, {"role": "assistant", "content": "Fine.", "name": None}],
]


def _write_chat(path: Path, conversations: list, copies: int = 1) -> Path:
    lines = [json.dumps({"messages": c}, ensure_ascii=False) for c in conversations] * copies
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _corpus_config(path: Path, folder: Path, **corpus):
    template = hf_chat_template(folder)
    settings = template.settings() if template is not None else {}
    return load_config("finetune", overrides={"corpus": {"source": str(path), "val_every": 0, **settings,
                                                         **corpus}}).corpus


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory) -> Path:
    return make_chat_folder(tmp_path_factory.mktemp("chat") / "model", TEMPLATE)


@pytest.mark.parametrize("template", [TEMPLATE, RICH_TEMPLATE])
def test_chat_records_render_and_tokenize_as_transformers_does(tmp_path, template):
    import transformers as tr

    folder = make_chat_folder(tmp_path / "model", template)
    reference = tr.AutoTokenizer.from_pretrained(folder)
    path = _write_chat(tmp_path / "chat.jsonl", CONVERSATIONS)
    corpus = load_corpus(_corpus_config(path, folder))
    assert corpus.chat
    assert corpus.texts == [reference.apply_chat_template(c, tokenize=False) for c in CONVERSATIONS]
    tokenizer = open_model(str(folder), tmp_path).tokenizer
    ids, mask = chat_tokens(corpus.texts, None, tokenizer, str(path), None, "encoding")
    expected = [i for c in CONVERSATIONS for i in reference.apply_chat_template(c, tokenize=True)["input_ids"]]
    assert mask is None and ids.tolist() == expected


def test_assistant_tokens_are_those_transformers_marks_as_the_assistants(tmp_path, chat_model):
    import transformers as tr

    reference = tr.AutoTokenizer.from_pretrained(chat_model)
    path = _write_chat(tmp_path / "chat.jsonl", CONVERSATIONS)
    corpus = load_corpus(_corpus_config(path, chat_model, train_on="assistant", mode="stream"))
    tokenizer = open_model(str(chat_model), tmp_path).tokenizer
    ids, mask = chat_tokens(corpus.texts, corpus.turns[0], tokenizer, str(path), None, "encoding")
    marked = [reference.apply_chat_template(c, return_assistant_tokens_mask=True, return_dict=True)
              for c in CONVERSATIONS]
    assert ids.tolist() == [i for m in marked for i in m["input_ids"]]
    assert mask.tolist() == [i for m in marked for i in m["assistant_masks"]]
    assert 0 < int(mask.sum()) < mask.size

    # A training window's targets are the assistant's tokens and nothing else.
    windows = TokenWindows(ids, 8, mask)
    assert 0 < len(windows) <= ids.size - 8
    batch = windows.batch(np.arange(len(windows)))
    offsets = windows.offsets(np.arange(len(windows)))
    for row, start in enumerate(offsets.tolist()):
        counted = mask[start + 1 : start + 9].astype(bool)
        expected = np.where(counted, ids[start + 1 : start + 9].astype(np.int64), NO_TARGET)
        assert batch.targets[row].tolist() == expected.tolist()
        assert batch.inputs[row].tolist() == ids[start : start + 8].tolist()
    assert batch.valid_targets == int((batch.targets != NO_TARGET).sum()) > 0
    tiles = [int(windows.offsets([i])[0]) for i in windows.tiling()]
    assert all(t % 8 == 0 for t in tiles) and len(set(tiles)) == len(tiles)


def test_the_corpus_identity_covers_the_template_the_train_on_setting_and_the_records(tmp_path, chat_model):
    path = _write_chat(tmp_path / "chat.jsonl", CONVERSATIONS)
    every = load_corpus(_corpus_config(path, chat_model, mode="stream"), cache_dir=tmp_path / "index")
    assistant = load_corpus(_corpus_config(path, chat_model, mode="stream", train_on="assistant"),
                            cache_dir=tmp_path / "index")
    other = load_corpus(_corpus_config(path, chat_model, mode="stream", chat_template=TEMPLATE + "{# the same text #}"),
                        cache_dir=tmp_path / "index")
    text = tmp_path / "rendered.txt"
    text.write_text("\n\n".join(every.texts), encoding="utf-8")
    as_text = load_corpus(load_config("text", overrides={"corpus": {"source": str(text), "val_every": 0}}).corpus)
    assert as_text.texts == every.texts  # the same texts, yet another corpus: chat records encode as rendered
    assert other.texts == every.texts
    assert len({every.identity, assistant.identity, other.identity, as_text.identity}) == 4
    assert len({every.fingerprint, assistant.fingerprint, other.fingerprint}) == 3


def _tune(capsys, *args: str) -> dict:
    code, out, err = run_cli(capsys, "train", "--preset", "finetune", "--precision", "exact", "--json", *args)
    assert code == 0, err
    return json.loads(out)


def test_a_chat_fine_tune_on_the_assistants_tokens_resumes_exactly(tmp_path, capsys, chat_model):
    path = _write_chat(tmp_path / "chat.jsonl", CONVERSATIONS, copies=12)
    common = ("--init-from", str(chat_model), "--corpus", str(path), "--train-on", "assistant", "--steps", "4")
    straight = _tune(capsys, *common, "--run", "straight")
    first = _tune(capsys, *common, "--until", "2", "--save-every", "2", "--run", "stopped")
    code, out, err = run_cli(capsys, "resume", "--checkpoint", first["checkpoints"][-1], "--json")
    assert code == 0, err
    resumed = json.loads(out)
    assert resumed["state_digest"] == straight["state_digest"]
    assert [r["loss"] for r in resumed["updates"]] == [r["loss"] for r in straight["updates"][2:]]
    # Fewer targets than the windows' tokens: only the assistant's count.
    window = straight["data"]["window"] - 1
    assert all(0 < u["valid_targets"] < 8 * window for u in straight["updates"])
    every = _tune(capsys, "--init-from", str(chat_model), "--corpus", str(path), "--steps", "1", "--run", "all")
    assert every["updates"][0]["valid_targets"] == 8 * window
    assert every["corpus_identity"] != straight["corpus_identity"]
    saved = json.loads((Path(straight["run_dir"]) / "config.json").read_text("utf-8"))
    assert saved["corpus"]["chat_template"] == TEMPLATE and saved["corpus"]["train_on"] == "assistant"

    # The corpus changed since saving: the resume is refused in one line.
    _write_chat(path, CONVERSATIONS[:2], copies=12)
    code, _, err = run_cli(capsys, "resume", "--checkpoint", first["checkpoints"][-1], "--json")
    assert code != 0 and "corpus changed" in err and len(err.strip().splitlines()) == 1


def test_a_gguf_files_chat_template_renders_its_chat_records(tmp_path, capsys):
    from gguf_support import family_gguf_file

    gguf = family_gguf_file(tmp_path, "llama", "F32", chat_template=TEMPLATE)
    template = gguf_chat_template(read_gguf_header(gguf).metadata)
    assert template.template == TEMPLATE and template.bos_token == template.eos_token == "<|endoftext|>"
    path = _write_chat(tmp_path / "chat.jsonl", CONVERSATIONS, copies=12)
    result = _tune(capsys, "--init-from", str(gguf), "--corpus", str(path), "--train-on", "assistant",
                   "--steps", "1")
    assert 0 < result["updates"][0]["valid_targets"] < 8 * (result["data"]["window"] - 1)


@pytest.mark.parametrize("record, message", [
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "line 2: message 1 has an unknown role \"wizard\""),
    ({"messages": "hello"}, "line 2: 'messages' must be a list of messages"),
    ({"messages": [{"role": "user", "content": ["a"]}]}, "line 2: message 1's content is list, not text"),
    ({"messages": [{"role": "user"}]}, "line 2: message 1's content is NoneType, not text"),
    ({"text": "plain text"}, "line 2: the corpus mixes chat records ('messages') and text records"),
])
def test_a_bad_chat_record_is_refused_naming_its_file_and_line(tmp_path, capsys, chat_model, record, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"messages": CONVERSATIONS[1]}) + "\n" + json.dumps(record) + "\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "train", "--preset", "finetune", "--init-from", str(chat_model),
                             "--corpus", str(path), "--steps", "1")
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1, err
    assert str(path) in lines[0] and message in lines[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    assert not (tmp_path / "token-cache").exists() or not any((tmp_path / "token-cache").glob("*/entry.json"))


def test_a_model_without_a_chat_template_and_the_wrong_data_are_refused(tmp_path, capsys):
    plain = make_chat_folder(tmp_path / "plain", None)
    path = _write_chat(tmp_path / "chat.jsonl", CONVERSATIONS, copies=4)
    text = tmp_path / "notes.txt"
    text.write_text("one note\ntwo notes\nthree notes\n", encoding="utf-8")
    uneven = make_chat_folder(tmp_path / "uneven", TEMPLATE.replace("{% endfor %}", "{% if not loop.last %}<|user|>"
                                                                                    "{% endif %}{% endfor %}"))
    capsys.readouterr()  # what transformers printed while saving the models
    cases = [
        (("--init-from", str(plain), "--corpus", str(path)),
         f"{path} line 1: a chat record ('messages'), but the model has no chat template"),
        (("--preset", "mini", "--corpus", str(path), "--train-on", "assistant"),
         "corpus.train_on = \"assistant\" reads the assistant's tokens from a token stream"),
        (("--init-from", str(uneven), "--corpus", str(text), "--train-on", "assistant"),
         f"corpus {text} has no chat records"),
        (("--init-from", str(uneven), "--corpus", str(path), "--train-on", "assistant"),
         f"{path} line 1: the model's chat template does not render this conversation one turn after another"),
    ]
    for args, message in cases:
        code, _, err = run_cli(capsys, "train", "--preset", "finetune", *args, "--steps", "1")
        lines = err.strip().splitlines()
        assert code != 0 and len(lines) == 1 and message in lines[0], (args, err)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    # The same template is fine when every token counts.
    assert _tune(capsys, "--init-from", str(uneven), "--corpus", str(path), "--steps", "1")["step"] == 1


def test_chat_records_train_in_records_mode_as_rendered(tmp_path, capsys, chat_model):
    import transformers as tr

    path = _write_chat(tmp_path / "chat.jsonl", CONVERSATIONS, copies=4)
    result = _tune(capsys, "--init-from", str(chat_model), "--corpus", str(path), "--steps", "1", "--val-every", "4",
                   "--set", "corpus.mode=records", "--set", "train.batch_policy=document_order")
    # Each record is as many examples as transformers' ids for it fill windows of the context (64).
    reference = tr.AutoTokenizer.from_pretrained(chat_model)
    lengths = [len(reference.apply_chat_template(c, tokenize=True)["input_ids"]) for c in CONVERSATIONS * 4]
    windows = [1 if n <= 65 else -(-(n - 1) // 64) for n in lengths]
    validation = windows[3::4]
    assert max(lengths) > 65  # one conversation is cut into windows
    assert result["data"] == {"mode": "records", "train_examples": sum(windows) - sum(validation),
                              "validation_examples": sum(validation)}


def test_the_token_cache_keeps_the_masks_and_rebuilds_a_damaged_one(tmp_path):
    from minigpt_tui.engine.training.stream import TokenStream
    from minigpt_tui.engine.training.token_cache import TokenCache, entry_key

    tokens = np.arange(40, dtype=np.uint16)
    mask = (np.arange(40) % 3 == 0).astype(np.uint8)
    stream = TokenStream(tokens, tokens[:20].copy(), mask, mask[:20].copy())
    cache = TokenCache(tmp_path / "cache")
    stored = cache.store("corpus", "tokenizer", "chats.jsonl", stream)
    loaded = cache.load("corpus", "tokenizer")
    for kept in (stored, loaded):
        assert kept.train_mask.tolist() == mask.tolist() and kept.validation_mask.tolist() == mask[:20].tolist()
        assert kept.train.tolist() == tokens.tolist()
    folder = tmp_path / "cache" / entry_key("corpus", "tokenizer")
    np.save(folder / "train_mask.npy", np.ones(40, dtype=np.uint8))  # a mask changed on disk
    assert cache.load("corpus", "tokenizer") is None and not folder.exists()
    # A stream without masks stays without them.
    plain = cache.store("plain", "tokenizer", "notes.txt", TokenStream(tokens, tokens[:20].copy()))
    assert plain.train_mask is None and cache.load("plain", "tokenizer").train_mask is None
