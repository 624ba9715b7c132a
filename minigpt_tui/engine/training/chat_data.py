"""Chat records: a record's ``messages`` (each a role and its content), rendered into text
with the model's own chat template, as transformers' ``apply_chat_template(...,
tokenize=False)`` renders it: Jinja in an immutable sandbox (a template from a model file is
code from elsewhere), blocks trimmed, ``bos_token`` and ``eos_token`` given, no generation
prompt. Nothing in the sandbox reads the clock, so a conversation renders the same every day.

With ``--train-on assistant`` the loss counts only the assistant's tokens. They are found
without markers, from the template's own renderings of the conversation's beginnings: the
assistant's turn k is what the conversation through turn k adds to the messages before it
rendered with the generation prompt (the text a model generates after that prompt, its end
of turn included). Both renderings must begin the whole conversation's text, and their
tokens its tokens (:mod:`minigpt_tui.engine.training.chat_tokens`); a template or tokenizer
for which they do not is refused, never guessed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

import jinja2
import jinja2.ext
import jinja2.nodes

from minigpt_tui.engine.core.config import CorpusConfig
from minigpt_tui.engine.core.errors import CorpusError
from minigpt_tui.engine.core.files import read_small_file
from minigpt_tui.engine.formats.hf_import import read_json_file
from minigpt_tui.engine.training.chat_sandbox import BoundedEnvironment, TemplateBound

MESSAGES = "messages"
ROLES = ("system", "user", "assistant", "tool")
ASSISTANT = "assistant"
CHAT_TEMPLATE_FILE = "chat_template.jinja"  # where transformers saves a model's template
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
GGUF_TEMPLATE_KEY = "tokenizer.chat_template"
TEMPLATE_FILE_LIMIT = 1 << 20
# Characters --train-on assistant may render and encode for one conversation: each assistant
# turn renders (and encodes) the conversation up to it, so the work grows with turns x length.
ASSISTANT_WORK_LIMIT = 1 << 25

Spans = tuple[tuple[int, int], ...]  # (start, end) character offsets of the assistant's turns


@dataclass(frozen=True)
class ChatTemplate:
    """A model's chat template and the texts of its bos and eos tokens (empty: none)."""

    template: str
    bos_token: str = ""
    eos_token: str = ""

    @property
    def key(self) -> bytes:
        """What decides a rendering, for identities: the template and both token texts."""
        return hashlib.sha256(json.dumps([self.template, self.bos_token, self.eos_token]).encode()).digest()

    def settings(self) -> dict[str, str]:
        """The run's corpus settings that hold this template."""
        return {"chat_template": self.template, "chat_bos_token": self.bos_token, "chat_eos_token": self.eos_token}


def chat_template_of(config: CorpusConfig) -> ChatTemplate | None:
    if not config.chat_template:
        return None
    return ChatTemplate(config.chat_template, config.chat_bos_token, config.chat_eos_token)


def chat_reading_key(config: CorpusConfig) -> bytes | None:
    """What, besides the bytes, decides the records of a corpus with chat records: the
    template and the tokens the loss counts; None at the defaults (no template, all tokens)."""
    template = chat_template_of(config)
    if template is None and config.train_on == "all":
        return None
    return b"chat\0" + (template.key if template is not None else b"") + b"\0" + config.train_on.encode()


@dataclass(frozen=True)
class ChatTurns:
    """Where a chat record came from and the character spans of its assistant turns."""

    where: str
    spans: Spans


