"""The portable model file (``model.safetensors``): what a new CPU process needs to run the
model, and nothing about training.

Entries: the distinct learned tensors by parameter name (the tied token table once), one
F64 ``constants`` tensor holding the family's numerical settings whose bits matter (llama:
RoPE base and RMSNorm epsilon; gpt2: LayerNorm epsilon), and the tokenizer's ordered merge
pairs as ``tokenizer.merges`` (U32 [n, 2]), or for a model that brought its own tokenizer,
that tokenizer.json's UTF-8 bytes as ``tokenizer.json`` (U8 [n]). An untied head is its own
entry, ``lm_head.weight``, with no alias record. The metadata records (JSON strings) name the
format and version, the composition (encoder, backbone, head), the normalized model
config, special ids, alias records and the model identity. See docs/checkpoint-format.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui import __version__
from minigpt_tui.engine.core.config import RunConfig
from minigpt_tui.engine.core.errors import CheckpointError, ConfigError, TokenizerError
from minigpt_tui.engine.core.library_tokenizer import LibraryTokenizer
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.core.tensors import DigestScheme, TensorRecord, tensor_digest
from minigpt_tui.engine.core.tokenizer import (
    BOS,
    BYTE_OFFSET,
    EOS,
    FIRST_MERGE_ID,
    ByteBPETokenizer,
)
from minigpt_tui.engine.families import family as declared_family
from minigpt_tui.engine.formats.checkpoint_folder import (
    TRAINING_STATE_FORMAT,
    expected_from_manifest,
)
from minigpt_tui.engine.formats.safetensors_format import (
    TensorEntry,
    dtype_name,
)
from minigpt_tui.engine.formats.safetensors_read import (
    LoadedFile,
    load_file,
    parse_record,
)
from minigpt_tui.engine.formats.safetensors_write import (
    ProgressHook,
    WrittenFile,
    json_metadata,
    tensor_memory,
    write_safetensors,
)

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.core.config import ModelConfig
    from minigpt_tui.engine.core.library_tokenizer import LibraryTokenizer
    from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer
    from minigpt_tui.engine.models.model import MiniGPT

FORMAT_NAME = "minigpt-tui/portable-model"
FORMAT_VERSION = 1
IDENTITY_SCHEME = "minigpt-tui/model-identity/v1"
MODEL_FILE = "model.safetensors"
CONSTANTS = "constants"
MERGES = "tokenizer.merges"
TOKENIZER_JSON = "tokenizer.json"
ASSETS = (CONSTANTS, MERGES, TOKENIZER_JSON)  # entries that are not learned tensors
TABLE = "token_embedding.weight"
UNTIED_HEAD = "lm_head.weight"
TEXT_DECODER = "text-decoder"
BACKBONE = "backbone"
# Settings that shape training but not the function the model computes: not in its identity.
TRAINING_ONLY_SETTINGS = ("dropout", "init_std")
HEAD_ALIAS = {
    "name": "head.weight",
    "target": TABLE,
    "transform": "transpose",
    "use": "output head: logits = final_norm(hidden) @ token_embedding.weight^T",
}


def constant_layout(family: str) -> list[str]:
    """The settings a model of ``family`` keeps in its F64 constants tensor, in order."""
    return list(declared_family(family).constants)


# -- identity -------------------------------------------------------------------------------
# The model identity: the scheme's name first, then the declared settings, then the tensors
# in name order (independent of the file's layout and metadata order).
_IDENTITY_DIGEST = DigestScheme(IDENTITY_SCHEME.encode() + b"\0")


def semantic_settings(config: "ModelConfig", vocab_size: int | None) -> dict[str, Any]:
    settings = {k: v for k, v in config.declared().items() if k not in TRAINING_ONLY_SETTINGS}
    settings["vocab_size"] = vocab_size
    return settings


def model_identity(
    settings: dict[str, Any],
    composition: dict[str, Any],
    special_ids: dict[str, Any] | None,
    aliases: list[dict[str, Any]],
    tensors: list[TensorRecord],
) -> str:
    """SHA-256 over normalized settings, composition, sharing policy and every tensor's
    name, dtype, shape and bytes in name order: independent of metadata order and layout."""
    declared = {
        "settings": settings,
        "composition": composition,
        "special_ids": special_ids,
        "sharing": sorted(aliases, key=lambda a: a["name"]),
    }
    text = json.dumps(declared, separators=(",", ":"), sort_keys=True).encode()
    return tensor_digest(_IDENTITY_DIGEST, tensors, declared=text)


def tensor_records(named: list[tuple[str, "torch.Tensor"]]) -> list[TensorRecord]:
    """Tensors as a digest of a file's content sees them: safetensors dtype names, the
    bytes they are written with."""
    return [(name, dtype_name(tensor.dtype), tuple(tensor.shape), tensor_memory(tensor)) for name, tensor in named]


def file_records(loaded: LoadedFile) -> list[TensorRecord]:
    """A read file's tensors as :func:`tensor_records` gives them before writing."""
    view = memoryview(loaded.buffer)
    start = loaded.header.data_start
    return [(e.name, e.dtype, e.shape, view[start + e.begin : start + e.end]) for e in loaded.header.entries]


