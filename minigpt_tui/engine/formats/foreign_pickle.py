"""What a PyTorch pickle holds: a nanoGPT-style ``ckpt.pt`` or a plain state dict (``.pt``,
``.pth``, ``.bin``, ``.ckpt``), opened with ``torch.load(path, weights_only=True,
map_location="cpu")`` and never otherwise. Tensors become entries, tensors sharing one
storage become alias records, and everything that is not a tensor becomes a state record
(for nanoGPT: ``iter_num``, ``best_val_loss``, ``model_args``, ``config``, the optimizer's
groups). A pickle that needs code to run is refused with one line; the weights-only loader
never runs it. One tensor is read with ``mmap=True`` (the same loader), so only the pages of
the tensors used are read.
"""

from __future__ import annotations

import argparse
import io
import pathlib
import pickle
import pickletools
import re
import struct
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy

from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.formats.foreign_entries import candidate_names, dtype_totals, layer_group
from minigpt_tui.engine.formats.inspection import EntryRecord, FileSummary, Inspection, InspectionKind, TensorRead
from minigpt_tui.engine.formats.record_walk import WALK_DEPTH, WalkBudget, jsonable
from minigpt_tui.engine.formats.safetensors_format import dtype_name
from minigpt_tui.engine.formats.safetensors_read import opening_errors, require_memory_for
from minigpt_tui.engine.formats.state_groups import InspectionState, StateGroup

if TYPE_CHECKING:
    import torch

TORCH_PICKLE = InspectionKind.TORCH_PICKLE
NANOGPT = InspectionKind.NANOGPT
PICKLE_KINDS = (TORCH_PICKLE, NANOGPT)
NANOGPT_RECORDS = ("iter_num", "best_val_loss", "model_args", "config")
NANOGPT_PROGRESS = ("iter_num", "best_val_loss")
NANOGPT_TOP_LEVEL = ("model", "optimizer", *NANOGPT_RECORDS)  # what a nanoGPT state shows in its own groups


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
    except (IndexError, OverflowError, struct.error):
        # The weights-only unpickler is Python: bytes that are no pickle (a text file, a link
        # to a system file) fail inside it this way. Nothing of them is echoed.
        raise CheckpointError(f"{path}: not a PyTorch checkpoint (its bytes are no pickle program the "
                              "weights-only loader can follow)") from None
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
    walk.records[prefix or "value"] = jsonable(value, walk.budget, depth, prefix)


def _walk_tensor(walk: _Walk, tensor: "torch.Tensor", prefix: str, group: str) -> None:
    if walk.budget.spend(prefix):
        walk.tensors.append(_Found(prefix, tensor, group))
        if tensor.numel() == 1 and not tensor.is_complex() and _holds_values(tensor):
            walk.records[prefix] = jsonable(tensor.item())


def _holds_values(tensor: "torch.Tensor") -> bool:
    """Whether a tensor's values can be read as they are: dense (strided) and with data (not
    on the meta device, which holds shapes only)."""
    import torch  # deferred: imports torch

    return tensor.layout == torch.strided and not tensor.is_meta


def _layout_name(tensor: "torch.Tensor") -> str:
    return str(tensor.layout).removeprefix("torch.")


def unreadable_reason(tensor: "torch.Tensor") -> str | None:
    """Why a pickled tensor's values may not be read, or None when they may: a meta tensor
    holds none; a sparse one's indices are not checked by the loader (reading through bad
    ones reads outside its memory); a view that repeats its storage's elements (stride 0,
    as ``expand`` makes) would be materialized at its full size from a few stored bytes.
    Decided from the tensor's header alone, before anything is allocated."""
    if tensor.is_meta:
        return "holds no data (a meta tensor: shapes only)"
    if not _holds_values(tensor):
        return f"is a sparse tensor ({_layout_name(tensor)}); only dense tensors are read"
    stored = tensor.untyped_storage().nbytes() // max(tensor.element_size(), 1) - tensor.storage_offset()
    if tensor.numel() > max(stored, 0):
        return (f"repeats its stored values (a stride-0 or overlapping view): {tensor.numel():,} elements over "
                f"{max(stored, 0):,} stored")
    return None


def readable(path: Path, name: str, tensor: "torch.Tensor") -> "torch.Tensor":
    """``tensor`` when its values may be read (see :func:`unreadable_reason`); one line otherwise."""
    reason = unreadable_reason(tensor)
    if reason is not None:
        raise CheckpointError(f"{path}: tensor '{name}' {reason}")
    return tensor


