"""A GGUF file as a ready model: the ``llama``, ``qwen2`` and ``gpt2`` architectures.

The architecture's metadata (``{arch}.block_count``, ``embedding_length``,
``feed_forward_length``, ``attention.head_count`` / ``head_count_kv``, ``rope.freq_base``,
the norm epsilon, ``context_length``) sets the model's parts; each tensor is dequantized to
float32 (or float64) by the ``gguf`` package. llama.cpp stores a llama's q and k rows
permuted for its interleaved rotary; they are permuted back to the rotate-half order (as
transformers' GGUF loader does). Qwen2 files are not permuted. GPT-2 files hold linear
weights with q, k and v side by side.

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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from minigpt_tui.engine.core.config import GIGA, ModelConfig, setting_of
from minigpt_tui.engine.core.errors import CheckpointError, TokenizerError
from minigpt_tui.engine.core.library_tokenizer import LibraryTokenizer
from minigpt_tui.engine.core.tokenizer_limits import MAX_VOCABULARY
from minigpt_tui.engine.formats.gguf_file import GGUFData, GGUFHeader, read_gguf_header, require_readable
from minigpt_tui.engine.models.hf_models import built_model, compute_dtype

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.models.model_file import PortableModel

ARCHITECTURES = ("llama", "qwen2", "gpt2")
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


def _shape_settings(header: GGUFHeader, arch: str) -> dict[str, int]:
    """width, heads, kv_heads, layers, ffn and context, each checked (type, range), then
    against each other: heads divide the width, kv heads divide the heads, and a rotary
    head's size is even and is what ``rope.dimension_count`` says."""
    width = _count(header, f"{arch}.embedding_length", _limit("width"))
    heads = _count(header, f"{arch}.attention.head_count", _limit("heads"))
    kv_heads = heads if arch == "gpt2" else _count(header, f"{arch}.attention.head_count_kv", heads, heads)
    values = {"width": width, "heads": heads, "kv_heads": kv_heads,
              "layers": _count(header, f"{arch}.block_count", _limit("layers")),
              "ffn": _count(header, f"{arch}.feed_forward_length", _limit("ffn")),
              "context": _count(header, f"{arch}.context_length", GIGA)}
    if width % heads or heads % kv_heads:
        raise CheckpointError(f"{header.path}: {heads} heads and {kv_heads} kv heads do not divide width {width}")
    head_size = width // heads
    if arch != "gpt2":
        if head_size % 2:
            raise CheckpointError(f"{header.path}: a head size of {head_size} ({arch}.embedding_length {width} / "
                                  f"head_count {heads}) is odd; rotary positions turn pairs")
        rotated = _count(header, f"{arch}.rope.dimension_count", head_size, head_size)
        if rotated != head_size:
            raise CheckpointError(f"{header.path}: unsupported: rotary positions on {rotated} of each head's "
                                  f"{head_size} dimensions ({arch}.rope.dimension_count)")
    return values


def gguf_config(header: GGUFHeader) -> Any:
    """Our model config from the file's metadata; each key's type and range is checked
    before anything is built from it, and a refusal names the key."""
    arch = header.metadata.get("general.architecture")
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise CheckpointError(f"{header.path}: unsupported GGUF architecture {_shown(arch)} "
                              "(general.architecture; supported: llama, qwen2, gpt2)")
    if header.metadata.get(f"{arch}.expert_count"):
        raise CheckpointError(f"{header.path}: unsupported: a mixture of experts ({arch}.expert_count)")
    scaling = header.metadata.get(f"{arch}.rope.scaling.type")
    if scaling not in (None, "none", "linear"):
        raise CheckpointError(f"{header.path}: unsupported rope scaling {_shown(scaling)} (supported: none, linear)")
    if any(t.name == "rope_freqs.weight" for t in header.tensors):
        raise CheckpointError(f"{header.path}: unsupported: per-frequency rope factors (rope_freqs.weight, "
                              "Llama 3's rope scaling)")
    values: dict[str, Any] = {
        **_shape_settings(header, arch),
        "dropout": 0.0, "tied_head": not any(t.name == "output.weight" for t in header.tensors),
    }
    if arch == "gpt2":
        values.update(norm_eps=_positive(header, "gpt2.attention.layer_norm_epsilon", 1e-5), gelu_approximation="tanh")
    else:
        values.update(norm_eps=_positive(header, f"{arch}.attention.layer_norm_rms_epsilon", 1e-6),
                      rope_base=_positive(header, f"{arch}.rope.freq_base", 10000.0))
        if scaling == "linear":
            values.update(rope_scaling="linear", rope_factor=_positive(header, f"{arch}.rope.scaling.factor", 1.0))
    return ModelConfig(family=arch, **values)