# -- saving ---------------------------------------------------------------------------------
def _special_ids() -> dict[str, int]:
    return {"bos": BOS, "eos": EOS, "byte_offset": BYTE_OFFSET, "first_merge_id": FIRST_MERGE_ID}


def constants_tensor(config: "ModelConfig") -> "torch.Tensor":
    import torch  # deferred: imports torch

    return torch.tensor([getattr(config, name) for name in constant_layout(config.family)], dtype=torch.float64)


def producer_record() -> dict[str, str]:
    return {"package": "minigpt-tui", "version": __version__}


def save_portable_model(
    model: "MiniGPT",
    tokenizer: "ByteBPETokenizer | None",
    path: Path | str,
    *,
    provenance: dict[str, Any] | None = None,
    progress: ProgressHook | None = None,
) -> str:
    """Write the portable text model (learned tensors, constants, merges); return its identity."""
    identity, _ = write_portable_model(model, tokenizer, path, provenance=provenance, progress=progress)
    return identity


@dataclass(frozen=True)
class PortablePayload:
    """What a text-model file will hold, before its identity is computed and it is written."""

    tensors: list[tuple[str, "torch.Tensor"]]
    records: dict[str, Any]  # every metadata record except the identity
    settings: dict[str, Any]

    def identity(self) -> str:
        r = self.records
        return model_identity(self.settings, r["composition"], r["special_ids"], r["aliases"], tensor_records(self.tensors))

    def metadata(self, identity: str) -> dict[str, str]:
        return json_metadata({**self.records, "identity": {"scheme": IDENTITY_SCHEME, "model": identity}})


def without_tokenizer(path: Path | str, action: str, error: type[Exception] = CheckpointError) -> Exception:
    """The one refusal of a model that holds no tokenizer (a backbone-only export, the one
    form of ours without one), in one wording: ``action`` says what it cannot do. Raise it."""
    return error(f"{path} holds no tokenizer: a backbone-only export cannot {action}")


def portable_payload(
    model: "MiniGPT", tokenizer: "ByteBPETokenizer | LibraryTokenizer | None", provenance: dict[str, Any] | None = None
) -> PortablePayload:
    if tokenizer is None:
        raise CheckpointError("a text model file needs its tokenizer; use save_backbone for a backbone export")
    if tokenizer.vocab_size != model.vocab_size:
        raise CheckpointError(
            f"the tokenizer's vocabulary ({tokenizer.vocab_size}) differs from the model's ({model.vocab_size})"
        )
    config = model.config
    tied = model.head_weight is model.token_embedding.weight
    if tied != config.tied_head:
        raise CheckpointError("the model's head does not follow its config's tied_head: the sharing policy cannot be recorded")
    # Distinct named parameters: named_parameters() yields the tied table once.
    learned = [(name, p.detach().cpu()) for name, p in model.named_parameters()]
    tokenizer_tensor, tokenizer_record, encoder, special_ids = _tokenizer_payload(tokenizer)
    tensors = learned + [(CONSTANTS, constants_tensor(config)), tokenizer_tensor]
    head = {"kind": "tied-table-transpose", "table": TABLE} if tied else {"kind": "own-table", "table": UNTIED_HEAD}
    records: dict[str, Any] = {
        "format": {"name": FORMAT_NAME, "version": FORMAT_VERSION},
        "composition": {
            "kind": TEXT_DECODER,
            "encoder": {"kind": encoder, "table": TABLE, "vocab_size": tokenizer.vocab_size},
            "backbone": {"kind": "minigpt-decoder", "family": config.family, "layers": config.layers},
            "head": head,
        },
        "model_config": config.declared(),
        "constants": {"tensor": CONSTANTS, "dtype": "F64", "layout": constant_layout(config.family)},
        "tokenizer": tokenizer_record,
        "special_ids": special_ids,
        "aliases": [HEAD_ALIAS] if tied else [],
        "parameters": {
            "tensors": len(learned),
            "scalars": sum(p.numel() for _, p in learned),
            "dtype": dtype_name(model.dtype),
        },
        "producer": producer_record(),
    }
    if provenance:
        records["provenance"] = provenance
    return PortablePayload(tensors, records, semantic_settings(config, tokenizer.vocab_size))


