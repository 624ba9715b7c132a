"""What a transformers model folder holds, one file or sharded
(``model.safetensors.index.json``): entries across shards from the headers alone, parameter
totals per dtype, config.json as records, the shared tensors ``safetensors.torch.save_model``
dropped (recorded in the metadata as ``dropped name -> kept name``) and a head tied by the
config as alias records; the generation config, the tokenizer and the index as state groups.
A folder whose only weights are a ``pytorch_model.bin`` is inspected as that pickle.

One tensor is found through the index's ``weight_map`` and read alone from its shard.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.errors import CheckpointError, MiniGPTError
from minigpt_tui.engine.families import REGISTRY
from minigpt_tui.engine.formats import hf_tokenizer
from minigpt_tui.engine.formats.bounded_json import read_json_input
from minigpt_tui.engine.formats.foreign_entries import candidate_names, dtype_totals, layer_group
from minigpt_tui.engine.formats.foreign_pickle import inspect_torch_file, read_pickle_tensor
from minigpt_tui.engine.formats.hf_families import architecture_names
from minigpt_tui.engine.formats.hf_export import (
    CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    INDEX_FILE,
    WEIGHTS_FILE,
)
from minigpt_tui.engine.formats.hf_import import (
    PICKLED_WEIGHTS,
    conversion_refusal,
    read_hf_folder,
    read_json_file,
    shard_name,
)
from minigpt_tui.engine.formats.inspection import EntryRecord, FileSummary, Inspection, InspectionKind, TensorRead
from minigpt_tui.engine.formats.integrity import Integrity, IntegrityScope
from minigpt_tui.engine.formats.record_walk import jsonable
from minigpt_tui.engine.formats.safetensors_read import Header, read_header, read_tensor
from minigpt_tui.engine.formats.state_groups import InspectionState, StateGroup

HF_MODEL = InspectionKind.HF_MODEL
HEAD_NAME = "lm_head.weight"  # the causal-LM classes' output head
# Tables a config's tie_word_embeddings points the head at, by common architecture.
TABLE_CANDIDATES = (
    "model.embed_tokens.weight",
    "transformer.wte.weight",
    "wte.weight",
    "model.decoder.embed_tokens.weight",
    "gpt_neox.embed_in.weight",
)


def _tokenizer_summary(folder: Path) -> dict[str, Any]:
    json_file = folder / hf_tokenizer.TOKENIZER_FILE
    if json_file.is_file():
        return _tokenizer_json_summary(json_file)
    if (folder / hf_tokenizer.SENTENCEPIECE_FILE).is_file():
        return {"file": hf_tokenizer.SENTENCEPIECE_FILE, "model": "SentencePiece"}
    return {}


def _tokenizer_json_summary(json_file: Path) -> dict[str, Any]:
    """A tokenizer.json's model, sizes and added tokens, and whether minigpt reads it."""
    try:
        data = read_json_input(json_file, "tokenizer file")
    except (ValueError, MiniGPTError):
        return {"file": json_file.name, "readable": False}
    model = _json_object(data, "model")
    pre = _json_object(data, "pre_tokenizer")
    added = data.get("added_tokens") if isinstance(data, dict) else None
    summary: dict[str, Any] = {
        "file": json_file.name,
        "model": model.get("type"),
        "vocab": _count(model.get("vocab")),
        "merges": _count(model.get("merges")),
        "pre_tokenizer": pre.get("type"),
        "added_tokens": [t.get("content") for t in added if isinstance(t, dict)] if isinstance(added, list) else [],
    }
    summary.update(_minigpt_layout(data, json_file))
    return summary


def _count(value: Any) -> int:
    """How many entries a JSON list or object holds (0 for anything else)."""
    return len(value) if isinstance(value, (list, dict)) else 0


def _json_object(data: Any, key: str) -> dict[str, Any]:
    """``data[key]`` when both are JSON objects, else an empty one."""
    inner = data.get(key) if isinstance(data, dict) else None
    return inner if isinstance(inner, dict) else {}


def _minigpt_layout(data: Any, json_file: Path) -> dict[str, Any]:
    """The layout minigpt reads the tokenizer as, or None and why it does not."""
    try:
        return {"minigpt_layout": hf_tokenizer.tokenizer_from_json(data, json_file).identity}
    except Exception as err:  # any refusal is a finding here, not an error
        return {"minigpt_layout": None, "unsupported": str(err).removeprefix(f"{json_file}: ")}


