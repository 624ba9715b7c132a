"""A model as a GGUF file that llama.cpp, Ollama and transformers' GGUF loader read, for
each family the registry gives a GGUF architecture (``llama``, ``qwen2``, ``gpt2``), written
with the ``gguf`` package's own writer and quantizers, each tensor in the type llama.cpp
would give it (:func:`tensor_type`).

The tensors are the family's declaration applied, the inverse of :mod:`gguf_models`'
reading (llama's q and k rows permuted into llama.cpp's interleaved rotary order, GPT-2's
q, k and v side by side in ``attn_qkv``), the head left out when it is the token table. The metadata is what llama.cpp reads: the
architecture's keys, and the tokenizer: ``gpt2`` BPE (tokens, merges, token types and the
pre-tokenizer's name) or a ``llama`` SentencePiece vocabulary (tokens, scores from the merge
ranks, token types), the special ids and the chat template when the model has one. The
file is read back with our own reader before it is moved into place, and a model it would
not describe is refused in one line naming the part.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import gguf
import numpy as np

from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.core.files import check_new_output, work_path
from minigpt_tui.engine.families import family, gguf_architectures
from minigpt_tui.engine.formats.gguf_file import read_gguf_header
from minigpt_tui.engine.formats.hf_family_export import unexpressed_setting
from minigpt_tui.engine.models.gguf_models import SPLITS, gguf_config

if TYPE_CHECKING:
    from minigpt_tui.engine.core.config import ModelConfig
    from minigpt_tui.engine.models.model_file import PortableModel

QUANTS = ("f32", "f16", "q8_0")
F32, F16, Q8_0 = gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.Q8_0
# Each --quant: the type of the weight matrices and general.file_type (llama_ftype) as llama.cpp numbers them.
QUANT_TYPES = {"f32": (F32, 0), "f16": (F16, 1), "q8_0": (Q8_0, 7)}
# 2-D weights that llama.cpp keeps in float32 whatever the type (GPT-2's learned positions).
KEPT_WIDE = ("position_embd.weight",)
CONTROL, NORMAL, UNUSED, BYTE = 3, 1, 5, 6


@dataclass(frozen=True)
class GGUFExport:
    path: Path
    architecture: str
    quant: str
    tensors: int
    bytes: int
    model_identity: str
    tokenizer_identity: str
    types: tuple[tuple[str, int], ...] = ()  # (GGML type name, tensors of that type), most first

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "format": "gguf", "architecture": self.architecture, "quant": self.quant,
                "tensors": self.tensors, "types": dict(self.types), "bytes": self.bytes,
                "model_identity": self.model_identity, "tokenizer_identity": self.tokenizer_identity}


def tensor_type(name: str, shape: tuple[int, ...], quant: str) -> gguf.GGMLQuantizationType:
    """The type llama.cpp gives tensor ``name`` (numpy ``shape``, rows last) in a ``quant`` file.

    As ``convert_hf_to_gguf.py --outtype`` and ``llama-quantize`` (``tensor_allows_quantization``,
    ``llama_tensor_get_type``) choose for these types: 1-D tensors (norms, biases), ``*_norm.weight``
    and the learned position table stay float32; every other 2-D weight takes the type, the
    token table and an untied ``output.weight`` included (for q8_0 llama.cpp picks Q8_0 for both);
    a row that is not whole blocks of the type falls back to F16, as the converter does."""
    target = QUANT_TYPES[quant][0]
    if (target == F32 or len(shape) < 2 or not name.endswith(".weight") or name.endswith("_norm.weight")
            or name in KEPT_WIDE):
        return F32
    block = gguf.GGML_QUANT_SIZES[target][0]
    return target if shape[-1] % block == 0 else F16


def tensor_bytes(shape: tuple[int, ...], kind: gguf.GGMLQuantizationType) -> int:
    """The bytes of a tensor's data in type ``kind`` (before the file's alignment padding)."""
    block, size = gguf.GGML_QUANT_SIZES[kind]
    return int(np.prod(shape, dtype=np.int64)) // block * size


def gguf_tensor_list(named: dict[str, Any], config: "ModelConfig") -> list[tuple[str, "np.ndarray"]]:
    """Our parameters under llama.cpp's names (the family's declaration), as float32 arrays."""
    layout = family(config.family).gguf
    assert layout is not None  # _check_exportable refused a family without one
    moved = layout.tensors_to({name: tensor.detach() for name, tensor in named.items()}, config)
    return [(name, np.ascontiguousarray(tensor.cpu().float().numpy())) for name, tensor in moved.items()]


def architecture_metadata(config: "ModelConfig") -> dict[str, Any]:
    """The architecture's keys llama.cpp reads, from the family's GGUF layout."""
    declared = family(config.family)
    layout = declared.gguf
    assert layout is not None
    arch = layout.architecture
    meta: dict[str, Any] = {
        "general.architecture": arch, f"{arch}.block_count": config.layers, f"{arch}.context_length": config.context,
        f"{arch}.embedding_length": config.width, f"{arch}.feed_forward_length": config.ffn,
        f"{arch}.attention.head_count": config.heads, f"{arch}.{layout.norm_eps_key}": float(config.norm_eps),
    }
    if layout.grouped_kv:
        meta[f"{arch}.attention.head_count_kv"] = config.kv_heads
    if "head_dim" in layout.metadata:
        meta.update({f"{arch}.attention.key_length": config.head_dim, f"{arch}.attention.value_length": config.head_dim})
    if "sliding_window" in layout.metadata and config.attention_window:
        meta[f"{arch}.attention.sliding_window"] = config.attention_window
    if declared.rotary:
        meta.update({f"{arch}.rope.freq_base": float(config.rope_base),
                     f"{arch}.rope.dimension_count": config.rotary_dims})
        if config.rope_scaling == "linear":
            meta.update({f"{arch}.rope.scaling.type": "linear", f"{arch}.rope.scaling.factor": float(config.rope_factor)})
    return meta


def _pre_tokenizer_name(data: dict[str, Any], where: str) -> str:
    """llama.cpp's name (``tokenizer.ggml.pre``) for a byte-level tokenizer's split rule."""
    pre = data.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return "gpt2"
    regex = _split_regex(pre)
    if regex is not None:
        for name in ("qwen2", "llama-bpe"):
            if SPLITS[name] == regex:
                return name
    raise CheckpointError(f"{where}: its tokenizer's pre-tokenizer has no name llama.cpp knows; it cannot be "
                          "written as GGUF")


def _split_regex(pre: dict[str, Any]) -> Any:
    """The regex of a ``Sequence`` pre-tokenizer that is a Split then a ByteLevel; None for
    any other shape."""
    parts = pre.get("pretokenizers") or [] if pre.get("type") == "Sequence" else []
    if len(parts) == 2 and parts[0].get("type") == "Split" and parts[1].get("type") == "ByteLevel":
        return (parts[0].get("pattern") or {}).get("Regex")
    return None


def _bpe_model(data: dict[str, Any], where: str) -> dict[str, Any]:
    """tokenizer.json's ``model``, refused unless it is BPE with a vocabulary table."""
    model = data.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise CheckpointError(f"{where}: only BPE tokenizers can be written as GGUF (this one is {model.get('type')!r})")
    return model