def _tokenizer_payload(tokenizer: Any) -> tuple[tuple[str, "torch.Tensor"], dict[str, Any], str, dict[str, Any]]:
    """The tokenizer's entry, its record, the encoder kind and the special ids: our merges,
    or the tokenizer.json a model from elsewhere brought (its bytes are in the identity)."""
    import torch  # deferred: imports torch

    if getattr(tokenizer, "kind", "") == "tokenizers":
        data = tokenizer.text.encode("utf-8")
        entry = (TOKENIZER_JSON, torch.frombuffer(bytearray(data), dtype=torch.uint8))
        record = {"kind": "tokenizers", "file_tensor": TOKENIZER_JSON, "bytes": len(data),
                  "vocab_size": tokenizer.vocab_size, "identity": tokenizer.identity}
        special = {"bos": tokenizer.bos_id, "eos": list(tokenizer.eos_ids)}
        return entry, record, "tokenizer-json-token-table", special
    merges = torch.tensor(tokenizer.merges, dtype=torch.uint32).reshape(len(tokenizer.merges), 2)
    record = {"kind": "byte-bpe", "merges_tensor": MERGES, "merges": len(tokenizer.merges),
              "vocab_size": tokenizer.vocab_size, "identity": tokenizer.identity}
    return (MERGES, merges), record, "byte-bpe-token-table", _special_ids()


def write_portable_model(
    model: "MiniGPT",
    tokenizer: "ByteBPETokenizer | None",
    path: Path | str,
    *,
    provenance: dict[str, Any] | None = None,
    progress: ProgressHook | None = None,
    atomic: bool = True,
) -> tuple[str, WrittenFile]:
    payload = portable_payload(model, tokenizer, provenance)
    identity = payload.identity()
    written = write_safetensors(Path(path), payload.tensors, payload.metadata(identity), progress=progress, atomic=atomic)
    return identity, written


# -- loading --------------------------------------------------------------------------------
_RECORDS = ("format", "composition", "model_config", "constants", "tokenizer", "special_ids", "aliases", "parameters", "identity")


def _format_named(fmt: Any) -> str:
    """What a format record that is not a model file's says, in words: our training state
    points at the model file beside it."""
    name = fmt.get("name") if isinstance(fmt, dict) else fmt  # safetensors.torch writes "pt"
    if name == TRAINING_STATE_FORMAT:
        return "it is a checkpoint's training state: give the model.safetensors beside it, or the checkpoint folder"
    if isinstance(name, str):
        return f"its format is '{escape_controls(name)[:80]}'"
    return "its format record is not one this program writes"


def read_model_records(path: Path, metadata: dict[str, str] | Any) -> dict[str, Any]:
    """The parsed metadata records of a portable model file, format checked."""
    if "format" not in metadata:
        raise CheckpointError(f"{path}: not a minigpt-tui model file (its metadata has no format record)")
    fmt = _json_or_text(path, metadata["format"])
    if not isinstance(fmt, dict) or fmt.get("name") != FORMAT_NAME:
        raise CheckpointError(f"{path}: not a minigpt-tui model file ({_format_named(fmt)})")
    records = {key: parse_record(path, key, text) for key, text in metadata.items()}
    if fmt.get("version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: model format version {fmt.get('version')!r} is not supported (this build reads {FORMAT_VERSION})"
        )
    _check_records(path, records)
    return records


