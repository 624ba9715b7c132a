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

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from minigpt_tui.engine.core.config import ModelConfig
from minigpt_tui.engine.core.errors import CheckpointError, TokenizerError
from minigpt_tui.engine.core.library_tokenizer import LibraryTokenizer
from minigpt_tui.engine.formats.gguf_file import GGUFData, GGUFHeader, read_gguf_header
from minigpt_tui.engine.training.hf_models import built_model, compute_dtype

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.training.model_file import PortableModel

ARCHITECTURES = ("llama", "qwen2", "gpt2")
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# tokenizer.ggml.pre -> the split regex before the byte-level map (None: GPT-2's own regex).
SPLITS = {"gpt2": None, "default": None, "smollm": None, "llama3": _LLAMA3, "llama-v3": _LLAMA3,
          "llama-bpe": _LLAMA3, "smaug-bpe": _LLAMA3, "qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2}
CONTROL = 3


def _need(header: GGUFHeader, key: str, kind: type = int) -> Any:
    value = header.metadata.get(key)
    if value is None or isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        raise CheckpointError(f"{header.path}: metadata '{key}' must be a positive {kind.__name__}, got {value!r}")
    return value


def _decimal(value: Any) -> float:
    """A float32 setting as the decimal it was written from (1e-06, not 9.99999997e-07)."""
    return float(str(np.float32(value)))


def gguf_config(header: GGUFHeader) -> Any:
    arch = header.metadata.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise CheckpointError(f"{header.path}: unsupported GGUF architecture {arch!r} (supported: llama, qwen2, gpt2)")
    if header.metadata.get(f"{arch}.expert_count"):
        raise CheckpointError(f"{header.path}: unsupported: a mixture of experts ({arch}.expert_count)")
    scaling = header.metadata.get(f"{arch}.rope.scaling.type")
    if scaling not in (None, "none", "linear"):
        raise CheckpointError(f"{header.path}: unsupported rope scaling {scaling!r} (supported: none, linear)")
    if any(t.name == "rope_freqs.weight" for t in header.tensors):
        raise CheckpointError(f"{header.path}: unsupported: per-frequency rope factors (rope_freqs.weight, "
                              "Llama 3's rope scaling)")
    width, heads = _need(header, f"{arch}.embedding_length"), _need(header, f"{arch}.attention.head_count")
    values: dict[str, Any] = {
        "width": width, "heads": heads, "layers": _need(header, f"{arch}.block_count"),
        "ffn": _need(header, f"{arch}.feed_forward_length"), "context": _need(header, f"{arch}.context_length"),
        "dropout": 0.0, "tied_head": not any(t.name == "output.weight" for t in header.tensors),
    }
    if arch == "gpt2":
        values.update(kv_heads=heads, norm_eps=_decimal(header.metadata.get("gpt2.attention.layer_norm_epsilon", 1e-5)),
                      gelu_approximation="tanh")
    else:
        values.update(kv_heads=header.metadata.get(f"{arch}.attention.head_count_kv", heads),
                      norm_eps=_decimal(header.metadata.get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
                      rope_base=_decimal(header.metadata.get(f"{arch}.rope.freq_base", 10000.0)))
        if scaling == "linear":
            values.update(rope_scaling="linear",
                          rope_factor=_decimal(header.metadata.get(f"{arch}.rope.scaling.factor", 1.0)))
    if width % heads or heads % values["kv_heads"]:
        raise CheckpointError(f"{header.path}: {heads} heads and {values['kv_heads']} kv heads do not divide width {width}")
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
        return torch.from_numpy(data.float32(name)).to(dtype)

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


def recovered_merges(tokens: list[str], scores: list[float]) -> list[list[str]]:
    """A SentencePiece vocabulary's BPE merges, recovered from its scores (llama.cpp writes
    no merges for it): every split of a token into two tokens of the vocabulary, ranked by
    the whole token's score, best first; ties keep the longer left part first, then the
    vocabulary's order (the order transformers' GGUF loader recovers them in)."""
    index = {token: i for i, token in enumerate(tokens)}
    found = []
    for token, score in zip(tokens, scores):
        pairs = [(token[:cut], token[cut:]) for cut in range(1, len(token))
                 if token[:cut] in index and token[cut:] in index]
        pairs.sort(key=lambda pair: (index[pair[0]], index[pair[1]]))
        found += [(left, right, score) for left, right in pairs]
    found.sort(key=lambda item: (item[2], len(item[0]), len(item[1])), reverse=True)
    return [[left, right] for left, right, _ in found]


def _sentencepiece_parts(meta: dict[str, Any], tokens: list[str], where: Path) -> dict[str, Any]:
    """tokenizer.json parts of a llama SentencePiece vocabulary: BPE with byte fallback,
    Metaspace (a ▁ before the first word), BOS added unless the file says not to."""
    scores = meta.get("tokenizer.ggml.scores")
    if not isinstance(scores, list) or len(scores) != len(tokens):
        raise CheckpointError(f"{where}: tokenizer.ggml.scores must give one score per token")
    merges = meta.get("tokenizer.ggml.merges")
    merges = merges if isinstance(merges, list) else recovered_merges(tokens, scores)
    return {"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "merges": merges, "byte_fallback": True, "fuse_unk": True, "add_bos": True}


def _tokenizer_json(header: GGUFHeader) -> tuple[str, int | None, tuple[int, ...]]:
    """A tokenizer.json for the file's vocabulary (see the module doc)."""
    meta, where = header.metadata, header.path
    model = meta.get("tokenizer.ggml.model")
    if model not in ("gpt2", "llama"):
        raise CheckpointError(f"{where}: tokenizer.ggml.model {model!r} is not read (supported: gpt2 BPE, "
                              "llama SentencePiece)")
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise CheckpointError(f"{where}: tokenizer.ggml.tokens must be a list of strings")
    if model == "llama":
        return _assembled(meta, tokens, _sentencepiece_parts(meta, tokens, where))
    merges = meta.get("tokenizer.ggml.merges")
    if not isinstance(merges, list):
        raise CheckpointError(f"{where}: tokenizer.ggml.merges must be a list of strings")
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in SPLITS:
        raise CheckpointError(f"{where}: tokenizer.ggml.pre {pre!r} is not known (known: {', '.join(SPLITS)})")
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


def gguf_tokenizer(header: GGUFHeader, vocab_size: int) -> Any:
    text, bos, eos = _tokenizer_json(header)
    try:
        return LibraryTokenizer.from_text(text, vocab_size, bos_id=bos, eos_ids=eos, source=str(header.path))
    except TokenizerError as err:
        raise CheckpointError(str(err)) from None


def open_gguf_model(path: Path | str, *, dtype: str = "float32") -> "PortableModel":
    from minigpt_tui.engine.training.model_file import (  # deferred: imports torch
        PortableModel,
    )

    torch_dtype = compute_dtype(dtype)
    header = read_gguf_header(Path(path).expanduser())
    config = gguf_config(header)
    data = GGUFData(header)
    named = gguf_tensors(data, config, torch_dtype)
    vocab_size = int(named["token_embedding.weight"].shape[0])
    tokenizer = gguf_tokenizer(header, vocab_size)
    model = built_model(config, named, torch_dtype, header.path)
    digest = hashlib.sha256(b"gguf\0")
    for t in sorted(header.tensors, key=lambda t: t.name):
        digest.update(f"{t.name}|{t.type_name}|{list(t.shape)}".encode())
        digest.update(hashlib.sha256(data.raw(t)).digest())
    metadata = {"source": "gguf", "family": config.family, "dtype": dtype,
                "quantization": sorted({t.type_name for t in header.tensors})}
    return PortableModel(model, tokenizer, config, digest.hexdigest(), header.path, metadata)
