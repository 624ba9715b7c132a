"""A transformers llama or gpt2 folder (one ``model.safetensors`` or shards listed by
``model.safetensors.index.json``) back into our portable model file.

Supported: tied-embedding ``LlamaForCausalLM`` / ``GPT2LMHeadModel`` models whose settings
our model computes, in float32 or float64, with a byte-level tokenizer of the layout
:mod:`hf_tokenizer` writes (or none, given a tokenizer from elsewhere). Everything else is
refused with one line naming what is unsupported, before anything is written. The model is
built through its constructor, so lookup and head are one Parameter; an export followed
by a conversion gives back the same model identity.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import MAX_PARAMETERS, estimated_parameters
from minigpt_tui.engine.core.errors import (
    CheckpointError,
    InputRefused,
    MiniGPTError,
    TokenizerError,
)
from minigpt_tui.engine.core.memory import require_memory
from minigpt_tui.engine.core.tokenizer import BOS, EOS
from minigpt_tui.engine.formats import hf_layout, hf_tokenizer
from minigpt_tui.engine.formats.hf_export import CONFIG_FILE, INDEX_FILE, WEIGHTS_FILE
from minigpt_tui.engine.formats.portable import read_portable, without_tokenizer
from minigpt_tui.engine.formats.bounded_json import (
    JSONRefused,
    read_json_input,
)
from minigpt_tui.engine.formats.safetensors_read import (
    Header,
    read_header,
)

if TYPE_CHECKING:

    from minigpt_tui.engine.core.config import ModelConfig
    from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer

PICKLED_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")
# transformers' defaults when config.json does not say whether the head is tied.
TIED_BY_DEFAULT = {"llama": False, "gpt2": True}


@dataclass(frozen=True)
class HFFolder:
    """A transformers folder as read from disk: config, shard headers, where each tensor is."""

    path: Path
    config: dict[str, Any]
    shards: tuple[Path, ...]
    headers: dict[str, Header]  # shard file name -> validated header
    locations: dict[str, str]  # tensor name -> shard file name
    index: dict[str, Any] | None = None
    problems: tuple[str, ...] = field(default_factory=tuple)  # index/shard disagreements


def read_json_file(path: Path, what: str) -> Any:
    """Another tool's JSON file, read bounded (see :func:`read_json_input`)."""
    if not os.path.lexists(path):
        raise CheckpointError(f"{path}: no {what}")
    try:
        return read_json_input(path, what)
    except InputRefused:
        raise
    except JSONRefused as err:
        raise CheckpointError(str(err)) from None


def is_hf_folder(path: Path) -> bool:
    return path.is_dir() and (path / CONFIG_FILE).is_file() and (
        (path / WEIGHTS_FILE).is_file() or (path / INDEX_FILE).is_file()
        or any((path / name).is_file() for name in PICKLED_WEIGHTS)
    )


def shard_name(index_path: Path, name: Any) -> str:
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
        raise CheckpointError(f"{index_path}: shard name {name!r} is not a file name in the folder")
    return name


def read_hf_folder(path: Path | str, *, strict: bool = True) -> HFFolder:
    """Read config.json and every shard's header (no tensor data). ``strict`` refuses an
    index that disagrees with its shards; otherwise the disagreements are returned."""
    path = Path(path).expanduser()
    if path.is_file() and path.name.endswith(".index.json"):
        path = path.parent
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a transformers model folder")
    config = read_json_file(path / CONFIG_FILE, "config.json: not a transformers model folder")
    if not isinstance(config, dict):
        raise CheckpointError(f"{path / CONFIG_FILE}: not a JSON object")
    index, weight_map, names = _weight_files(path)
    headers, locations = _shard_headers(path, names)
    problems: list[str] = []
    if weight_map is not None:
        problems = _index_problems(index, weight_map, headers, locations)
        if strict and problems:
            raise CheckpointError(f"{path / INDEX_FILE}: {problems[0]}")
    return HFFolder(path, config, tuple(path / n for n in names), headers, locations, index, tuple(problems))


def _weight_files(path: Path) -> tuple[Any, dict[str, Any] | None, list[str]]:
    """The index (None without one), its weight map and the shard files to read."""
    if (path / INDEX_FILE).is_file():
        index_path = path / INDEX_FILE
        index = read_json_file(index_path, "index")
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index_path}: no weight_map")
        return index, weight_map, sorted({shard_name(index_path, v) for v in weight_map.values()})
    if (path / WEIGHTS_FILE).is_file():
        return None, None, [WEIGHTS_FILE]
    held = next((name for name in PICKLED_WEIGHTS if (path / name).is_file()), None)
    if held:
        raise CheckpointError(f"{path}: the weights are pickled ({held}); only safetensors folders are supported")
    raise CheckpointError(f"{path}: no {WEIGHTS_FILE} and no {INDEX_FILE}")