def require_weights(path: Path, tensors: dict[str, Any]) -> None:
    """Every value of a state dict used as model weights is a readable tensor of real
    numbers (a complex weight would lose its imaginary part when cast)."""
    import torch  # deferred: imports torch

    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(f"{path}: '{name}' is a {type(tensor).__name__}, not a tensor")
        readable(path, name, tensor)
        if tensor.is_complex():
            dtype = str(tensor.dtype).removeprefix("torch.")
            raise CheckpointError(f"{path}: tensor '{name}' is {dtype}; weights must be real numbers")


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
        label = dtype_name(tensor.dtype)
    except CheckpointError:
        label = str(tensor.dtype).removeprefix("torch.")
    if tensor.is_meta:
        return f"{label} (meta)"
    return label if _holds_values(tensor) else f"{label} ({_layout_name(tensor)})"


def _storage_aliases(found: list[_Found]) -> list[dict[str, Any]]:
    """Tensors that share one storage: each later one is an alias of the first seen."""
    first: dict[tuple[int, int], _Found] = {}
    aliases = []
    for item in found:
        tensor = item.tensor
        if tensor.numel() == 0 or not _holds_values(tensor):
            continue  # a sparse tensor's parts are its own; a meta one has no storage
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
        return {"value": jsonable(optimizer)}
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
            settings = {k: jsonable(v) for k, v in group.items() if k != "params"}
            settings["params"] = len(group.get("params") or [])
            out[f"group {index}"] = settings
    return out


def _pickle_entry_group(item: _Found, nanogpt: bool) -> str:
    if item.group and item.name != item.group:
        return item.group  # inside a top-level record: "model", "optimizer", ...
    return StateGroup.TRAINING if nanogpt else layer_group(item.name)


def _pickle_entries(path: Path, found: list[_Found], nanogpt: bool) -> list[EntryRecord]:
    entries = []
    for item in found:
        tensor = item.tensor
        nbytes = tensor.numel() * tensor.element_size()
        begin = tensor.storage_offset() * tensor.element_size() if _holds_values(tensor) else 0
        entries.append(EntryRecord(path.name, item.name, _dtype_label(tensor), tuple(tensor.shape), tensor.numel(),
                                   nbytes, begin, begin + nbytes, _pickle_entry_group(item, nanogpt)))
    return entries


def _totals_of(entries: list[EntryRecord]) -> dict[str, Any]:
    return dtype_totals([(e.dtype, e.elements, e.bytes) for e in entries])


def _nanogpt_state(obj: dict[str, Any], records: dict[str, Any], distinct: list[EntryRecord]) -> dict[str, Any]:
    """A nanoGPT checkpoint's records by meaning: progress, model arguments, its config,
    the optimizer's groups, the model's totals, then whatever else it holds."""
    state: dict[str, Any] = {
        StateGroup.TRAINING: {k: records.get(k, jsonable(obj.get(k))) for k in NANOGPT_PROGRESS if k in obj},
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
            state[key] = jsonable(obj[key]) if isinstance(obj[key], dict) else {"value": jsonable(obj[key])}
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


def _plain(path: Path, name: str, tensor: "torch.Tensor") -> "torch.Tensor":
    """A strided, unquantized tensor the statistics and comparison can read; one that may
    not be read is refused (see :func:`unreadable_reason`)."""
    readable(path, name, tensor)
    if tensor.is_quantized:
        require_memory_for(path, tensor.numel() * 4, f"tensor '{name}' dequantized")
        return tensor.dequantize()
    return tensor


def _named_tensors(obj: Any) -> dict[str, "torch.Tensor"]:
    """A loaded pickle's tensors under the names ``inspect_torch_file`` shows."""
    found: list[_Found] = []
    _walk_object(obj, found, {})
    return {item.name: item.tensor for item in found}


def pickle_tensors(path: Path) -> dict[str, "torch.Tensor"]:
    """Every tensor of a PyTorch pickle by its inspected name (memory-mapped, weights-only)."""
    return {name: _plain(path, name, tensor)
            for name, tensor in _named_tensors(load_torch_pickle(path, mmap=True)).items()}


def read_pickle_tensor(path: Path, name: str) -> TensorRead:
    """One tensor of a PyTorch pickle by the name ``inspect_torch_file`` lists (``FILE:NAME``
    also accepted), memory-mapped when the file is a torch zip."""
    mapped = zipfile.is_zipfile(path)
    tensors = _named_tensors(load_torch_pickle(path, mmap=True))
    for candidate in candidate_names(name):
        tensor = tensors.get(candidate)
        if tensor is not None:
            plain = _plain(path, candidate, tensor)
            # Mapped, only the tensor's own pages are read; a legacy pickle was read whole.
            read = plain.numel() * plain.element_size() if mapped else path.stat().st_size
            return TensorRead(path, candidate, _dtype_label(tensor), tuple(tensor.shape), plain, read)
    raise CheckpointError(f"{path}: no tensor named '{name}'")