def _convertible(folder: Any) -> dict[str, Any]:
    refusal = conversion_refusal(folder.path)
    return {"convertible": refusal is None, "unsupported": refusal}


def _hf_aliases(folder: Any) -> list[dict[str, Any]]:
    aliases = _dropped_aliases(folder)
    head = _tied_head_alias(folder, {alias["name"] for alias in aliases})
    return aliases + ([head] if head else [])


def _dropped_aliases(folder: Any) -> list[dict[str, Any]]:
    """The shared tensors save_model dropped, from each shard's metadata."""
    aliases: list[dict[str, Any]] = []
    for shard, header in folder.headers.items():
        for dropped, kept in header.metadata.items():
            if dropped != "format" and kept in folder.locations and dropped not in folder.locations:
                aliases.append({
                    "name": dropped,
                    "target": kept,
                    "transform": "none",
                    "use": "a shared tensor stored once; the file's metadata names the kept copy",
                    "source": f"{shard} metadata (safetensors save_model's dropped alias)",
                })
    return aliases


def _tied_head_alias(folder: Any, named: set[str]) -> dict[str, Any] | None:
    """The output head the config ties to the token table, when no file holds or names it."""
    config = folder.config
    declared = next((f for f in REGISTRY if f.model_type == config.get("model_type")), None)
    tied = config.get("tie_word_embeddings", declared.tied_by_default if declared else True)
    table = next((n for n in TABLE_CANDIDATES if n in folder.locations), None)
    if not (tied and table) or HEAD_NAME in folder.locations or HEAD_NAME in named:
        return None
    return {
        "name": HEAD_NAME,
        "target": table,
        "transform": "none",
        "use": "output head: logits = hidden @ lm_head.weight^T, the token table itself",
        "source": "config.json tie_word_embeddings",
    }


def _pickled_hf_weights(path: Path) -> Path | None:
    """A folder's ``pytorch_model.bin`` when it has no safetensors weights to prefer."""
    if any((path / name).is_file() for name in (WEIGHTS_FILE, INDEX_FILE)):
        return None
    return next((path / n for n in PICKLED_WEIGHTS if (path / n).is_file() and n.endswith(".bin")), None)


def _hf_locate(folder: Path, name: str) -> tuple[Path, Header, str]:
    """The shard holding ``name``: looked up in the index's weight_map and confirmed by that
    shard's header; every shard's header only when the index disagrees with its shards."""
    candidates = candidate_names(name)
    index_path = folder / INDEX_FILE
    if not index_path.is_file():
        header = read_header(folder / WEIGHTS_FILE)
        for candidate in candidates:
            if header.has(candidate):
                return folder / WEIGHTS_FILE, header, candidate
        raise CheckpointError(f"{folder}: no tensor named '{name}'")
    listed = _index_locate(folder, index_path, candidates)
    if listed is not None:
        return listed
    held = read_hf_folder(folder, strict=False)  # inspect reports the disagreement itself
    for candidate in candidates:
        if candidate in held.locations:
            shard = held.locations[candidate]
            return folder / shard, held.headers[shard], candidate
    raise CheckpointError(f"{folder}: no tensor named '{name}'")


def _index_locate(folder: Path, index_path: Path, candidates: list[str]) -> tuple[Path, Header, str] | None:
    """The first candidate the index's weight_map places in a shard whose header holds it."""
    index = read_json_file(index_path, "index")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index_path}: no weight_map")
    for candidate in candidates:
        listed = weight_map.get(candidate)
        if listed is None:
            continue
        shard = folder / shard_name(index_path, listed)
        if shard.is_file():
            header = read_header(shard)
            if header.has(candidate):
                return shard, header, candidate
    return None


def hf_tensor_file(folder: Path, name: str) -> tuple[Path, Header, str] | None:
    """Where a tensor of a transformers folder lies (its shard, the shard's header, its name
    there), for reading it piece by piece; None when the folder's weights are a pickle."""
    if _pickled_hf_weights(folder) is not None:
        return None
    return _hf_locate(folder, name)


