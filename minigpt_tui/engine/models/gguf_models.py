"""A GGUF file as a ready model, for each family the registry gives a GGUF architecture
(llama.cpp's ``llama``, ``qwen2`` and ``gpt2``; :mod:`minigpt_tui.engine.families`).

The architecture's metadata (``{arch}.block_count``, ``embedding_length``,
``feed_forward_length``, ``attention.head_count`` / ``head_count_kv``, ``rope.freq_base``,
the norm epsilon, ``context_length``) sets the model's parts; each tensor is dequantized to
float32 (or float64) by the ``gguf`` package, and the family's declaration moves it to our
name (llama's q and k rows permuted back to rotate-half order, as transformers' GGUF
loader does; GPT-2's side-by-side q, k and v split).

The tokenizer is built from ``tokenizer.ggml.*``: a ``gpt2`` BPE vocabulary and merges,
with the split regex that ``tokenizer.ggml.pre`` names (as transformers' GGUF loader
builds it), control tokens as special tokens, and BOS added where
``tokenizer.ggml.add_bos_token`` says so; or a ``llama`` SentencePiece vocabulary as BPE
with byte fallback, its merges recovered from the tokens' scores, Metaspace, and BOS added
unless the file says otherwise.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from minigpt_tui.engine.core.config import GIGA, ModelConfig, setting_of
from minigpt_tui.engine.core.errors import CheckpointError, TokenizerError
from minigpt_tui.engine.core.library_tokenizer import LibraryTokenizer
from minigpt_tui.engine.core.reading import weights_read
from minigpt_tui.engine.core.tokenizer_limits import MAX_VOCABULARY
from minigpt_tui.engine.families import Family, GGUFLayout, family, gguf_architectures, gguf_family
from minigpt_tui.engine.formats.gguf_file import GGUFData, GGUFHeader, read_gguf_header, require_readable
from minigpt_tui.engine.models.hf_models import built_model, compute_dtype

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.models.model_file import PortableModel

_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# tokenizer.ggml.pre -> the split regex before the byte-level map (None: GPT-2's own regex).
SPLITS = {"gpt2": None, "default": None, "smollm": None, "llama3": _LLAMA3, "llama-v3": _LLAMA3,
          "llama-bpe": _LLAMA3, "smaug-bpe": _LLAMA3, "qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2}
CONTROL = 3
FLOAT32_MAX = float(np.finfo(np.float32).max)
MAX_TOKEN_CHARS = 16_384  # characters in one vocabulary string (real vocabularies stay under a few hundred)
_SHORT_TOKEN = 64  # characters: a token up to this long has each of its cuts looked at
MERGE_WORK = 64_000_000  # characters sliced in recovering merges (a 64k vocabulary: about 6M)
MAX_RECOVERED = 4_000_000  # recovered merges (a 64k vocabulary: about 100k)


def _shown(value: Any) -> str:
    """A metadata value as a refusal shows it: its repr, or what it is where that is long."""
    if isinstance(value, list):
        return f"an array of {len(value):,} items"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _count(header: GGUFHeader, key: str, limit: int, default: int | None = None) -> int:
    """An integer setting (not a bool) from 1 to ``limit``: a count, a width, a length."""
    value = header.metadata.get(key, default)
    if value is None:
        raise CheckpointError(f"{header.path}: metadata '{key}' is missing (a positive integer)")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise CheckpointError(f"{header.path}: metadata '{key}' must be an integer from 1 to {limit:,}, "
                              f"got {_shown(value)}")
    return value


def _positive(header: GGUFHeader, key: str, default: float) -> float:
    """A positive, finite float32 setting, as the decimal it was written from."""
    value = header.metadata.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= FLOAT32_MAX \
            or _decimal(value) == 0:
        raise CheckpointError(f"{header.path}: metadata '{key}' must be a positive number, got {_shown(value)}")
    return _decimal(value)


def _decimal(value: Any) -> float:
    """A float32 setting as the decimal it was written from (1e-06, not 9.99999997e-07)."""
    return float(str(np.float32(value)))


def _limit(field: str) -> int:
    """The largest value our model config takes for ``field`` (``width``, ``heads``...)."""
    return int(setting_of(f"model.{field}").limit)


def _shape_settings(header: GGUFHeader, arch: str, declared: Family) -> dict[str, int]:
    """width, heads, kv_heads, layers, ffn and context, each checked (type, range), then
    against each other: heads divide the width, kv heads divide the heads, and a rotary
    head's size is even and is what ``rope.dimension_count`` says."""
    width = _count(header, f"{arch}.embedding_length", _limit("width"))
    heads = _count(header, f"{arch}.attention.head_count", _limit("heads"))
    grouped = declared.gguf is not None and declared.gguf.grouped_kv
    kv_heads = _count(header, f"{arch}.attention.head_count_kv", heads, heads) if grouped else heads
    values = {"width": width, "heads": heads, "kv_heads": kv_heads,
              "layers": _count(header, f"{arch}.block_count", _limit("layers")),
              "ffn": _count(header, f"{arch}.feed_forward_length", _limit("ffn")),
              "context": _count(header, f"{arch}.context_length", GIGA)}
    layout_reads = declared.gguf.metadata if declared.gguf is not None else ()
    head_size = _head_size(header, arch, values, "head_dim" in layout_reads)
    if declared.rotary:
        if head_size % 2:
            raise CheckpointError(f"{header.path}: a head size of {head_size} ({arch}.embedding_length {width} / "
                                  f"head_count {heads}) is odd; rotary positions turn pairs")
        values.update(_rotary_share(header, arch, head_size, "rotary_share" in layout_reads))
    return values


