"""What checkpoints made by other tools hold, for ``inspect`` and the checkpoint browser.

* A transformers model folder, one file or sharded (``model.safetensors.index.json``):
  entries across shards from the headers alone, parameter totals per dtype, config.json
  as records, the shared tensors ``safetensors.torch.save_model`` dropped (recorded in the
  metadata as ``dropped name -> kept name``) and a head tied by the config as alias records.
* A nanoGPT-style ``ckpt.pt`` or a plain PyTorch state dict (``.pt``, ``.pth``, ``.bin``,
  ``.ckpt``): opened with ``torch.load(path, weights_only=True, map_location="cpu")`` and
  never otherwise. Tensors become entries, tensors sharing one storage become alias
  records, and everything that is not a tensor becomes a state record (for nanoGPT:
  ``iter_num``, ``best_val_loss``, ``model_args``, ``config``, the optimizer's groups).
  A pickle that needs code to run is refused with one line; the weights-only loader never
  runs it.

One tensor's statistics and comparisons read these formats too: a shard's tensor is found
through the index's ``weight_map`` and read alone from that shard; a pickle is loaded with
``mmap=True`` (the same weights-only loader), so only the pages of the tensors used are read.
"""

from __future__ import annotations

import argparse
import io
import math
import pathlib
import pickle
import pickletools
import re
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import numpy

from minigpt_tui.engine.core.errors import CheckpointError, MiniGPTError
from minigpt_tui.engine.formats import hf_layout, hf_tokenizer
from minigpt_tui.engine.formats.gguf_inspect import inspect_gguf, read_gguf_tensor
from minigpt_tui.engine.formats.hf_export import (
    CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    INDEX_FILE,
    WEIGHTS_FILE,
)
from minigpt_tui.engine.formats.hf_import import (
    PICKLED_WEIGHTS,
    folder_tokenizer,
    is_hf_folder,
    plan_conversion,
    read_hf_folder,
    read_json_file,
    shard_name,
)
from minigpt_tui.engine.formats.inspection import (
    EntryRecord,
    FileSummary,
    Inspection,
    InspectionKind,
    TensorRead,
)
from minigpt_tui.engine.formats.integrity import Integrity, IntegrityScope
from minigpt_tui.engine.formats.safetensors_io import (
    Header,
    dtype_name,
    opening_errors,
    read_header,
    read_json_input,
    read_tensor,
)
from minigpt_tui.engine.formats.state_groups import InspectionState, StateGroup

if TYPE_CHECKING:
    import torch

HF_MODEL = InspectionKind.HF_MODEL
TORCH_PICKLE = InspectionKind.TORCH_PICKLE
NANOGPT = InspectionKind.NANOGPT
PICKLE_KINDS = (TORCH_PICKLE, NANOGPT)
PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
MANIFEST = "manifest.json"
NANOGPT_RECORDS = ("iter_num", "best_val_loss", "model_args", "config")
NANOGPT_PROGRESS = ("iter_num", "best_val_loss")
NANOGPT_TOP_LEVEL = ("model", "optimizer", *NANOGPT_RECORDS)  # what a nanoGPT state shows in its own groups
# Tables a config's tie_word_embeddings points the head at, by common architecture.
TABLE_CANDIDATES = (
    "model.embed_tokens.weight",
    "transformer.wte.weight",
    "wte.weight",
    "model.decoder.embed_tokens.weight",
    "gpt_neox.embed_in.weight",
)
LAYER_NAME = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")
RECORD_TEXT_LIMIT = 200


def _foreign_source(path: Path) -> tuple[str, Path] | None:
    """(HF_MODEL, folder) or (TORCH_PICKLE, file) for a path this module opens; None for
    anything else (our own files and folders, plain safetensors files)."""
    if path.is_dir():
        if (path / MANIFEST).exists() or not is_hf_folder(path):
            return None
        return HF_MODEL, path
    if path.is_file():
        if path.name.endswith(".safetensors.index.json"):
            return HF_MODEL, path.parent
        if path.suffix.lower() in PICKLE_SUFFIXES:
            return TORCH_PICKLE, path
        if path.suffix.lower() == ".gguf":
            return InspectionKind.GGUF, path
    return None