class _GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` as transformers' templates write it:
    rendered as its body (the assistant's turns are found from renderings, not from it)."""

    tags: ClassVar[set[str]] = {"generation"}

    def parse(self, parser: Any) -> Any:
        line = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(line)

    def _body(self, caller: Callable[[], str]) -> str:
        return caller()


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def compile_template(template: str, where: str) -> jinja2.Template:
    """``template`` compiled in a bounded sandbox of its own
    (:mod:`minigpt_tui.engine.training.chat_sandbox`; ``tojson`` as transformers has it)."""
    environment = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                     extensions=[_GenerationBlock, jinja2.ext.loopcontrols])
    environment.globals["raise_exception"] = _raise_exception
    try:
        return environment.from_string(template)
    except (jinja2.TemplateError, RecursionError) as err:  # a template nested past Python's depth too
        raise CorpusError(f"{where}: the chat template is not valid Jinja ({_first_line(err)})") from None


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:200]


def _template_error(err: BaseException) -> str:
    """A template's own error as a phrase: Jinja's message, else the Python error's kind too."""
    if isinstance(err, jinja2.TemplateError):
        return _first_line(err)
    if isinstance(err, RecursionError):
        return "it calls itself too deeply"
    return f"{type(err).__name__}: {_first_line(err)}"


class ChatRenderer:
    """Chat records into text with one template, and with ``spans`` their assistant turns."""

    def __init__(self, template: ChatTemplate, spans: bool, where: str) -> None:
        self.template = template
        self.spans = spans
        self._compiled = compile_template(template.template, where)
        self._tokens = {name: value for name, value in (("bos_token", template.bos_token),
                                                         ("eos_token", template.eos_token)) if value}

    def render(self, messages: Sequence[dict[str, Any]], where: str, *, add_generation_prompt: bool = False) -> str:
        environment = cast(BoundedEnvironment, self._compiled.environment)
        variables = {"messages": list(messages), "tools": None, "documents": None,
                     "add_generation_prompt": add_generation_prompt, **self._tokens}
        try:
            return environment.render(self._compiled, variables)
        except TemplateBound as err:
            raise CorpusError(f"{where}: the model's chat template was stopped on this conversation "
                              f"({_first_line(err)})") from None
        # What a template's own code raises (it is code from elsewhere): each one line.
        except (jinja2.TemplateError, TypeError, ValueError, LookupError, AttributeError, ArithmeticError,
                RecursionError) as err:
            raise CorpusError(f"{where}: the model's chat template refuses this conversation "
                              f"({_template_error(err)})") from None

    def record(self, where: str, value: Any) -> tuple[str, ChatTurns | None]:
        """A chat record's text and (with ``spans``) its assistant turns."""
        messages = checked_messages(value, where)
        text = self.render(messages, where)
        return text, ChatTurns(where, self.assistant_spans(messages, text, where)) if self.spans else None

    def assistant_spans(self, messages: list[dict[str, Any]], text: str, where: str) -> Spans:
        """The character spans of the assistant's turns (module doc)."""
        turns = sum(message["role"] == ASSISTANT for message in messages)
        if turns * len(text) > ASSISTANT_WORK_LIMIT:
            raise CorpusError(f"{where}: --train-on assistant renders and encodes a conversation once per assistant "
                              f"turn; {turns:,} turns of {len(text):,} characters are more than it may "
                              f"({ASSISTANT_WORK_LIMIT:,} characters in all): split the conversation or use "
                              "--train-on all")
        spans = []
        for number, message in enumerate(messages):
            if message["role"] != ASSISTANT:
                continue
            prompt = self.render(messages[:number], where, add_generation_prompt=True)
            through = text if number == len(messages) - 1 else self.render(messages[: number + 1], where)
            if not (text.startswith(through) and through.startswith(prompt)):
                raise CorpusError(f"{where}: the model's chat template does not render this conversation one turn "
                                  f"after another (message {number + 1}), so --train-on assistant cannot find "
                                  "the assistant's tokens; use --train-on all")
            spans.append((len(prompt), len(through)))
        return tuple(spans)


def checked_messages(value: Any, where: str) -> list[dict[str, Any]]:
    """A record's messages: a non-empty list of objects, each with a known role and text
    content (keys whose value is null are left out, as transformers leaves them out)."""
    if not isinstance(value, list) or not value:
        raise CorpusError(f"{where}: '{MESSAGES}' must be a list of messages, each with a role and its content")
    messages = []
    for number, message in enumerate(value, start=1):
        if not isinstance(message, dict):
            raise CorpusError(f"{where}: message {number} is not an object with a role and its content")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            shown = json.dumps(role, ensure_ascii=False)[:60] if role is not None else "none"
            raise CorpusError(f"{where}: message {number} has an unknown role {shown} (one of {', '.join(ROLES)})")
        if not isinstance(content, str):
            raise CorpusError(f"{where}: message {number}'s content is {type(content).__name__}, not text")
        messages.append({key: item for key, item in message.items() if item is not None})
    return messages


def chat_renderer(config: CorpusConfig, where: str) -> ChatRenderer:
    """The renderer of a corpus's chat records; refused when the run has no chat template."""
    template = chat_template_of(config)
    if template is None:
        raise CorpusError(f"{where}: a chat record ('{MESSAGES}'), but the model has no chat template to render it "
                          "with (start from a model whose tokenizer has one, or set corpus.chat_template)")
    return ChatRenderer(template, config.train_on == ASSISTANT, where)


# -- a model's own template -----------------------------------------------------------------
def hf_chat_template(folder: Path) -> ChatTemplate | None:
    """A transformers folder's chat template (``chat_template.jinja``, else the
    ``chat_template`` of ``tokenizer_config.json``) with its bos and eos token texts."""
    config_path = folder / TOKENIZER_CONFIG_FILE
    config = read_json_file(config_path, TOKENIZER_CONFIG_FILE) if config_path.is_file() else {}
    config = config if isinstance(config, dict) else {}
    template = _template_file(folder / CHAT_TEMPLATE_FILE) or _configured_template(config.get("chat_template"))
    if not template:
        return None
    return ChatTemplate(template, _token_text(config.get("bos_token")), _token_text(config.get("eos_token")))


def _template_file(path: Path) -> str | None:
    if not path.is_file():
        return None
    data = read_small_file(path, TEMPLATE_FILE_LIMIT, "a chat template")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise CorpusError(f"{path}: the chat template is not UTF-8 text") from None


def _configured_template(value: Any) -> str | None:
    """A tokenizer_config.json template: text, or a list of named ones (the one named default)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {item.get("name"): item.get("template") for item in value if isinstance(item, dict)}
        chosen = named.get("default")
        return chosen if isinstance(chosen, str) else None
    return None


def _token_text(value: Any) -> str:
    """A special token as tokenizer_config.json writes it: text, or an object with its content."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def gguf_chat_template(metadata: dict[str, Any]) -> ChatTemplate | None:
    """A GGUF file's chat template, its bos and eos tokens' texts from its vocabulary."""
    template = metadata.get(GGUF_TEMPLATE_KEY)
    if not isinstance(template, str) or not template:
        return None
    tokens = metadata.get("tokenizer.ggml.tokens")
    tokens = tokens if isinstance(tokens, list) else []

    def text_of(key: str) -> str:
        index = metadata.get(key)
        if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(tokens):
            return str(tokens[index])
        return ""

    return ChatTemplate(template, text_of("tokenizer.ggml.bos_token_id"), text_of("tokenizer.ggml.eos_token_id"))