def _token_table(model: dict[str, Any], data: dict[str, Any], vocab_size: int) -> tuple[list[str | None], set[int]]:
    """Each id's token (None where no token has it), the added tokens over the vocabulary,
    and the ids of the special ones."""
    tokens: list[str | None] = [None] * vocab_size
    for token, token_id in model["vocab"].items():
        if 0 <= token_id < vocab_size:
            tokens[token_id] = token
    specials = set()
    for added in data.get("added_tokens") or []:
        if 0 <= added.get("id", -1) < vocab_size:
            tokens[added["id"]] = added["content"]
            if added.get("special"):
                specials.add(added["id"])
    return tokens, specials


def _sentencepiece_metadata(tokens: list[str | None], filled: list[str], specials: set[int],
                            merges: list[str]) -> dict[str, Any]:
    """A SentencePiece vocabulary: a merged token scores by its merge's rank, best first."""
    rank = {left + right: -float(r) for r, (left, right) in enumerate(m.split(" ", 1) for m in merges)}
    return {"tokenizer.ggml.model": "llama",
            "tokenizer.ggml.scores": [rank.get(t, 0.0) for t in filled],
            "tokenizer.ggml.token_type": [
                CONTROL if i in specials else BYTE if t.startswith("<0x") and len(t) == 6
                else UNUSED if tokens[i] is None else NORMAL for i, t in enumerate(filled)]}


def _gpt2_metadata(data: dict[str, Any], where: str, tokens: list[str | None], specials: set[int],
                   merges: list[str], vocab_size: int) -> dict[str, Any]:
    """A byte-level BPE vocabulary: its merges and the name of its split rule."""
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": _pre_tokenizer_name(data, where),
            "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.token_type": [CONTROL if i in specials else UNUSED if tokens[i] is None
                                          else NORMAL for i in range(vocab_size)]}


def _special_metadata(tokenizer: Any) -> dict[str, Any]:
    """The BOS and EOS ids, and whether BOS goes before a text."""
    meta: dict[str, Any] = {}
    if tokenizer.bos_id is not None:
        meta["tokenizer.ggml.bos_token_id"] = tokenizer.bos_id
    if tokenizer.eos_ids:
        meta["tokenizer.ggml.eos_token_id"] = tokenizer.eos_ids[0]
    # BOS is added where the tokenizer's own post-processor puts it before a text.
    meta["tokenizer.ggml.add_bos_token"] = (tokenizer.bos_id is not None
                                            and tokenizer.encode_prompt("a")[:1] == [tokenizer.bos_id])
    return meta