def inspect_foreign(path: Path | str) -> Inspection | None:
    """The inspection of a transformers folder or index, or of a PyTorch pickle file;
    None for anything else (our own files and folders, plain safetensors files)."""
    source = _foreign_source(Path(path).expanduser())
    if source is None:
        return None
    kind, where = source
    if kind == InspectionKind.GGUF:
        return inspect_gguf(where)
    return inspect_hf_folder(where) if kind == HF_MODEL else inspect_torch_file(where)


def read_foreign_tensor(path: Path | str, name: str) -> TensorRead | None:
    """One tensor of a transformers folder or index, or of a PyTorch pickle, by the name
    ``inspect_foreign`` lists (``FILE:NAME`` also accepted); None when ``path`` is none of
    these."""
    source = _foreign_source(Path(path).expanduser())
    if source is None:
        return None
    kind, where = source
    if kind == InspectionKind.GGUF:
        return read_gguf_tensor(where, name)
    if kind == TORCH_PICKLE:
        return _pickle_tensor(where, name)
    pickled = _pickled_hf_weights(where)
    if pickled is not None:
        return _pickle_tensor(pickled, name)
    return _hf_tensor(where, name)


def _group(name: str) -> str:
    match = LAYER_NAME.search(name)
    return f"layer {int(match.group(1))}" if match else "model"


# Bounds on walking a loaded object: a small pickle can describe a structure nested
# 100,000 deep, or 2**40 paths through shared references.
WALK_DEPTH = 48
WALK_NODES = 50_000


@dataclass
class WalkBudget:
    """What a walk over a loaded object may still visit, and what it had to leave out."""

    nodes: int = WALK_NODES
    cut: list[str] = field(default_factory=list)

    def spend(self, where: str) -> bool:
        """False (and the place noted once) when the node budget is spent."""
        if self.nodes <= 0:
            if not any(note.startswith("node budget") for note in self.cut):
                self.cut.append(f"node budget of {WALK_NODES} spent at '{where}': the rest is not shown")
            return False
        self.nodes -= 1
        return True

    def too_deep(self, depth: int, where: str) -> bool:
        if depth < WALK_DEPTH:
            return False
        if len(self.cut) < 20:
            self.cut.append(f"'{where}' nests deeper than {WALK_DEPTH} levels: not shown")
        return True