def _check_records(path: Path, records: dict[str, Any]) -> None:
    """Every record a model file needs is there, each of its kind."""
    missing = [k for k in _RECORDS if k not in records]
    if missing:
        raise CheckpointError(f"{path}: model file lacks the metadata record '{missing[0]}'")
    for key, kind in _RECORD_TYPES.items():
        if not isinstance(records[key], kind):
            raise CheckpointError(f"{path}: the metadata record '{key}' is not {_TYPE_NAMES[kind]}")


# What each record must be (a backbone export has null tokenizer and special ids).
_RECORD_TYPES: dict[str, type | tuple[type, ...]] = {
    "composition": dict,
    "model_config": dict,
    "constants": dict,
    "tokenizer": (dict, type(None)),
    "special_ids": (dict, type(None)),
    "aliases": list,
    "parameters": dict,
    "identity": dict,
}
_TYPE_NAMES = {dict: "an object", list: "a list", (dict, type(None)): "an object or null"}


def _json_or_text(path: Path, text: str) -> Any:
    try:
        return parse_record(path, "format", text)
    except CheckpointError:
        return text


def _model_config(path: Path, data: Any) -> "ModelConfig":
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: the model_config record is not an object")
    try:
        return RunConfig.from_dict({"preset": "saved", "model": data}).model
    except ConfigError as err:
        raise CheckpointError(f"{path}: saved model config is invalid: {err}") from None


def resolve_model_path(path: Path | str) -> Path:
    path = Path(path)
    if path.is_dir():
        return path / MODEL_FILE
    return path


def check_entries(path: Path, loaded: LoadedFile, expected: dict[str, tuple[tuple[int, ...], Any]], dtype: str) -> None:
    present = {e.name: e for e in loaded.header.entries if e.name not in ASSETS}
    missing = [n for n in expected if n not in present]
    extra = [n for n in present if n not in expected]
    if missing:
        raise CheckpointError(f"{path}: learned tensor '{missing[0]}' is missing ({len(missing)} missing)")
    if extra:
        raise CheckpointError(f"{path}: unexpected tensor '{extra[0]}' for this model config")
    for name, (shape, _) in expected.items():
        _check_entry(path, present[name], shape, dtype)


def _check_entry(path: Path, entry: TensorEntry, shape: tuple[int, ...], dtype: str) -> None:
    """One learned tensor has the shape the config needs and the file's dtype."""
    if entry.shape != shape:
        raise CheckpointError(f"{path}: tensor '{entry.name}' has shape {list(entry.shape)}, the config needs {list(shape)}")
    if entry.dtype != dtype:
        raise CheckpointError(f"{path}: tensor '{entry.name}' is {entry.dtype}, the file declares {dtype}")


def _constants(path: Path, loaded: LoadedFile, config: "ModelConfig", records: dict[str, Any]) -> None:
    layout = constant_layout(config.family)
    if not loaded.header.has(CONSTANTS):
        raise CheckpointError(f"{path}: the constants tensor is missing")
    entry = loaded.header.entry(CONSTANTS)
    if entry.dtype != "F64" or entry.shape != (len(layout),):
        raise CheckpointError(f"{path}: constants must be F64 [{len(layout)}], found {entry.dtype} {list(entry.shape)}")
    if records["constants"].get("layout") != layout:
        raise CheckpointError(f"{path}: constants layout {records['constants'].get('layout')!r} is not {layout}")
    values = loaded.tensor(CONSTANTS).tolist()
    for name, value in zip(layout, values):
        if value != getattr(config, name):
            raise CheckpointError(
                f"{path}: constant {name} is {value!r} but the saved config says {getattr(config, name)!r}"
            )