def tokenizer_metadata(tokenizer: Any, vocab_size: int, where: str) -> dict[str, Any]:
    """``tokenizer.ggml.*`` for a model's own tokenizer.json (its ids unchanged)."""
    data = json.loads(tokenizer.text)
    model = _bpe_model(data, where)
    tokens, specials = _token_table(model, data, vocab_size)
    filled = [t if t is not None else f"[PAD{i}]" for i, t in enumerate(tokens)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    meta: dict[str, Any] = {"tokenizer.ggml.tokens": filled}
    if model.get("byte_fallback"):
        meta.update(_sentencepiece_metadata(tokens, filled, specials, merges))
    else:
        meta.update(_gpt2_metadata(data, where, tokens, specials, merges, vocab_size))
    meta.update(_special_metadata(tokenizer))
    return meta


def _check_described(meta: dict[str, Any], tensors: list[tuple[str, Any]], config: "ModelConfig", where: str) -> None:
    """The file would describe this model: our reader's config from the metadata equals it."""
    header = SimpleNamespace(metadata=meta, path=Path(where), tensors=[SimpleNamespace(name=n) for n, _ in tensors])
    field = unexpressed_setting(config, gguf_config(header))
    if field is not None:
        raise CheckpointError(f"{where}: GGUF's {config.family} architecture has no setting for this model's "
                              f"{field} ({getattr(config, field)!r}); it cannot be written as GGUF")


def export_gguf(portable: "PortableModel", out: Path | str, quant: str = "f16",
                progress: Callable[[int, int], None] | None = None) -> GGUFExport:
    """Write ``portable`` as a GGUF file at ``out`` (a new path), read it back, move it in.
    ``progress`` is told ``(tensors converted, tensors)`` after each."""

    out = Path(out).expanduser()
    check_new_output(out)
    where = str(portable.path)
    config = portable.model.config
    _check_exportable(portable, quant, where)
    tokenizer = portable.tokenizer
    tensors = gguf_tensor_list(dict(portable.model.named_parameters()), config)
    meta = {**architecture_metadata(config), **tokenizer_metadata(tokenizer, tokenizer.vocab_size, where)}
    _check_described(meta, tensors, config, where)
    kinds = [tensor_type(name, array.shape, quant) for name, array in tensors]
    work = work_path(out)
    try:
        writer = gguf.GGUFWriter(str(work), meta["general.architecture"])
        for key, value in meta.items():
            if key != "general.architecture":
                writer.add_key_value(key, value, _value_type(value))
        writer.add_file_type(QUANT_TYPES[quant][1])
        for done, ((name, array), kind) in enumerate(zip(tensors, kinds), start=1):
            _add_tensor(writer, name, array, kind)
            if progress is not None:
                progress(done, len(tensors))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        read_gguf_header(work)  # our own reader checks every count, offset and size
        if os.path.lexists(out):
            raise CheckpointError(f"cannot write {out}: it appeared while writing")
        os.replace(work, out)
    except OSError as err:
        raise CheckpointError(f"cannot write {out}: {err.strerror or err}") from None
    finally:
        if work.exists():
            work.unlink()
    return GGUFExport(out, config.family, quant, len(tensors), out.stat().st_size, portable.identity,
                      tokenizer.identity, _type_counts(kinds))


def _check_exportable(portable: "PortableModel", quant: str, where: str) -> None:
    """Refuse an unknown quantization, a family with no GGUF architecture, and a tokenizer
    with no llama.cpp form."""
    config = portable.model.config
    if quant not in QUANTS:
        raise CheckpointError(f"--quant {quant!r} is not supported (choose from {', '.join(QUANTS)})")
    if family(config.family).gguf is None:
        raise CheckpointError(f"{where}: the {config.family} family has no GGUF architecture here "
                              f"(supported: {', '.join(gguf_architectures())})")
    if config.rope_scaling == "llama3":
        raise CheckpointError(f"{where}: GGUF export of llama3 rope scaling is not supported (llama.cpp keeps it as "
                              "a per-frequency tensor); export --format hf keeps it")
    if getattr(portable.tokenizer, "kind", "") != "tokenizers":
        raise CheckpointError(f"{where}: GGUF needs the model's own tokenizer.json; this model's tokenizer "
                              "(byte-level BPE without a split rule) has no llama.cpp form")


def _add_tensor(writer: Any, name: str, array: np.ndarray, kind: gguf.GGMLQuantizationType) -> None:
    """One float32 tensor into the writer as type ``kind`` (from :func:`tensor_type`)."""
    if kind == F32:
        writer.add_tensor(name, array)
    elif kind == F16:
        writer.add_tensor(name, array.astype(np.float16))
    else:
        packed = gguf.quants.quantize(array, kind)
        writer.add_tensor(name, packed, raw_shape=packed.shape, raw_dtype=kind)


def _type_counts(kinds: list[gguf.GGMLQuantizationType]) -> tuple[tuple[str, int], ...]:
    counts: dict[str, int] = {}
    for kind in kinds:
        counts[kind.name] = counts.get(kind.name, 0) + 1
    return tuple(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _value_type(value: Any) -> Any:
    if isinstance(value, bool):
        return gguf.GGUFValueType.BOOL
    if isinstance(value, int):
        return gguf.GGUFValueType.UINT32
    if isinstance(value, float):
        return gguf.GGUFValueType.FLOAT32
    if isinstance(value, str):
        return gguf.GGUFValueType.STRING
    return gguf.GGUFValueType.ARRAY