def _text(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= RECORD_TEXT_LIMIT else text[: RECORD_TEXT_LIMIT - 1] + "…"


def _jsonable(value: Any, budget: WalkBudget | None = None, depth: int = 0, where: str = "") -> Any:
    """A JSON form of a record value (non-finite floats and unknown objects as text),
    bounded in depth and nodes."""
    budget = budget if budget is not None else WalkBudget()
    # Plain values first: numpy.float64 is a float and must read as one, not as numpy.
    if value is None or isinstance(value, _PLAIN_TYPES):
        return _jsonable_plain(value)
    if isinstance(value, (dict, list, tuple)):
        return _jsonable_container(value, budget, depth, where)
    if isinstance(value, argparse.Namespace):
        return _jsonable(vars(value), budget, depth, where)
    if type(value).__module__ == "numpy" and hasattr(value, "item"):  # a numpy scalar
        return _jsonable(value.item(), budget, depth + 1, where)
    return _text(value)


_PLAIN_TYPES = (bool, str, int, float, PurePath)


def _jsonable_plain(value: None | bool | str | int | float | PurePath) -> Any:
    """None, a bool, string, number or path as JSON: long strings cut, huge integers and
    non-finite floats as text."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value if len(value) <= 10 * RECORD_TEXT_LIMIT else _text(value)
    if isinstance(value, int):
        return value if value.bit_length() <= 64 else f"(an integer of {value.bit_length()} bits)"
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    return str(value)  # a path


def _jsonable_container(value: dict[Any, Any] | list[Any] | tuple[Any, ...], budget: WalkBudget, depth: int,
                        where: str) -> Any:
    if budget.too_deep(depth, where) or not budget.spend(where):
        return "(not shown)"
    if isinstance(value, dict):
        return {str(k)[:RECORD_TEXT_LIMIT]: _jsonable(v, budget, depth + 1, f"{where}.{k}") for k, v in value.items()}
    return [_jsonable(v, budget, depth + 1, f"{where}.{i}") for i, v in enumerate(value)]


# -- transformers folders -------------------------------------------------------------------
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
    summary: dict[str, Any] = {
        "file": json_file.name,
        "model": model.get("type"),
        "vocab": len(model.get("vocab") or {}),
        "merges": len(model.get("merges") or []),
        "pre_tokenizer": pre.get("type"),
        "added_tokens": [t.get("content") for t in data.get("added_tokens") or [] if isinstance(t, dict)],
    }
    summary.update(_minigpt_layout(data, json_file))
    return summary


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
    try:
        plan_conversion(folder)
        folder_tokenizer(folder.path)
    except CheckpointError as err:
        return {"convertible": False, "unsupported": str(err).removeprefix(f"{folder.path}: ")}
    return {"convertible": True, "unsupported": None}


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
    tied = config.get("tie_word_embeddings", config.get("model_type") != "llama")
    table = next((n for n in TABLE_CANDIDATES if n in folder.locations), None)
    if not (tied and table) or hf_layout.HEAD_NAME in folder.locations or hf_layout.HEAD_NAME in named:
        return None
    return {
        "name": hf_layout.HEAD_NAME,
        "target": table,
        "transform": "none",
        "use": "output head: logits = hidden @ lm_head.weight^T, the token table itself",
        "source": "config.json tie_word_embeddings",
    }


def _dtype_totals(rows: list[tuple[str, int, int]]) -> dict[str, Any]:
    """{dtype: {tensors, scalars, bytes}} and a total, from (dtype, elements, bytes) rows."""
    totals: dict[str, Any] = {}
    for dtype, elements, nbytes in rows:
        slot = totals.setdefault(dtype, {"tensors": 0, "scalars": 0, "bytes": 0})
        slot["tensors"] += 1
        slot["scalars"] += elements
        slot["bytes"] += nbytes
    totals["total"] = {
        "tensors": len(rows),
        "scalars": sum(r[1] for r in rows),
        "bytes": sum(r[2] for r in rows),
    }
    return totals


def _pickled_hf_weights(path: Path) -> Path | None:
    """A folder's ``pytorch_model.bin`` when it has no safetensors weights to prefer."""
    if any((path / name).is_file() for name in (WEIGHTS_FILE, INDEX_FILE)):
        return None
    return next((path / n for n in PICKLED_WEIGHTS if (path / n).is_file() and n.endswith(".bin")), None)


def _candidate_names(name: str) -> list[str]:
    """``name`` itself, then without a leading ``FILE:`` (the checkpoint browser adds the
    file of a folder's entry)."""
    _, separator, bare = name.partition(":")
    return [name, bare] if separator and bare else [name]


def _hf_locate(folder: Path, name: str) -> tuple[Path, Header, str]:
    """The shard holding ``name``: looked up in the index's weight_map and confirmed by that
    shard's header; every shard's header only when the index disagrees with its shards."""
    candidates = _candidate_names(name)
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
    architectures = config.get("architectures") or [None]
    state: dict[str, dict[str, Any]] = {
        StateGroup.MODEL: {
            "architecture": architectures[0],
            "model_type": config.get("model_type"),
            "tied_embeddings": config.get("tie_word_embeddings"),
            "dtype": config.get("dtype", config.get("torch_dtype")),
            "shards": len(folder.shards),
            **_convertible(folder),
        },
        StateGroup.PARAMETERS: _dtype_totals([(e.dtype, e.elements, e.bytes) for e in entries]),
        StateGroup.CONFIG: _jsonable(config),
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
                                       _group(e.name)))
        files.append(FileSummary(shard.name, shard, InspectionKind.SAFETENSORS, header.file_size, header.header_bytes,
                                 len(header.entries), sum(e.nbytes for e in header.entries)))
        metadata[shard.name] = dict(header.metadata)
    return entries, files, metadata


def _add_folder_files(state: dict[str, dict[str, Any]], metadata: dict[str, Any], folder: Any, path: Path) -> None:
    """The state groups of the folder's other files: generation config, tokenizer, index."""
    generation = path / GENERATION_CONFIG_FILE
    if generation.is_file():
        try:
            state[StateGroup.GENERATION_CONFIG] = _jsonable(read_json_file(generation, "generation config"))
        except CheckpointError as err:
            state[StateGroup.GENERATION_CONFIG] = {"error": str(err)}
    tokenizer = _tokenizer_summary(path)
    if tokenizer:
        state[StateGroup.TOKENIZER] = tokenizer
    if folder.index is not None:
        state[StateGroup.INDEX] = {
            "file": INDEX_FILE,
            "metadata": _jsonable(folder.index.get("metadata") or {}),
            "tensors_listed": len(folder.index.get("weight_map") or {}),
            "problems": list(folder.problems),
        }
        metadata[INDEX_FILE] = _jsonable(folder.index.get("metadata") or {})