def _head_size(header: GGUFHeader, arch: str, values: dict[str, int], free: bool) -> int:
    """Each head's width: width / heads, or where the architecture has a free one
    (``attention.key_length``) that, set in ``values`` when it is not width / heads."""
    width, heads, kv_heads = values["width"], values["heads"], values["kv_heads"]
    if heads % kv_heads:
        raise CheckpointError(f"{header.path}: {heads} heads and {kv_heads} kv heads do not divide width {width}")
    if free and f"{arch}.attention.key_length" in header.metadata:
        size = _count(header, f"{arch}.attention.key_length", _limit("head_dim_override"))
        if _count(header, f"{arch}.attention.value_length", _limit("head_dim_override"), size) != size:
            raise CheckpointError(f"{header.path}: unsupported: {arch}.attention.value_length apart from key_length")
        if size * heads != width:
            values["head_dim_override"] = size
        return size
    if width % heads:
        raise CheckpointError(f"{header.path}: {heads} heads and {kv_heads} kv heads do not divide width {width}")
    return width // heads


def _rotary_share(header: GGUFHeader, arch: str, head_size: int, partial: bool) -> dict[str, float]:
    """``rotary_fraction`` where the architecture rotates a leading share of each head
    (``rope.dimension_count`` under the head's width); {} for the whole head."""
    rotated = _count(header, f"{arch}.rope.dimension_count", head_size, head_size)
    if rotated == head_size:
        return {}
    fraction = rotated / head_size
    if not partial or rotated % 2 or int(head_size * fraction) // 2 * 2 != rotated:
        raise CheckpointError(f"{header.path}: unsupported: rotary positions on {rotated} of each head's "
                              f"{head_size} dimensions ({arch}.rope.dimension_count)")
    return {"rotary_fraction": fraction}


def _rope_scaling(header: GGUFHeader, arch: str) -> Any:
    """The file's rope scaling type (none or linear); experts and per-frequency factors are
    refused here too, before any setting is read."""
    if header.metadata.get(f"{arch}.expert_count"):
        raise CheckpointError(f"{header.path}: unsupported: a mixture of experts ({arch}.expert_count)")
    scaling = header.metadata.get(f"{arch}.rope.scaling.type")
    if scaling not in (None, "none", "linear"):
        raise CheckpointError(f"{header.path}: unsupported rope scaling {_shown(scaling)} (supported: none, linear)")
    if any(t.name == "rope_freqs.weight" for t in header.tensors):
        raise CheckpointError(f"{header.path}: unsupported: per-frequency rope factors (rope_freqs.weight, "
                              "Llama 3's rope scaling)")
    return scaling