def _shard_headers(path: Path, names: list[str]) -> tuple[dict[str, Header], dict[str, str]]:
    """Each shard's validated header, and which shard holds each tensor (a tensor in two
    shards is refused)."""
    headers: dict[str, Header] = {}
    locations: dict[str, str] = {}
    for name in names:
        shard = path / name
        if not shard.is_file():
            raise CheckpointError(f"{path}: the index lists {name}, which is missing")
        header = read_header(shard)
        headers[name] = header
        for entry in header.entries:
            if entry.name in locations:
                raise CheckpointError(f"{path}: tensor '{entry.name}' is in both {locations[entry.name]} and {name}")
            locations[entry.name] = name
    return headers, locations


def _index_problems(index: Any, weight_map: dict[str, Any], headers: dict[str, Header],
                    locations: dict[str, str]) -> list[str]:
    """Where the index and the shards disagree: misplaced or unlisted tensors, total size."""
    problems = [f"the index puts '{tensor}' in {shard}, which does not hold it"
                for tensor, shard in weight_map.items() if locations.get(tensor) != shard]
    problems += [f"{shard} holds '{tensor}', which the index does not list"
                 for tensor, shard in locations.items() if tensor not in weight_map]
    declared = _declared_total_size(index)
    held_bytes = sum(e.nbytes for h in headers.values() for e in h.entries)
    if isinstance(declared, int) and declared != held_bytes:
        problems.append(f"the index declares total_size {declared}, the shards hold {held_bytes} bytes")
    return problems


def _declared_total_size(index: Any) -> Any:
    metadata = index.get("metadata") if isinstance(index, dict) else None
    return metadata.get("total_size") if isinstance(metadata, dict) else None


@dataclass(frozen=True)
class Conversion:
    path: Path
    source: Path
    architecture: str
    family: str
    dtype: str
    tensors: int
    scalars: int
    shards: int
    model_identity: str
    tokenizer_identity: str
    tokenizer_source: str
    exported_identity: str | None  # the identity our export recorded in config.json, if any

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "source": str(self.source),
            "architecture": self.architecture,
            "family": self.family,
            "dtype": self.dtype,
            "tensors": self.tensors,
            "scalars": self.scalars,
            "shards": self.shards,
            "tied_alias": True,
            "model_identity": self.model_identity,
            "tokenizer_identity": self.tokenizer_identity,
            "tokenizer_source": self.tokenizer_source,
            "exported_identity": self.exported_identity,
            "identity_matches_export": None if self.exported_identity is None
            else self.exported_identity == self.model_identity,
        }


def folder_tokenizer(folder: Path) -> "ByteBPETokenizer":
    json_file = folder / hf_tokenizer.TOKENIZER_FILE
    if json_file.is_file():
        return _as_checkpoint_error(lambda: hf_tokenizer.read_tokenizer_json(json_file))
    if (folder / hf_tokenizer.SENTENCEPIECE_FILE).is_file():
        raise CheckpointError(
            f"{folder}: SentencePiece tokenizers ({hf_tokenizer.SENTENCEPIECE_FILE}) are not supported; "
            "only byte-level BPE (or pass --tokenizer-from)"
        )
    raise CheckpointError(f"{folder}: no {hf_tokenizer.TOKENIZER_FILE}; pass --tokenizer-from FILE")


def _as_checkpoint_error(read: Any) -> Any:
    try:
        return read()
    except TokenizerError as err:
        raise CheckpointError(str(err)) from None


def tokenizer_from(path: Path | str) -> tuple["ByteBPETokenizer", str]:
    """A tokenizer from our model file or checkpoint folder, a tokenizer.json, or a
    transformers folder holding one; returns it with a description of its source."""
    path = Path(path).expanduser()
    if path.is_dir() and (path / hf_tokenizer.TOKENIZER_FILE).is_file():
        return folder_tokenizer(path), str(path / hf_tokenizer.TOKENIZER_FILE)
    if path.is_file() and path.suffix == ".json":
        return _as_checkpoint_error(lambda: hf_tokenizer.read_tokenizer_json(path)), str(path)
    portable = read_portable(path)
    if portable.tokenizer is None:
        raise without_tokenizer(path, "supply a tokenizer")
    return portable.tokenizer, str(portable.path)


def _require_tied(folder: HFFolder, family: str, where: str) -> None:
    """Refuses a config that declares an untied head."""
    tied = folder.config.get("tie_word_embeddings", TIED_BY_DEFAULT[family])
    if not tied:
        raise CheckpointError(
            f"{where}: unsupported untied output head (tie_word_embeddings is false); "
            "minigpt-tui models use one token table for lookup and head"
        )