def _with_hf_config(inspection: Inspection, folder: Path) -> Inspection:
    config = read_json_file(folder / CONFIG_FILE, "config.json")
    state = inspection.state.with_group(StateGroup.CONFIG, _jsonable(config))
    return Inspection(folder, HF_MODEL, inspection.entries, inspection.aliases, state, inspection.metadata,
                      inspection.integrity, inspection.files)


# -- PyTorch pickles ------------------------------------------------------------------------
def _pickle_bytes(path: Path) -> bytes:
    """The pickle program inside a file: a torch zip's data.pkl, or the file itself."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            name = next((n for n in archive.namelist() if n.endswith("data.pkl")), None)
            return archive.read(name) if name else b""
    return path.read_bytes()


def pickle_imports(data: bytes) -> list[str] | None:
    """The callables a pickle program would import, read from its opcodes without running
    it (pickletools only parses); None when the bytes are not a pickle program."""
    found: list[str] = []
    strings: list[str] = []
    try:
        for opcode, arg, _ in pickletools.genops(io.BytesIO(data)):
            if opcode.name in ("GLOBAL", "INST") and isinstance(arg, str):
                found.append(arg.replace(" ", "."))
            elif opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                found.append(f"{strings[-2]}.{strings[-1]}")
            elif isinstance(arg, str):
                strings.append(arg)
            if opcode.name == "STOP":
                break
    except Exception:  # pickletools raises ValueError and others on bytes that are no pickle
        return None
    return found


def _refusal(path: Path, message: str) -> CheckpointError:
    named = re.search(r"GLOBAL ([\w.]+)", message)
    if named:
        return CheckpointError(
            f"{path}: refused: loading it would import and call {named.group(1)} (code execution); it was not run"
        )
    try:
        imports = pickle_imports(_pickle_bytes(path))
    except (OSError, zipfile.BadZipFile):
        imports = None
    if imports is None:
        return CheckpointError(f"{path}: not a PyTorch checkpoint (neither a torch zip archive nor a pickle)")
    unusual = [name for name in imports if not name.startswith(("torch.", "collections.OrderedDict"))]
    if unusual:
        return CheckpointError(
            f"{path}: refused: loading it would import and call {unusual[0]} (code execution); it was not run"
        )
    detail = next((line.strip() for line in message.splitlines() if line.strip().startswith("Unsupported")), "")
    return CheckpointError(f"{path}: refused by the weights-only loader{': ' + detail if detail else ''}; it was not run")


def known_safe_globals() -> list[Any]:
    """The only classes a pickle may name beyond torch's own weights-only set: values that
    routine training scripts store beside their tensors and that cannot run code when
    rebuilt. numpy scalars (with their dtypes), ``argparse.Namespace`` (the script's
    arguments) and ``pathlib`` paths. Everything else stays refused."""

    core = getattr(numpy, "_core", None) or numpy.core  # numpy 2 renamed numpy.core
    dtype_classes = [getattr(numpy.dtypes, name) for name in dir(numpy.dtypes) if name.endswith("DType")]
    return [
        core.multiarray.scalar, numpy.dtype, *dtype_classes,
        argparse.Namespace,
        pathlib.PurePath, pathlib.PurePosixPath, pathlib.PureWindowsPath,
        pathlib.Path, pathlib.PosixPath, pathlib.WindowsPath,
    ]


def load_torch_pickle(path: Path, *, mmap: bool = False) -> Any:
    """``torch.load(path, weights_only=True, map_location="cpu")``: the only way this
    project opens a pickle. Every failure is one line. ``mmap`` maps a torch zip's tensor
    data instead of reading it (a legacy pickle, which cannot be mapped, is read whole)."""
    import torch  # deferred: imports torch

    try:
        with opening_errors(path, "a PyTorch checkpoint"), warnings.catch_warnings(), \
                torch.serialization.safe_globals(known_safe_globals()):
            warnings.simplefilter("ignore")
            if mmap and zipfile.is_zipfile(path):
                return torch.load(path, weights_only=True, map_location="cpu", mmap=True)
            return torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as err:
        raise _refusal(path, str(err)) from None
    except EOFError:
        raise CheckpointError(f"{path}: not a PyTorch checkpoint (the file ends before its first record)") from None
    except (RuntimeError, ValueError, TypeError, KeyError, AttributeError, zipfile.BadZipFile, OSError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint ({first})") from None


@dataclass(frozen=True)
class _Found:
    name: str
    tensor: "torch.Tensor"
    group: str


@dataclass
class _Walk:
    """One walk over a loaded object: containers already seen (by identity: shared
    references are visited once and named as such), whether each holds a tensor, the budget."""

    tensors: list[_Found]
    records: dict[str, Any]
    budget: WalkBudget = field(default_factory=WalkBudget)
    seen: dict[int, str] = field(default_factory=dict)
    holds: dict[int, bool] = field(default_factory=dict)
    keep: list[Any] = field(default_factory=list)  # keeps ids valid while the walk runs


def _walk_object(obj: Any, tensors: list[_Found], records: dict[str, Any]) -> list[str]:
    """Collect ``obj``'s tensors (by dotted name) and other records; returns what was cut."""
    walk = _Walk(tensors, records)
    _walk(walk, obj, "", "", 0)
    if walk.budget.cut:
        records["(not shown)"] = walk.budget.cut
    return walk.budget.cut