def gguf_config(header: GGUFHeader) -> Any:
    """Our model config from the file's metadata; each key's type and range is checked
    before anything is built from it, and a refusal names the key."""
    arch = header.metadata.get("general.architecture")
    declared = gguf_family(arch) if isinstance(arch, str) else None
    if declared is None or declared.gguf is None:
        raise CheckpointError(f"{header.path}: unsupported GGUF architecture {_shown(arch)} "
                              f"(general.architecture; supported: {', '.join(gguf_architectures())})")
    layout = declared.gguf
    scaling = _rope_scaling(header, arch)
    values: dict[str, Any] = {
        **_shape_settings(header, arch, declared), **layout.implied,
        "dropout": 0.0, "tied_head": not any(t.name == "output.weight" for t in header.tensors),
        "norm_eps": _positive(header, f"{arch}.{layout.norm_eps_key}", layout.norm_eps_default),
    }
    if "sliding_window" in layout.metadata and f"{arch}.attention.sliding_window" in header.metadata:
        window = _count(header, f"{arch}.attention.sliding_window", GIGA)
        if window < values["context"]:
            values.update(attention_window=window, local_layers=tuple(range(values["layers"])))
    if declared.rotary:
        values["rope_base"] = _positive(header, f"{arch}.rope.freq_base", 10000.0)
        if scaling == "linear":
            values.update(rope_scaling="linear", rope_factor=_positive(header, f"{arch}.rope.scaling.factor", 1.0))
    return ModelConfig(family=declared.name, **values)


def _layout(config: Any) -> GGUFLayout:
    """The GGUF layout of the config's family (a config read from GGUF metadata has one)."""
    layout = family(config.family).gguf
    if layout is None:
        raise CheckpointError(f"the {config.family} family has no GGUF architecture")
    return layout


def gguf_tensors(data: GGUFData, config: Any, dtype: "torch.dtype") -> dict[str, "torch.Tensor"]:
    """Our named tensors from the file's, each dequantized to ``dtype``."""
    import torch  # deferred: imports torch

    names = set(data.header.names())
    advance = weights_read(sum(t.nbytes for t in data.header.tensors))  # the opener's progress

    def get(name: str) -> torch.Tensor:
        if name not in names:
            raise CheckpointError(f"{data.header.path}: no tensor '{name}'")
        values = torch.from_numpy(data.values(name)).to(dtype)
        advance(data.header.tensor(name).nbytes)
        return values

    return _layout(config).tensors_from(get, config)


def expected_tensors(config: Any, rows: int) -> dict[str, tuple[int, ...]]:
    """Every tensor a file of ``config`` holds, by llama.cpp's name, with its shape in torch
    order; ``rows``: the vocabulary's (the token table's) rows. The family's writer applied
    to our model's parameters on the meta device (no memory) gives both."""
    import torch  # deferred: imports torch

    from minigpt_tui.engine.models.model import MiniGPT  # deferred: imports torch

    with torch.device("meta"):
        model = MiniGPT(config, rows, torch.float32)
    named = dict(model.named_parameters())
    return {name: tuple(tensor.shape) for name, tensor in _layout(config).tensors_to(named, config).items()}


def check_gguf_file(header: GGUFHeader, config: Any) -> None:
    """Before any tensor is read: the file holds exactly the tensors its metadata describes
    (llama.cpp refuses a missing or an extra one too), each of the shape that metadata makes
    it and of a type read here, and its tokenizer keys have their types."""
    table = next((t for t in header.tensors if t.name == "token_embd.weight"), None)
    if table is None or len(table.shape) != 2 or table.shape[1] != config.width:
        shape = "missing" if table is None else f"of shape {list(table.shape)}"
        raise CheckpointError(f"{header.path}: tensor 'token_embd.weight' is {shape}; the metadata makes it "
                              f"[vocabulary rows, {config.width}]")
    expected = expected_tensors(config, table.shape[0])
    _check_expected_present(header, config, expected)
    for tensor in header.tensors:
        if tensor.name not in expected:
            raise CheckpointError(f"{header.path}: unexpected tensor '{tensor.name}': the metadata describes a "
                                  f"{config.layers}-block {config.family} model without it "
                                  f"({config.family}.block_count {config.layers}); llama.cpp refuses it too")
        require_readable(header, tensor)
    _check_tokenizer_types(header)