# Our parameter names and llama.cpp's, where a tensor moves unchanged (the reader and the
# GGUF writer both read this table).
GLOBAL_NAMES = (("token_embedding.weight", "token_embd.weight"), ("final_norm.weight", "output_norm.weight"))
GPT2_GLOBAL_NAMES = (("position_embedding.weight", "position_embd.weight"), ("final_norm.bias", "output_norm.bias"))
BLOCK_NAMES = (("attn_norm", "attn_norm"), ("ffn_norm", "ffn_norm"), ("attn.o_proj", "attn_output"),
               ("ffn.up_proj", "ffn_up"), ("ffn.down_proj", "ffn_down"))  # weight (and, in gpt2, bias)


def _unpermute(rows: "torch.Tensor", heads: int) -> "torch.Tensor":
    """llama.cpp's q/k row order (pairs interleaved per head) back to rotate-half order."""
    half = rows.shape[0] // heads // 2
    return rows.reshape(heads, half, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def gguf_tensors(data: GGUFData, config: Any, dtype: "torch.dtype") -> dict[str, "torch.Tensor"]:
    import torch  # deferred: imports torch

    names = set(data.header.names())

    def get(name: str) -> torch.Tensor:
        if name not in names:
            raise CheckpointError(f"{data.header.path}: no tensor '{name}'")
        return torch.from_numpy(data.values(name)).to(dtype)

    arch = config.family
    out = {ours: get(theirs) for ours, theirs in GLOBAL_NAMES}
    if not config.tied_head:
        out["lm_head.weight"] = get("output.weight")
    if arch == "gpt2":
        out.update({ours: get(theirs) for ours, theirs in GPT2_GLOBAL_NAMES})
    for i in range(config.layers):
        _add_block(out, get, config, f"blocks.{i}.", f"blk.{i}.")
    return out


def _add_block(out: dict[str, torch.Tensor], get: Callable[[str], torch.Tensor], config: Any, ours: str,
               theirs: str) -> None:
    """One block's tensors (llama.cpp's prefix ``theirs``) into ``out`` under our names (``ours``)."""
    arch = config.family
    for mine, file in BLOCK_NAMES:
        out[f"{ours}{mine}.weight"] = get(f"{theirs}{file}.weight")
    if arch == "gpt2":
        _add_gpt2_attention(out, get, config, ours, theirs)
        return
    out[ours + "ffn.gate_proj.weight"] = get(theirs + "ffn_gate.weight")
    q, k = get(theirs + "attn_q.weight"), get(theirs + "attn_k.weight")
    if arch == "llama":
        q, k = _unpermute(q, config.heads), _unpermute(k, config.kv_heads)
    out.update({ours + "attn.q_proj.weight": q, ours + "attn.k_proj.weight": k,
                ours + "attn.v_proj.weight": get(theirs + "attn_v.weight")})
    if arch == "qwen2":
        for proj in "qkv":
            out[f"{ours}attn.{proj}_proj.bias"] = get(f"{theirs}attn_{proj}.bias")


def _add_gpt2_attention(out: dict[str, torch.Tensor], get: Callable[[str], torch.Tensor], config: Any,
                        ours: str, theirs: str) -> None:
    """GPT-2's side-by-side q, k, v (``attn_qkv``) split into our projections, then the
    block's biases."""
    for proj, rows in zip("qkv", get(theirs + "attn_qkv.weight").split(config.width, dim=0)):
        out[f"{ours}attn.{proj}_proj.weight"] = rows
    for proj, rows in zip("qkv", get(theirs + "attn_qkv.bias").split(config.width, dim=0)):
        out[f"{ours}attn.{proj}_proj.bias"] = rows
    for mine, file in BLOCK_NAMES:
        out[f"{ours}{mine}.bias"] = get(f"{theirs}{file}.bias")


def expected_tensors(config: Any, rows: int) -> dict[str, tuple[int, ...]]:
    """Every tensor a file of ``config`` holds, by llama.cpp's name, with its shape in torch
    order; ``rows``: the vocabulary's (the token table's) rows."""
    width, ffn = config.width, config.ffn
    kv = config.kv_heads * config.head_dim
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (rows, width), "output_norm.weight": (width,)}
    if not config.tied_head:
        shapes["output.weight"] = (rows, width)
    if config.family == "gpt2":
        shapes.update({"position_embd.weight": (config.context, width), "output_norm.bias": (width,)})
    block = {"attn_norm.weight": (width,), "ffn_norm.weight": (width,), "attn_output.weight": (width, width),
             "ffn_up.weight": (ffn, width), "ffn_down.weight": (width, ffn)}
    if config.family == "gpt2":
        block.update({"attn_qkv.weight": (3 * width, width), "attn_qkv.bias": (3 * width,), "attn_norm.bias": (width,),
                      "ffn_norm.bias": (width,), "attn_output.bias": (width,), "ffn_up.bias": (ffn,),
                      "ffn_down.bias": (width,)})
    else:
        block.update({"ffn_gate.weight": (ffn, width), "attn_q.weight": (width, width), "attn_k.weight": (kv, width),
                      "attn_v.weight": (kv, width)})
    if config.family == "qwen2":
        block.update({"attn_q.bias": (width,), "attn_k.bias": (kv,), "attn_v.bias": (kv,)})
    for i in range(config.layers):
        shapes.update({f"blk.{i}.{name}": shape for name, shape in block.items()})
    return shapes


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
    present = {t.name: t for t in header.tensors}
    for name, shape in expected.items():
        tensor = present.get(name)
        if tensor is None:
            raise CheckpointError(f"{header.path}: no tensor '{name}' (the metadata describes a "
                                  f"{config.layers}-block {config.family} model)")
        if tensor.shape != shape:
            raise CheckpointError(f"{header.path}: tensor '{name}' has shape {list(tensor.shape)}; the metadata "
                                  f"makes it {list(shape)}")
    for tensor in header.tensors:
        if tensor.name not in expected:
            raise CheckpointError(f"{header.path}: unexpected tensor '{tensor.name}': the metadata describes a "
                                  f"{config.layers}-block {config.family} model without it "
                                  f"({config.family}.block_count {config.layers}); llama.cpp refuses it too")
        require_readable(header, tensor)
    _check_tokenizer_types(header)


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
        size = len(token)
        if size <= _SHORT_TOKEN:  # nearly every token: each cut looked at
            cuts: Any = range(1, size)
            work += size * size
        else:
            cuts = [cut for cut in lengths[:bisect.bisect_left(lengths, size)] if size - cut in present]
            work += len(lengths) + size * len(cuts)
        if work > MERGE_WORK:
            raise TokenizerError("recovering the merges of this SentencePiece vocabulary would take too long "
                                 "(its tokens are too long and too many share their parts)")
        pairs = [(token[:cut], token[cut:]) for cut in cuts if token[:cut] in index and token[cut:] in index]
        pairs.sort(key=lambda pair: (index[pair[0]], index[pair[1]]))
        found += [(left, right, score) for left, right in pairs]
        if len(found) > MAX_RECOVERED:
            raise TokenizerError(f"this SentencePiece vocabulary splits into more than {MAX_RECOVERED:,} merges")
    found.sort(key=lambda item: (item[2], len(item[0]), len(item[1])), reverse=True)
    return [[left, right] for left, right, _ in found]


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