def _walk(walk: _Walk, value: Any, prefix: str, group: str, depth: int) -> None:
    import torch  # deferred: imports torch

    if isinstance(value, torch.Tensor):
        _walk_tensor(walk, value, prefix, group)
        return
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    if isinstance(value, (dict, list, tuple)) and _walk_container(walk, value, prefix, group, depth):
        return
    walk.records[prefix or "value"] = _jsonable(value, walk.budget, depth, prefix)


def _walk_tensor(walk: _Walk, tensor: "torch.Tensor", prefix: str, group: str) -> None:
    if walk.budget.spend(prefix):
        walk.tensors.append(_Found(prefix, tensor, group))
        if tensor.numel() == 1 and not tensor.is_complex():
            walk.records[prefix] = _jsonable(tensor.item())


def _walk_container(walk: _Walk, value: dict[Any, Any] | list[Any] | tuple[Any, ...], prefix: str, group: str,
                    depth: int) -> bool:
    """Walk a dict, or a list or tuple that holds a tensor; False when ``value`` is a
    sequence without tensors, to be kept whole as one record."""
    first = walk.seen.get(id(value))
    if first is not None:
        walk.records[prefix or "value"] = f"(the same object as '{first or 'the top level'}')"
        return True
    walk.seen[id(value)] = prefix
    walk.keep.append(value)
    if walk.budget.too_deep(depth, prefix) or not walk.budget.spend(prefix):
        return True
    items = _container_items(walk, value, depth)
    if items is None:
        return False
    for key, inner in items:
        _walk(walk, inner, f"{prefix}.{key}" if prefix else key, group or key, depth + 1)
    return True


def _container_items(walk: _Walk, value: dict[Any, Any] | list[Any] | tuple[Any, ...],
                     depth: int) -> Any:
    """(key, value) pairs to walk: a dict's items, a tensor-holding sequence's by index;
    None for a sequence without tensors."""
    if isinstance(value, dict):
        return ((str(key), inner) for key, inner in value.items())
    if any(_holds_tensor(walk, v, depth + 1) for v in value):
        return ((str(index), inner) for index, inner in enumerate(value))
    return None


def _holds_tensor(walk: _Walk, value: Any, depth: int) -> bool:
    import torch  # deferred: imports torch

    if isinstance(value, torch.Tensor):
        return True
    if not isinstance(value, (dict, list, tuple)) or depth >= WALK_DEPTH:
        return False
    known = walk.holds.get(id(value))
    if known is not None:
        return known
    walk.holds[id(value)] = False  # a cycle reads as holding nothing more
    walk.keep.append(value)
    inner = value.values() if isinstance(value, dict) else value
    found = any(_holds_tensor(walk, v, depth + 1) for v in inner)
    walk.holds[id(value)] = found
    return found