def _check_expected_present(header: GGUFHeader, config: Any, expected: dict[str, tuple[int, ...]]) -> None:
    """Every tensor the metadata describes is in the file, of the shape it makes it."""
    present = {t.name: t for t in header.tensors}
    for name, shape in expected.items():
        tensor = present.get(name)
        if tensor is None:
            raise CheckpointError(f"{header.path}: no tensor '{name}' (the metadata describes a "
                                  f"{config.layers}-block {config.family} model)")
        if tensor.shape != shape:
            raise CheckpointError(f"{header.path}: tensor '{name}' has shape {list(tensor.shape)}; the metadata "
                                  f"makes it {list(shape)}")


_INTEGERS = ("u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64")
# The tokenizer's keys: what each must be, in words, and the value types that are that.
TOKENIZER_TYPES: dict[str, tuple[str, tuple[str, ...]]] = {
    "tokenizer.ggml.model": ("a string", ("string",)),
    "tokenizer.ggml.pre": ("a string", ("string",)),
    "tokenizer.ggml.tokens": ("an array of strings", ("array[string]",)),
    "tokenizer.ggml.merges": ("an array of strings", ("array[string]",)),
    "tokenizer.ggml.scores": ("an array of numbers", tuple(f"array[{t}]" for t in (*_INTEGERS, "f32", "f64"))),
    "tokenizer.ggml.token_type": ("an array of integers", tuple(f"array[{t}]" for t in _INTEGERS)),
    "tokenizer.ggml.bos_token_id": ("an integer", _INTEGERS),
    "tokenizer.ggml.eos_token_id": ("an integer", _INTEGERS),
    "tokenizer.ggml.add_bos_token": ("true or false", ("bool",)),
    "tokenizer.chat_template": ("a string", ("string",)),
}


def _check_tokenizer_types(header: GGUFHeader) -> None:
    """Each tokenizer key the file has is of its type (a GGUF array holds one item type)."""
    for key, (words, kinds) in TOKENIZER_TYPES.items():
        kind = header.types.get(key)
        if kind is not None and kind not in kinds:
            raise CheckpointError(f"{header.path}: metadata '{key}' must be {words}, got a value of type {kind}")


def recovered_merges(tokens: list[str], scores: list[float]) -> list[list[str]]:
    """A SentencePiece vocabulary's BPE merges, recovered from its scores (llama.cpp writes
    no merges for it): every split of a token into two tokens of the vocabulary, ranked by
    the whole token's score, best first; ties keep the longer left part first, then the
    vocabulary's order (the order transformers' GGUF loader recovers them in).

    Only cuts where both parts have the length of some token are sliced, so a very long
    token costs as many looks as the vocabulary has lengths, not its own length squared. A
    vocabulary that would need more than :data:`MERGE_WORK` characters sliced, or yield
    more than :data:`MAX_RECOVERED` merges, is refused (a real one needs a small part)."""
    index = {token: i for i, token in enumerate(tokens)}
    lengths = sorted({len(token) for token in index})
    present = frozenset(lengths)
    found, work = [], 0
    for token, score in zip(tokens, scores):
        cuts, cost = _cuts(len(token), lengths, present)
        work += cost
        if work > MERGE_WORK:
            raise TokenizerError("recovering the merges of this SentencePiece vocabulary would take too long "
                                 "(its tokens are too long and too many share their parts)")
        found += [(left, right, score) for left, right in _split_pairs(token, cuts, index)]
        if len(found) > MAX_RECOVERED:
            raise TokenizerError(f"this SentencePiece vocabulary splits into more than {MAX_RECOVERED:,} merges")
    found.sort(key=lambda item: (item[2], len(item[0]), len(item[1])), reverse=True)
    return [[left, right] for left, right, _ in found]


def _split_pairs(token: str, cuts: Any, index: dict[str, int]) -> list[tuple[str, str]]:
    """The token's splits into two tokens of the vocabulary, in the vocabulary's order."""
    pairs = [(token[:cut], token[cut:]) for cut in cuts if token[:cut] in index and token[cut:] in index]
    pairs.sort(key=lambda pair: (index[pair[0]], index[pair[1]]))
    return pairs


def _cuts(size: int, lengths: list[int], present: frozenset[int]) -> tuple[Any, int]:
    """Where a token of ``size`` characters may split into two tokens, and the slicing work."""
    if size <= _SHORT_TOKEN:  # nearly every token: each cut looked at
        return range(1, size), size * size
    cuts = [cut for cut in lengths[:bisect.bisect_left(lengths, size)] if size - cut in present]
    return cuts, len(lengths) + size * len(cuts)