def _tokenizer(path: Path, loaded: LoadedFile, records: dict[str, Any]) -> "ByteBPETokenizer | LibraryTokenizer":
    info = records["tokenizer"]
    if isinstance(info, dict) and info.get("kind") == "tokenizers":
        return _library_tokenizer(path, loaded, records)
    if not isinstance(info, dict) or info.get("merges_tensor") != MERGES or not loaded.header.has(MERGES):
        raise CheckpointError(f"{path}: the tokenizer merges tensor is missing")
    tokenizer = _merges_tokenizer(path, loaded)
    if tokenizer.identity != info.get("identity"):
        raise CheckpointError(f"{path}: the tokenizer merges do not match the recorded tokenizer identity")
    if records["special_ids"] != _special_ids():
        raise CheckpointError(f"{path}: special ids {records['special_ids']!r} differ from this tokenizer's")
    return tokenizer


def _merges_tokenizer(path: Path, loaded: LoadedFile) -> "ByteBPETokenizer":
    """The byte-level BPE tokenizer rebuilt from the U32 [n, 2] merges tensor."""
    import torch  # deferred: imports torch

    entry = loaded.header.entry(MERGES)
    if entry.dtype != "U32" or len(entry.shape) != 2 or entry.shape[1] != 2:
        raise CheckpointError(f"{path}: tokenizer merges must be U32 [n, 2], found {entry.dtype} {list(entry.shape)}")
    pairs = loaded.tensor(MERGES).to(torch.int64).tolist()
    try:
        return ByteBPETokenizer(tuple((int(a), int(b)) for a, b in pairs))
    except TokenizerError as err:
        raise CheckpointError(f"{path}: the saved tokenizer is invalid: {err}") from None


def _library_tokenizer(path: Path, loaded: LoadedFile, records: dict[str, Any]) -> "LibraryTokenizer":
    """The tokenizer.json a model from elsewhere brought, with its recorded special ids."""
    info, special = records["tokenizer"], records["special_ids"]
    if info.get("file_tensor") != TOKENIZER_JSON or not loaded.header.has(TOKENIZER_JSON):
        raise CheckpointError(f"{path}: the tokenizer.json entry is missing")
    entry = loaded.header.entry(TOKENIZER_JSON)
    if entry.dtype != "U8" or len(entry.shape) != 1:
        raise CheckpointError(f"{path}: the tokenizer.json entry must be U8 [n], found {entry.dtype} {list(entry.shape)}")
    if not isinstance(special, dict) or not isinstance(special.get("eos"), list):
        raise CheckpointError(f"{path}: the special ids record is not an object with a list of eos ids")
    view = memoryview(loaded.buffer)[loaded.header.data_start + entry.begin : loaded.header.data_start + entry.end]
    try:
        text = bytes(view).decode("utf-8")
        tokenizer = LibraryTokenizer.from_text(text, info.get("vocab_size"), bos_id=special.get("bos"),
                                               eos_ids=tuple(special["eos"]), source=f"{path} ({TOKENIZER_JSON})")
    except (UnicodeDecodeError, TokenizerError) as err:
        raise CheckpointError(f"{path}: the saved tokenizer is invalid: {err}") from None
    if tokenizer.identity != info.get("identity"):
        raise CheckpointError(f"{path}: the tokenizer.json does not match the recorded tokenizer identity")
    return tokenizer


def _read(path: Path | str) -> tuple[Path, LoadedFile, dict[str, Any], bool]:
    """The file's bytes (checked against a manifest beside it, if any) and its records.
    The flag says whether a manifest vouched for the bytes."""
    path = resolve_model_path(path)
    expect = expected_from_manifest(path)
    loaded = load_file(path, expect)
    records = read_model_records(path, loaded.metadata)
    return path, loaded, records, expect is not None


def _stored_identity(path: Path, records: dict[str, Any]) -> str:
    stored = records["identity"].get("model") if isinstance(records["identity"], dict) else None
    if not isinstance(stored, str) or len(stored) != 64:
        raise CheckpointError(f"{path}: the model identity record is missing or malformed")
    return stored


def _check_identity(path: Path, loaded: LoadedFile, records: dict[str, Any], settings: dict[str, Any]) -> str:
    stored = _stored_identity(path, records)
    computed = model_identity(
        settings, records["composition"], records["special_ids"], records["aliases"], file_records(loaded)
    )
    if stored != computed:
        raise CheckpointError(
            f"{path}: model identity mismatch (stored {stored[:12]}…, computed {computed[:12]}…): "
            "the tensors or settings changed after saving"
        )
    return computed