def _dtype_label(tensor: "torch.Tensor") -> str:
    try:
        return dtype_name(tensor.dtype)
    except CheckpointError:
        return str(tensor.dtype).removeprefix("torch.")


def _storage_aliases(found: list[_Found]) -> list[dict[str, Any]]:
    """Tensors that share one storage: each later one is an alias of the first seen."""
    first: dict[tuple[int, int], _Found] = {}
    aliases = []
    for item in found:
        tensor = item.tensor
        if tensor.numel() == 0:
            continue
        storage = tensor.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        owner = first.get(key)
        if owner is None:
            first[key] = item
            continue
        same_view = (tensor.storage_offset() == owner.tensor.storage_offset() and tensor.shape == owner.tensor.shape
                     and tensor.stride() == owner.tensor.stride() and tensor.dtype == owner.tensor.dtype)
        aliases.append({
            "name": item.name,
            "target": owner.name,
            "transform": "none" if same_view else "view",
            "storage_offset": tensor.storage_offset(),
            "use": "shares its storage with the target (saved once, loaded as one)",
            "source": "storage sharing in the pickle",
        })
    return aliases


def _is_nanogpt(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("model"), dict) and any(k in obj for k in NANOGPT_RECORDS)


def _optimizer_state(optimizer: Any) -> dict[str, Any]:
    if not isinstance(optimizer, dict):
        return {"value": _jsonable(optimizer)}
    groups = optimizer.get("param_groups") or []
    state = optimizer.get("state") or {}
    out: dict[str, Any] = {
        "param_groups": len(groups),
        "parameters_with_state": len(state) if isinstance(state, dict) else None,
    }
    out.update(_param_groups(groups))
    if isinstance(state, dict) and state:
        first = next(iter(state.values()))
        if isinstance(first, dict):
            out["state_per_parameter"] = sorted(str(k) for k in first)
    return out


def _param_groups(groups: Any) -> dict[str, Any]:
    """Each optimizer group's settings by ``group N``, its params as a count."""
    out: dict[str, Any] = {}
    for index, group in enumerate(groups if isinstance(groups, list) else []):
        if isinstance(group, dict):
            settings = {k: _jsonable(v) for k, v in group.items() if k != "params"}
            settings["params"] = len(group.get("params") or [])
            out[f"group {index}"] = settings
    return out


def _pickle_entry_group(item: _Found, nanogpt: bool) -> str:
    if item.group and item.name != item.group:
        return item.group  # inside a top-level record: "model", "optimizer", ...
    return StateGroup.TRAINING if nanogpt else _group(item.name)


def _pickle_entries(path: Path, found: list[_Found], nanogpt: bool) -> list[EntryRecord]:
    entries = []
    for item in found:
        tensor = item.tensor
        nbytes = tensor.numel() * tensor.element_size()
        begin = tensor.storage_offset() * tensor.element_size()
        entries.append(EntryRecord(path.name, item.name, _dtype_label(tensor), tuple(tensor.shape), tensor.numel(),
                                   nbytes, begin, begin + nbytes, _pickle_entry_group(item, nanogpt)))
    return entries


def _totals_of(entries: list[EntryRecord]) -> dict[str, Any]:
    return _dtype_totals([(e.dtype, e.elements, e.bytes) for e in entries])


def _nanogpt_state(obj: dict[str, Any], records: dict[str, Any], distinct: list[EntryRecord]) -> dict[str, Any]:
    """A nanoGPT checkpoint's records by meaning: progress, model arguments, its config,
    the optimizer's groups, the model's totals, then whatever else it holds."""
    state: dict[str, Any] = {
        StateGroup.TRAINING: {k: records.get(k, _jsonable(obj.get(k))) for k in NANOGPT_PROGRESS if k in obj},
        **_nanogpt_settings(obj),
    }
    state[StateGroup.PARAMETERS] = _totals_of([e for e in distinct if e.group == "model"])
    others = {k: v for k, v in records.items() if k.split(".")[0] not in NANOGPT_TOP_LEVEL}
    if others:
        state[StateGroup.RECORDS] = others
    return state