def _sentencepiece_parts(meta: dict[str, Any], tokens: list[str], where: Path) -> dict[str, Any]:
    """tokenizer.json parts of a llama SentencePiece vocabulary: BPE with byte fallback,
    Metaspace (a ▁ before the first word), BOS added unless the file says not to."""
    scores = meta.get("tokenizer.ggml.scores")
    if (not isinstance(scores, list) or len(scores) != len(tokens)
            or not all(isinstance(s, (int, float)) and not isinstance(s, bool) for s in scores)):
        raise CheckpointError(f"{where}: tokenizer.ggml.scores must give one number per token")
    merges = meta.get("tokenizer.ggml.merges")
    if not isinstance(merges, list):
        try:
            merges = recovered_merges(tokens, scores)
        except TokenizerError as err:
            raise CheckpointError(f"{where}: {err}") from None
    return {"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "merges": merges, "byte_fallback": True, "fuse_unk": True, "add_bos": True}


def check_gguf_vocabulary(header: GGUFHeader, rows: int) -> list[str]:
    """The file's tokenizer kind and vocabulary, checked from the header alone: a kind not
    read here, a vocabulary of more tokens than the model's ``rows``, or a token over
    :data:`MAX_TOKEN_CHARS`, is refused before anything is built from it."""
    model = header.metadata.get("tokenizer.ggml.model")
    if not isinstance(model, str) or model not in ("gpt2", "llama"):
        raise CheckpointError(f"{header.path}: tokenizer.ggml.model {_shown(model)} is not read (supported: gpt2 BPE, "
                              "llama SentencePiece)")
    return _checked_tokens(header.metadata, header.path, rows)


def _tokenizer_json(header: GGUFHeader, rows: int) -> tuple[str, int | None, tuple[int, ...]]:
    """A tokenizer.json for the file's vocabulary (see the module doc), refused as
    :func:`check_gguf_vocabulary` says before anything is built from it."""
    meta, where = header.metadata, header.path
    tokens = check_gguf_vocabulary(header, rows)
    model = meta["tokenizer.ggml.model"]
    if model == "llama":
        return _assembled(meta, tokens, _sentencepiece_parts(meta, tokens, where))
    return _assembled(meta, tokens, _bpe_parts(meta, where))


def _bpe_parts(meta: dict[str, Any], where: Path) -> dict[str, Any]:
    """tokenizer.json parts of a gpt2-style byte-level BPE vocabulary, its split by
    ``tokenizer.ggml.pre``."""
    merges = meta.get("tokenizer.ggml.merges")
    if not isinstance(merges, list):
        raise CheckpointError(f"{where}: tokenizer.ggml.merges must be a list of strings")
    pre = meta.get("tokenizer.ggml.pre", "default")
    if not isinstance(pre, str) or pre not in SPLITS:
        raise CheckpointError(f"{where}: tokenizer.ggml.pre {_shown(pre)} is not known (known: {', '.join(SPLITS)})")
    split = SPLITS[pre]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": split is None}
    pre_tokenizer = byte_level if split is None else {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": split}, "behavior": "Isolated", "invert": False}, byte_level]}
    return {
        "pre_tokenizer": pre_tokenizer, "merges": merges, "byte_fallback": False, "fuse_unk": False, "add_bos": False,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}}


def _checked_tokens(meta: dict[str, Any], where: Path, rows: int) -> list[str]:
    """The file's vocabulary, refused before anything is built from it when it has more
    tokens than the model's ``rows`` or than we accept, a token too long, or bad types."""
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise CheckpointError(f"{where}: tokenizer.ggml.tokens must be a list of strings")
    if len(tokens) > rows:
        raise CheckpointError(f"{where}: the vocabulary has {len(tokens):,} tokens, more than the model's "
                              f"{rows:,} embedding rows")
    if len(tokens) > MAX_VOCABULARY:
        raise CheckpointError(f"{where}: the vocabulary has {len(tokens):,} tokens (at most {MAX_VOCABULARY:,} "
                              "are accepted)")
    longest = max(map(len, tokens), default=0)
    if longest > MAX_TOKEN_CHARS:
        raise CheckpointError(f"{where}: a vocabulary token of {longest:,} characters (at most "
                              f"{MAX_TOKEN_CHARS:,} are accepted)")
    _check_token_types(meta, where)
    return tokens


def _check_token_types(meta: dict[str, Any], where: Path) -> None:
    types = meta.get("tokenizer.ggml.token_type", [])
    if not isinstance(types, list) or not all(isinstance(kind, int) and not isinstance(kind, bool) for kind in types):
        raise CheckpointError(f"{where}: tokenizer.ggml.token_type must be a list of whole numbers, one per token")


def _assembled(meta: dict[str, Any], tokens: list[str], parts: dict[str, Any]) -> tuple[str, int | None, tuple[int, ...]]:
    types = meta.get("tokenizer.ggml.token_type") or []
    added = [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for i, kind in enumerate(types[: len(tokens)]) if kind == CONTROL]
    bos = meta.get("tokenizer.ggml.bos_token_id")
    eos = meta.get("tokenizer.ggml.eos_token_id")
    bos = _token_id(bos, len(tokens))
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", parts["add_bos"])) and bos is not None
    post = _bos_template(tokens, bos) if add_bos else None
    data = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": parts["pre_tokenizer"], "post_processor": post, "decoder": parts["decoder"],
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": parts["fuse_unk"], "byte_fallback": parts["byte_fallback"],
                      "ignore_merges": False, "vocab": {t: i for i, t in enumerate(tokens)}, "merges": parts["merges"]}}
    eos_ids = (eos,) if isinstance(eos, int) and not isinstance(eos, bool) else ()
    return json.dumps(data), bos, eos_ids