def _special_ids(config: dict[str, Any], where: str) -> None:
    for key, expected in (("bos_token_id", BOS), ("eos_token_id", EOS)):
        value = config.get(key)
        if value is not None and value != expected and value != [expected]:
            raise CheckpointError(f"{where}: unsupported {key} {value!r} (minigpt-tui's is {expected})")


def _resolve_names(folder: HFFolder, family: str) -> dict[str, str]:
    """Canonical transformers name -> the name stored (hub GPT-2 files omit 'transformer.')."""
    out = {_canonical(name, family): name for name in folder.locations}
    # A tensor safetensors' save_model dropped as a duplicate is read from the copy it kept.
    for header in folder.headers.values():
        for dropped, kept in header.metadata.items():
            if dropped != "format" and kept in folder.locations and dropped not in folder.locations:
                out.setdefault(_canonical(dropped, family), kept)
    return out


def _canonical(name: str, family: str) -> str:
    """The transformers name of a stored one: GPT-2's with 'transformer.' put back."""
    if family == "gpt2" and not name.startswith("transformer.") and name != hf_layout.HEAD_NAME:
        return "transformer." + name
    return name


def conversion_refusal(path: Path | str) -> str | None:
    """Why ``convert`` would refuse the transformers folder at ``path`` (its one-line reason
    without the path), or None when it converts. Headers and small files only."""
    try:
        folder = read_hf_folder(path)
        plan_conversion(folder)
        folder_tokenizer(folder.path)
    except MiniGPTError as err:
        return str(err).removeprefix(f"{Path(path)}: ").removeprefix(f"{Path(path)} ")
    return None


def plan_conversion(folder: HFFolder) -> tuple["ModelConfig", dict[str, str], str, bool]:
    """Check everything the headers and config say: (our config, name map, dtype, head stored)."""
    where = str(folder.path)
    family = hf_layout.family_of(folder.config, where)
    config = hf_layout.model_config_from_hf(folder.config, where)
    _special_ids(folder.config, where)
    names = _resolve_names(folder, family)
    table = hf_layout.table_name(family)
    _require_tied(folder, family, where)
    # A head stored as its own tensor (not a recorded alias of the table) must equal it.
    head_stored = hf_layout.HEAD_NAME in names and names[hf_layout.HEAD_NAME] != names.get(table)
    expected = hf_layout.hf_names(config)
    _check_tensor_names(names, expected, family, where)
    return config, names, _single_dtype(folder, names, expected, where), head_stored


def _check_tensor_names(names: dict[str, str], expected: Any, family: str, where: str) -> None:
    """Every tensor the config needs is there, and nothing else but the head and ignorable buffers."""
    missing = [n for n in expected if n not in names]
    if missing:
        raise CheckpointError(f"{where}: tensor '{missing[0]}' is missing ({len(missing)} missing)")
    known = set(expected) | {hf_layout.HEAD_NAME}
    extra = [n for n in names if n not in known and not hf_layout.ignorable(n)]
    if extra:
        raise CheckpointError(
            f"{where}: unsupported tensor '{extra[0]}' (not part of a {hf_layout.ARCHITECTURES[family]} of this config)"
        )


def _single_dtype(folder: HFFolder, names: dict[str, str], expected: Any, where: str) -> str:
    """The one dtype all needed tensors share, and one this build converts."""
    dtypes = {folder.headers[folder.locations[names[n]]].entry(names[n]).dtype for n in expected}
    if len(dtypes) != 1:
        raise CheckpointError(f"{where}: the tensors mix dtypes {sorted(dtypes)}; one of F32 or F64 is needed")
    dtype = dtypes.pop()
    if dtype not in hf_layout.TORCH_DTYPE_NAMES:
        raise CheckpointError(f"{where}: unsupported dtype {dtype} (float32 and float64 models are supported)")
    return dtype


def require_room_for(config: Any, vocab_size: int, element: int, where: str) -> None:
    """The model ``convert`` will make, checked before it is allocated: its parameters
    counted with the tokenizer's vocabulary (not the config's), against the limit and the
    memory available for the model and the tensors read to fill it."""
    scalars = estimated_parameters(config, vocab_size)
    if scalars > MAX_PARAMETERS:
        raise CheckpointError(f"{where}: the model would have about {scalars:,} parameters with the tokenizer's "
                              f"{vocab_size:,} ids, above the limit of {MAX_PARAMETERS:,}")
    require_memory(2 * scalars * element, f"{where}: converting this model")