def _nanogpt_settings(obj: dict[str, Any]) -> dict[str, Any]:
    """A nanoGPT checkpoint's model arguments, config and optimizer groups, those it has."""
    state: dict[str, Any] = {}
    for key in (StateGroup.MODEL_ARGS, StateGroup.CONFIG):
        if key in obj:
            state[key] = _jsonable(obj[key]) if isinstance(obj[key], dict) else {"value": _jsonable(obj[key])}
    if "optimizer" in obj:
        state[StateGroup.OPTIMIZER] = _optimizer_state(obj["optimizer"])
    return state


def _plain_pickle_state(records: dict[str, Any], entries: list[EntryRecord],
                        distinct: list[EntryRecord]) -> dict[str, Any]:
    """A plain state dict's totals, its records that are not tensors, and the values of its
    one-element tensors."""
    state: dict[str, Any] = {StateGroup.PARAMETERS: _totals_of(distinct)}
    tensor_names = {e.name for e in entries}
    others = {k: v for k, v in records.items() if k not in tensor_names}
    if others:
        state[StateGroup.RECORDS] = others
    values = {k: v for k, v in records.items() if k in tensor_names}
    if values:
        state[StateGroup.SCALAR_TENSORS] = values
    return state


def inspect_torch_file(path: Path) -> Inspection:
    """A PyTorch pickle loaded weights-only: its tensors, shared storages and other records."""
    obj = load_torch_pickle(path)
    found: list[_Found] = []
    records: dict[str, Any] = {}
    nanogpt = _is_nanogpt(obj)
    _walk_object(obj, found, records)
    kind = NANOGPT if nanogpt else TORCH_PICKLE
    entries = _pickle_entries(path, found, nanogpt)
    aliases = _storage_aliases(found)
    # A tensor stored once counts once in the totals, however many names it has.
    shared = {a["name"] for a in aliases if a["transform"] == "none"}
    distinct = [e for e in entries if e.name not in shared]
    state = _nanogpt_state(obj, records, distinct) if nanogpt else _plain_pickle_state(records, entries, distinct)
    summary = FileSummary(path.name, path, kind, path.stat().st_size, 0, len(entries), sum(e.bytes for e in entries))
    return Inspection(path, kind, tuple(entries), tuple(aliases), InspectionState.of(state),
                      _pickle_metadata(path, obj), None, (summary,))


def _pickle_metadata(path: Path, obj: Any) -> dict[str, Any]:
    """How the pickle was opened and what its top level holds."""
    container = "torch-zip" if zipfile.is_zipfile(path) else "legacy-pickle"
    top = list(obj) if isinstance(obj, dict) else [type(obj).__name__]
    return {"container": container, "loader": "torch.load(weights_only=True, map_location='cpu')",
            "top_level": [str(k) for k in top]}


def _plain(tensor: "torch.Tensor") -> "torch.Tensor":
    """A strided, unquantized tensor the statistics and comparison can read."""
    import torch  # deferred: imports torch

    if tensor.is_quantized:
        return tensor.dequantize()
    if tensor.layout != torch.strided:
        return tensor.to_dense()
    return tensor


def _named_tensors(obj: Any) -> dict[str, "torch.Tensor"]:
    """A loaded pickle's tensors under the names ``inspect_torch_file`` shows."""
    found: list[_Found] = []
    _walk_object(obj, found, {})
    return {item.name: item.tensor for item in found}


def pickle_tensors(path: Path) -> dict[str, "torch.Tensor"]:
    """Every tensor of a PyTorch pickle by its inspected name (memory-mapped, weights-only)."""
    return {name: _plain(tensor) for name, tensor in _named_tensors(load_torch_pickle(path, mmap=True)).items()}


def _pickle_tensor(path: Path, name: str) -> TensorRead:
    mapped = zipfile.is_zipfile(path)
    tensors = _named_tensors(load_torch_pickle(path, mmap=True))
    for candidate in _candidate_names(name):
        tensor = tensors.get(candidate)
        if tensor is not None:
            plain = _plain(tensor)
            # Mapped, only the tensor's own pages are read; a legacy pickle was read whole.
            read = plain.numel() * plain.element_size() if mapped else path.stat().st_size
            return TensorRead(path, candidate, _dtype_label(tensor), tuple(tensor.shape), plain, read)
    raise CheckpointError(f"{path}: no tensor named '{name}'")