def _hf_tensor(folder: Path, name: str) -> TensorRead:
    shard, header, found = _hf_locate(folder, name)
    entry = header.entry(found)
    return TensorRead(shard, found, entry.dtype, entry.shape, read_tensor(shard, found, header), entry.nbytes)


def inspect_hf_folder(path: Path) -> Inspection:
    """A transformers folder from its config and shard headers (no tensor data read)."""
    pickled = _pickled_hf_weights(path)
    if pickled is not None:
        return _with_hf_config(inspect_torch_file(pickled), path)
    folder = read_hf_folder(path, strict=False)
    entries, files, metadata = _hf_shards(folder)
    config = folder.config
    architectures = architecture_names(config) or [None]
    state: dict[str, dict[str, Any]] = {
        StateGroup.MODEL: {
            "architecture": architectures[0],
            "model_type": config.get("model_type"),
            "tied_embeddings": config.get("tie_word_embeddings"),
            "dtype": config.get("dtype", config.get("torch_dtype")),
            "shards": len(folder.shards),
            **_convertible(folder),
        },
        StateGroup.PARAMETERS: dtype_totals([(e.dtype, e.elements, e.bytes) for e in entries]),
        StateGroup.CONFIG: jsonable(config),
    }
    _add_folder_files(state, metadata, folder, path)
    integrity = Integrity(IntegrityScope.INDEX, "headers and index", tuple(folder.problems))
    return Inspection(path, HF_MODEL, tuple(entries), tuple(_hf_aliases(folder)), InspectionState.of(state), metadata,
                      integrity, tuple(files))


def _hf_shards(folder: Any) -> tuple[list[EntryRecord], list[FileSummary], dict[str, Any]]:
    """Every shard's entries, its file summary and its header metadata (by shard name)."""
    entries = []
    files = []
    metadata: dict[str, Any] = {}
    for shard in folder.shards:
        header = folder.headers[shard.name]
        for e in header.entries:
            entries.append(EntryRecord(shard.name, e.name, e.dtype, e.shape, e.elements, e.nbytes, e.begin, e.end,
                                       layer_group(e.name)))
        files.append(FileSummary(shard.name, shard, InspectionKind.SAFETENSORS, header.file_size, header.header_bytes,
                                 len(header.entries), sum(e.nbytes for e in header.entries)))
        metadata[shard.name] = dict(header.metadata)
    return entries, files, metadata


def _add_folder_files(state: dict[str, dict[str, Any]], metadata: dict[str, Any], folder: Any, path: Path) -> None:
    """The state groups of the folder's other files: generation config, tokenizer, index."""
    generation = path / GENERATION_CONFIG_FILE
    if generation.is_file():
        try:
            state[StateGroup.GENERATION_CONFIG] = jsonable(read_json_file(generation, "generation config"))
        except CheckpointError as err:
            state[StateGroup.GENERATION_CONFIG] = {"error": str(err)}
    tokenizer = _tokenizer_summary(path)
    if tokenizer:
        state[StateGroup.TOKENIZER] = tokenizer
    if folder.index is not None:
        state[StateGroup.INDEX] = {
            "file": INDEX_FILE,
            "metadata": jsonable(folder.index.get("metadata") or {}),
            "tensors_listed": len(folder.index.get("weight_map") or {}),
            "problems": list(folder.problems),
        }
        metadata[INDEX_FILE] = jsonable(folder.index.get("metadata") or {})


def _with_hf_config(inspection: Inspection, folder: Path) -> Inspection:
    config = read_json_file(folder / CONFIG_FILE, "config.json")
    state = inspection.state.with_group(StateGroup.CONFIG, jsonable(config))
    return Inspection(folder, HF_MODEL, inspection.entries, inspection.aliases, state, inspection.metadata,
                      inspection.integrity, inspection.files)



def read_hf_tensor(folder: Path, name: str) -> TensorRead:
    """One tensor of a transformers folder by the name ``inspect_hf_folder`` lists
    (``FILE:NAME`` also accepted): from its shard alone, or from the folder's pickle."""
    pickled = _pickled_hf_weights(folder)
    if pickled is not None:
        return read_pickle_tensor(pickled, name)
    return _hf_tensor(folder, name)