def _tokenizer_json(header: GGUFHeader, rows: int) -> tuple[str, int | None, tuple[int, ...]]:
    """A tokenizer.json for the file's vocabulary (see the module doc); a vocabulary of more
    tokens than the model's ``rows``, or with a token over :data:`MAX_TOKEN_CHARS`, is
    refused before anything is built from it."""
    meta, where = header.metadata, header.path
    model = meta.get("tokenizer.ggml.model")
    if not isinstance(model, str) or model not in ("gpt2", "llama"):
        raise CheckpointError(f"{where}: tokenizer.ggml.model {_shown(model)} is not read (supported: gpt2 BPE, "
                              "llama SentencePiece)")
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
    types = meta.get("tokenizer.ggml.token_type", [])
    if not isinstance(types, list) or not all(isinstance(kind, int) and not isinstance(kind, bool) for kind in types):
        raise CheckpointError(f"{where}: tokenizer.ggml.token_type must be a list of whole numbers, one per token")
    if model == "llama":
        return _assembled(meta, tokens, _sentencepiece_parts(meta, tokens, where))
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
    return _assembled(meta, tokens, {
        "pre_tokenizer": pre_tokenizer, "merges": merges, "byte_fallback": False, "fuse_unk": False, "add_bos": False,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}})


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
    tokenizer = gguf_tokenizer(header, embedding_rows(header))  # before any tensor is dequantized
    data = GGUFData(header)
    named = gguf_tensors(data, config, torch_dtype)
    model = built_model(config, named, torch_dtype, header.path)
    digest = hashlib.sha256(b"gguf\0")
    for t in sorted(header.tensors, key=lambda t: t.name):
        digest.update(f"{t.name}|{t.type_name}|{list(t.shape)}".encode())
        digest.update(hashlib.sha256(data.raw(t)).digest())
    metadata = {"source": "gguf", "family": config.family, "dtype": dtype,
                "quantization": sorted({t.type_name for t in header.tensors})}
    return PortableModel(model, tokenizer, config, digest.hexdigest(), header.path, metadata)