def _token_id(value: Any, count: int) -> int | None:
    """``value`` when it is an id among ``count`` tokens (an int, not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < count else None


def _bos_template(tokens: list[str], bos: int) -> dict[str, Any]:
    """The post-processor that puts BOS before a text."""
    return {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": tokens[bos], "type_id": 0}},
                                                     {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {tokens[bos]: {"id": tokens[bos], "ids": [bos], "tokens": [tokens[bos]]}}}


def embedding_rows(header: GGUFHeader) -> int:
    """The model's vocabulary rows, from the header (no tensor read)."""
    return header.tensor("token_embd.weight").shape[0]


def gguf_tokenizer(header: GGUFHeader, vocab_size: int) -> Any:
    text, bos, eos = _tokenizer_json(header, vocab_size)
    try:
        return LibraryTokenizer.from_text(text, vocab_size, bos_id=bos, eos_ids=eos, source=str(header.path))
    except TokenizerError as err:
        raise CheckpointError(str(err)) from None


def open_gguf_model(path: Path | str, *, dtype: str = "float32") -> "PortableModel":
    from minigpt_tui.engine.models.model_file import (  # deferred: imports torch
        PortableModel,
    )

    torch_dtype = compute_dtype(dtype)
    header = read_gguf_header(Path(path).expanduser())
    config = gguf_config(header)
    check_gguf_file(header, config)
    check_gguf_vocabulary(header, embedding_rows(header))  # before any tensor or merge is read
    data = GGUFData(header)
    # The tokenizer and the file's digest are built on two other threads while the tensors are
    # read (hashlib and the tokenizer library leave the interpreter free for numpy and torch):
    # about a second of a 135M model's open. A tokenizer the file cannot give still refuses
    # the file in its own words, whatever the tensors did meanwhile.
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="gguf-open") as pool:
        tokenizer_job = pool.submit(gguf_tokenizer, header, embedding_rows(header))
        digest_job = pool.submit(gguf_digest, header, data)
        try:
            model = built_model(config, gguf_tensors(data, config, torch_dtype), torch_dtype, header.path)
        finally:
            tokenizer = tokenizer_job.result()
        identity = digest_job.result()
    metadata = {"source": "gguf", "family": config.family, "dtype": dtype,
                "quantization": sorted({t.type_name for t in header.tensors})}
    return PortableModel(model, tokenizer, config, identity, header.path, metadata)


def gguf_digest(header: GGUFHeader, data: GGUFData) -> str:
    """The model's identity: each tensor's name, type, shape and stored bytes, in name order."""
    digest = hashlib.sha256(b"gguf\0")
    for t in sorted(header.tensors, key=lambda t: t.name):
        digest.update(f"{t.name}|{t.type_name}|{list(t.shape)}".encode())
        digest.update(hashlib.sha256(data.raw(t)).digest())
    return digest.hexdigest()