def torch_dtype(name: str) -> "torch.dtype":
    import torch  # deferred: imports torch

    return torch.float64 if name == "F64" else torch.float32


@dataclass(frozen=True)
class PortableFile:
    """A checked text-model file whose weights are not yet in any model: what the
    tokenizer and config are, so a caller can build a trainer first and copy in after."""

    path: Path
    loaded: LoadedFile
    records: dict[str, Any]
    config: "ModelConfig"
    tokenizer: "ByteBPETokenizer | LibraryTokenizer"
    identity: str
    dtype: str  # F64 or F32



_MALFORMED = (KeyError, TypeError, AttributeError, ValueError, IndexError)


def read_portable(path: Path | str, *, verify_identity: bool | None = None) -> PortableFile:
    """Read and check a text-model file. The model identity is recomputed from the tensors
    when no manifest vouches for the file's bytes, or when ``verify_identity`` asks."""
    try:
        return _read_portable(path, verify_identity)
    except _MALFORMED as err:
        raise CheckpointError(f"{path}: malformed model file ({type(err).__name__}: {err})") from None


def _read_portable(path: Path | str, verify_identity: bool | None) -> PortableFile:
    path, loaded, records, vouched = _read(path)
    composition = records["composition"]
    if not isinstance(composition, dict) or composition.get("kind") != TEXT_DECODER:
        kind = composition.get("kind") if isinstance(composition, dict) else composition
        raise CheckpointError(f"{path}: holds a {kind} export with no vocabulary or tokenizer, not a text model")
    config = _model_config(path, records["model_config"])
    tokenizer = _tokenizer(path, loaded, records)
    aliases = records["aliases"]
    if aliases != ([HEAD_ALIAS] if config.tied_head else []):
        raise CheckpointError(f"{path}: unknown sharing policy {aliases!r}")
    vocab = composition.get("encoder", {}).get("vocab_size")
    if vocab != tokenizer.vocab_size:
        raise CheckpointError(f"{path}: the vocabulary ({vocab}) differs from the tokenizer's ({tokenizer.vocab_size})")
    dtype = records["parameters"].get("dtype")
    if dtype not in ("F64", "F32"):
        raise CheckpointError(f"{path}: learned tensors of dtype {dtype!r} are not supported")
    _constants(path, loaded, config, records)
    # The content identity is recomputed whether or not a manifest vouches for the bytes:
    # a manifest re-signed after an edit must not let changed weights through.
    if verify_identity is not False:
        identity = _check_identity(path, loaded, records, semantic_settings(config, tokenizer.vocab_size))
    else:
        identity = _stored_identity(path, records)
    return PortableFile(path, loaded, records, config, tokenizer, identity, dtype)


@dataclass(frozen=True)
class BackboneFile:
    """A checked backbone-only file (no vocabulary, no tokenizer) whose weights are in no module yet."""

    path: Path
    loaded: LoadedFile
    records: dict[str, Any]
    config: "ModelConfig"
    identity: str
    dtype: str  # F64 or F32


def read_backbone(path: Path | str) -> BackboneFile:
    """Read and check a backbone-only export: its records, constants and identity."""
    try:
        path, loaded, records, _ = _read(path)
        composition = records["composition"]
        if not isinstance(composition, dict) or composition.get("kind") != BACKBONE:
            raise CheckpointError(f"{path}: is not a backbone-only export")
        config = _model_config(path, records["model_config"])
        dtype = records["parameters"].get("dtype")
        if dtype not in ("F64", "F32"):
            raise CheckpointError(f"{path}: learned tensors of dtype {dtype!r} are not supported")
        _constants(path, loaded, config, records)
        identity = _check_identity(path, loaded, records, semantic_settings(config, None))
    except _MALFORMED as err:
        raise CheckpointError(f"{path}: malformed backbone file ({type(err).__name__}: {err})") from None
    return BackboneFile(path, loaded, records, config, identity, dtype)
