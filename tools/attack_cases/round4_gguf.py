"""Round four, GGUF files: metadata of the wrong type or value (``head_count_kv`` 0, a
string, a float, negative; ``tokenizer.ggml.pre`` an array; ``token_type`` an int; the norm
epsilon a string or an array; ``embedding_length`` 2^40; 64 heads of size 1), tensors past
``block_count``, tensor types without a dequantizer (Q8_1, Q8_K, Q1_0) and plain ones (I8,
I16, I32, F64, which read), and ``inspect --verify`` / ``--compare`` of a GGUF file. Each file
is a tiny llama written with the gguf package's own writer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from attack_cases import Case

TOKENS = [chr(c) for c in range(ord("a"), ord("a") + 15)] + ["ab"]


def _tiny(path: Path, meta: dict[str, tuple[Any, str]] | None = None, tensors: dict[str, np.ndarray] | None = None,
          quantized: tuple[str, str] | None = None, width: int = 32, layers: int = 1) -> Path:
    """A llama of ``layers`` blocks of width ``width`` (16 tokens); ``meta``: key -> (value,
    GGUFValueType name) over the usual; ``tensors``: arrays written as their numpy type;
    ``quantized``: (tensor name, GGML type name) written as zero blocks of that type."""
    import gguf

    kinds = gguf.GGUFValueType
    values: dict[str, tuple[Any, str]] = {
        "llama.block_count": (layers, "UINT32"), "llama.context_length": (16, "UINT32"),
        "llama.embedding_length": (width, "UINT32"), "llama.feed_forward_length": (width, "UINT32"),
        "llama.attention.head_count": (2, "UINT32"), "llama.attention.head_count_kv": (2, "UINT32"),
        "llama.attention.layer_norm_rms_epsilon": (1e-6, "FLOAT32"), "llama.rope.freq_base": (10000.0, "FLOAT32"),
        "tokenizer.ggml.model": ("gpt2", "STRING"), "tokenizer.ggml.pre": ("default", "STRING"),
        "tokenizer.ggml.tokens": (TOKENS, "ARRAY"), "tokenizer.ggml.merges": (["a b"], "ARRAY"),
        "tokenizer.ggml.token_type": ([1] * len(TOKENS), "ARRAY"), **(meta or {})}
    rng = np.random.default_rng(0)
    arrays = {"token_embd.weight": rng.standard_normal((len(TOKENS), width)), "output_norm.weight": np.ones(width)}
    for i in range(layers):
        arrays.update({f"blk.{i}.{name}": np.ones(width) for name in ("attn_norm.weight", "ffn_norm.weight")})
        arrays.update({f"blk.{i}.{name}": rng.standard_normal((width, width)) for name in (
            "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "ffn_gate.weight",
            "ffn_up.weight", "ffn_down.weight")})
    arrays = {name: array.astype(np.float32) for name, array in arrays.items()}
    arrays.update(tensors or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, (value, kind) in values.items():
        writer.add_key_value(key, value, getattr(kinds, kind))
    for name, array in arrays.items():
        if quantized is None or name != quantized[0]:
            writer.add_tensor(name, np.ascontiguousarray(array))
    if quantized is not None:
        kind = getattr(gguf.GGMLQuantizationType, quantized[1])
        block, nbytes = gguf.GGML_QUANT_SIZES[kind]
        writer.add_tensor(quantized[0], np.zeros((width, width // block * nbytes), dtype=np.uint8),
                          raw_shape=(width, width // block * nbytes), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


BAD_METADATA: dict[str, dict[str, tuple[Any, str]]] = {
    "head_count_kv 0": {"llama.attention.head_count_kv": (0, "UINT32")},
    "head_count_kv a string": {"llama.attention.head_count_kv": ("2", "STRING")},
    "head_count_kv a float": {"llama.attention.head_count_kv": (2.0, "FLOAT32")},
    "head_count_kv negative": {"llama.attention.head_count_kv": (-2, "INT32")},
    "tokenizer.ggml.pre an array": {"tokenizer.ggml.pre": (["gpt2"], "ARRAY")},
    "token_type an int": {"tokenizer.ggml.token_type": (1, "INT32")},
    "norm epsilon a string": {"llama.attention.layer_norm_rms_epsilon": ("x", "STRING")},
    "norm epsilon an array": {"llama.attention.layer_norm_rms_epsilon": ([1e-6], "ARRAY")},
    "embedding_length 2**40": {"llama.embedding_length": (2 ** 40, "UINT64")},
    "64 heads of size 1": {"llama.attention.head_count": (64, "UINT32"), "llama.attention.head_count_kv": (64, "UINT32"),
                           "llama.embedding_length": (64, "UINT32")},
    "rope.freq_base infinite": {"llama.rope.freq_base": (float("inf"), "FLOAT32")},
}


def _files() -> dict[str, Callable[[Path], Path]]:
    """Each hostile file by the case's name, built in the case's folder."""
    files: dict[str, Callable[[Path], Path]] = {
        name: (lambda r, meta=meta: _tiny(r / "m.gguf", meta=meta)) for name, meta in BAD_METADATA.items()}
    files["block_count 1 with blk.1 tensors"] = lambda r: _tiny(r / "m.gguf", layers=2,
                                                                 meta={"llama.block_count": (1, "UINT32")})
    files["Q8_1 tensor"] = lambda r: _tiny(r / "m.gguf", quantized=("blk.0.ffn_up.weight", "Q8_1"))
    files["Q8_K tensor"] = lambda r: _tiny(r / "m.gguf", width=256, quantized=("blk.0.ffn_up.weight", "Q8_K"))
    files["Q1_0 tensor"] = lambda r: _tiny(r / "m.gguf", width=128, quantized=("blk.0.ffn_up.weight", "Q1_0"))
    return files


def _plain(r: Path) -> Path:
    """A model whose norms are I8 and I16, one projection I32 and the token table F64."""
    return _tiny(r / "plain.gguf", tensors={
        "blk.0.attn_norm.weight": np.arange(1, 33, dtype=np.int8),
        "blk.0.ffn_norm.weight": np.arange(1, 33, dtype=np.int16),
        "blk.0.attn_v.weight": np.arange(32 * 32, dtype=np.int32).reshape(32, 32) % 7 - 3,
        "token_embd.weight": np.random.default_rng(1).standard_normal((len(TOKENS), 32))})


def cases() -> list[Case]:
    found = []
    for name, build in _files().items():
        found += [
            Case(f"r4 gguf: generate, {name}", lambda r, build=build: [
                "generate", "--model", str(build(r)), "--prompt", "ab", "--max-new-tokens", "1"]),
            Case(f"r4 gguf: export --format gguf, {name}", lambda r, build=build: [
                "export", "--model", str(build(r)), "--format", "gguf", "--out", str(r / "home" / "out.gguf")]),
        ]
    for name in ("head_count_kv 0", "block_count 1 with blk.1 tensors", "Q8_1 tensor"):
        found.append(Case(f"r4 gguf: train --init-from, {name}", lambda r, build=_files()[name]: [
            "train", "--preset", "tiny", "--init-from", str(build(r)), "--steps", "1", "--run", "warm"]))
    for kind in ("Q8_1", "Q8_K", "Q1_0"):
        found.append(Case(f"r4 gguf: inspect --tensor, {kind} tensor", lambda r, build=_files()[f"{kind} tensor"]: [
            "inspect", str(build(r)), "--tensor", "blk.0.ffn_up.weight"]))
    found += [
        Case("r4 gguf: generate, I8 / I16 / I32 / F64 tensors read", lambda r: [
            "generate", "--model", str(_plain(r)), "--prompt", "ab", "--max-new-tokens", "1"]),
        Case("r4 gguf: inspect --tensor of an I32 tensor", lambda r: [
            "inspect", str(_plain(r)), "--tensor", "blk.0.attn_v.weight"]),
        Case("r4 gguf: inspect --verify of a GGUF file", lambda r: ["inspect", str(_plain(r)), "--verify"]),
        Case("r4 gguf: inspect --verify of a Q8_1 tensor", lambda r: [
            "inspect", str(_files()["Q8_1 tensor"](r)), "--verify"]),
        Case("r4 gguf: inspect --compare of two GGUF files", lambda r: [
            "inspect", str(_plain(r)), "--compare", str(_tiny(r / "other.gguf"))]),
    ]
    return found
