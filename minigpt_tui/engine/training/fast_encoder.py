"""Encoding large texts through the ``tokenizers`` library with exactly our ids.

Our Python encoder (:class:`ByteBPETokenizer`) is the definition. The exported
``tokenizer.json`` layout (see ``formats.hf_tokenizer``) reproduces it: the whole text is one
word and merges apply lowest rank first; BOS and EOS are added here, around each text. A tokenizer whose
merges the format cannot hold apart (two merges with the same bytes) has no fast encoder;
its texts go through our encoder.
"""

from __future__ import annotations

import json
from typing import Any

from tokenizers import Tokenizer

from minigpt_tui.engine.core.errors import TokenizerError
from minigpt_tui.engine.core.tokenizer import BOS, EOS, ByteBPETokenizer
from minigpt_tui.engine.formats.hf_tokenizer import tokenizer_json


class FastEncoder:
    """Encodes records as ``BOS text EOS`` id lists, equal to ``ByteBPETokenizer.encode``."""

    def __init__(self, tokenizer: ByteBPETokenizer) -> None:
        self.tokenizer = tokenizer
        self._fast: Any = Tokenizer.from_str(json.dumps(tokenizer_json(tokenizer)))

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        encodings = self._fast.encode_batch(texts, add_special_tokens=False)
        return [[BOS, *encoding.ids, EOS] for encoding in encodings]


def fast_encoder(tokenizer: ByteBPETokenizer) -> FastEncoder | None:
    """The fast encoder of ``tokenizer``, or None where the library cannot hold it."""
    try:
        return FastEncoder(tokenizer)
    except (TokenizerError, ImportError):
        return None
