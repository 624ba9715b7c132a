"""A transformers folder as files: config.json, the shards' headers (one
``model.safetensors`` or shards listed by ``model.safetensors.index.json``), its tokenizer,
and what ``convert`` reports (:class:`Conversion`).

The folder is read for a model of any family the registry declares by
:mod:`minigpt_tui.engine.models.hf_models` (``generate`` and ``convert`` alike);
:func:`conversion_refusal` says from the headers and small files alone why ``convert``
would refuse a folder.
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
from minigpt_tui.engine.core.library_tokenizer import read_library_tokenizer
from minigpt_tui.engine.core.memory import require_memory
from minigpt_tui.engine.formats import hf_tokenizer
from minigpt_tui.engine.formats.bounded_json import (
    JSONRefused,
    read_json_input,
)
from minigpt_tui.engine.formats.hf_export import CONFIG_FILE, INDEX_FILE, RECORD_KEY, WEIGHTS_FILE
from minigpt_tui.engine.formats.hf_families import model_config, our_tensors
from minigpt_tui.engine.formats.portable import read_portable, without_tokenizer
from minigpt_tui.engine.formats.safetensors_read import (
    Header,
    read_header,
)

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.core.tokenizer import ByteBPETokenizer

PICKLED_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")
GENERATION_CONFIG = "generation_config.json"


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
    tied_head: bool = True

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
            "tied_alias": self.tied_head,
            "model_identity": self.model_identity,
            "tokenizer_identity": self.tokenizer_identity,
            "tokenizer_source": self.tokenizer_source,
            "exported_identity": self.exported_identity,
            "identity_matches_export": None if self.exported_identity is None
            else self.exported_identity == self.model_identity,
        }


def _token_ids(value: Any, where: str, key: str) -> tuple[int, ...]:
    if value is None:
        return ()
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise CheckpointError(f"{where}: {key} must be a token id or a list of them, got {value!r}")
    return tuple(values)


def special_ids(folder: Path, config: dict[str, Any]) -> tuple[int | None, tuple[int, ...]]:
    """(BOS, EOS ids): generation_config.json first, then config.json."""
    where = str(folder / CONFIG_FILE)
    bos = _token_ids(config.get("bos_token_id"), where, "bos_token_id")
    eos = _token_ids(config.get("eos_token_id"), where, "eos_token_id")
    if (folder / GENERATION_CONFIG).is_file():
        generation = read_json_file(folder / GENERATION_CONFIG, GENERATION_CONFIG)
        if isinstance(generation, dict):
            where = str(folder / GENERATION_CONFIG)
            bos = _token_ids(generation.get("bos_token_id"), where, "bos_token_id") or bos
            eos = _token_ids(generation.get("eos_token_id"), where, "eos_token_id") or eos
    return (bos[0] if bos else None), eos


def folder_tokenizer(folder: Path, config: dict[str, Any], vocab_size: int) -> Any:
    """The folder's tokenizer.json: ours exactly where our export wrote the folder or it is
    of our layout, else through the ``tokenizers`` library with BOS and EOS from the configs."""
    path = folder / hf_tokenizer.TOKENIZER_FILE
    if not path.is_file():
        if (folder / hf_tokenizer.SENTENCEPIECE_FILE).is_file():
            raise CheckpointError(f"{folder}: SentencePiece tokenizers ({hf_tokenizer.SENTENCEPIECE_FILE}) are not "
                                  f"supported, only a {hf_tokenizer.TOKENIZER_FILE} (or pass --tokenizer-from)")
        raise CheckpointError(f"{folder}: no {hf_tokenizer.TOKENIZER_FILE}: a model without its tokenizer "
                              "cannot encode a prompt (pass --tokenizer-from to convert)")
    if isinstance(config.get(RECORD_KEY), dict):  # our own export: our tokenizer, exactly
        return _as_checkpoint_error(lambda: hf_tokenizer.read_tokenizer_json(path))
    try:  # a tokenizer.json of our own layout stays our byte-level tokenizer
        return hf_tokenizer.read_tokenizer_json(path)
    except TokenizerError:
        pass
    bos, eos = special_ids(folder, config)
    return _as_checkpoint_error(lambda: read_library_tokenizer(path, vocab_size, bos_id=bos, eos_ids=eos))


def _as_checkpoint_error(read: Any) -> Any:
    try:
        return read()
    except TokenizerError as err:
        raise CheckpointError(str(err)) from None


def tokenizer_from(path: Path | str) -> tuple["ByteBPETokenizer", str]:
    """A tokenizer from our model file or checkpoint folder, a tokenizer.json of our layout,
    or a transformers folder holding one; returns it with a description of its source."""
    path = Path(path).expanduser()
    if path.is_dir() and (path / hf_tokenizer.TOKENIZER_FILE).is_file():
        path = path / hf_tokenizer.TOKENIZER_FILE
    if path.is_file() and path.suffix == ".json":
        return _as_checkpoint_error(lambda: hf_tokenizer.read_tokenizer_json(path)), str(path)
    portable = read_portable(path)
    if portable.tokenizer is None:
        raise without_tokenizer(path, "supply a tokenizer")
    return portable.tokenizer, str(portable.path)


def with_dropped_aliases(tensors: dict[str, Any], headers: Any) -> dict[str, Any]:
    """A tensor safetensors' save_model dropped as a duplicate (recorded in the metadata as
    ``dropped name -> kept name``) read as the copy it kept."""
    for header in headers:
        for dropped, kept in header.metadata.items():
            if dropped != "format" and kept in tensors and dropped not in tensors:
                tensors[dropped] = tensors[kept]
    return tensors


def conversion_refusal(path: Path | str) -> str | None:
    """Why ``convert`` would refuse the transformers folder at ``path`` (its one-line reason
    without the path), or None when it converts. Headers and small files only."""
    try:
        _check_convertible(Path(path).expanduser())
    except MiniGPTError as err:
        return str(err).removeprefix(f"{Path(path)}: ").removeprefix(f"{Path(path)} ")
    return None


def _check_convertible(folder: Path) -> None:
    """The checks ``convert`` makes before it reads a tensor: the config, the tensors' names
    and shapes (from the headers; not for pickled weights), the tokenizer."""
    if _pickled_only(folder):
        data = _config_json(folder)
        model_config(data, str(folder))
        rows = data.get("vocab_size")
        if isinstance(rows, int) and not isinstance(rows, bool) and rows > 0:
            folder_tokenizer(folder, data, rows)
        return
    read = read_hf_folder(folder)
    config = model_config(read.config, str(read.path))
    try:
        named = our_tensors(with_dropped_aliases(_shapes(read), read.headers.values()), config)
    except CheckpointError as err:
        raise CheckpointError(f"{read.path}: {err}") from None
    folder_tokenizer(read.path, read.config, int(named["token_embedding.weight"].shape[0]))


def _pickled_only(folder: Path) -> bool:
    return folder.is_dir() and not (folder / WEIGHTS_FILE).is_file() and not (folder / INDEX_FILE).is_file() \
        and any((folder / name).is_file() for name in PICKLED_WEIGHTS)


def _config_json(folder: Path) -> dict[str, Any]:
    data = read_json_file(folder / CONFIG_FILE, "config.json: not a transformers model folder")
    if not isinstance(data, dict):
        raise CheckpointError(f"{folder / CONFIG_FILE}: not a JSON object")
    return data


def _shapes(folder: HFFolder) -> dict[str, "torch.Tensor"]:
    """Every tensor of the folder as an empty tensor of its shape (no data read)."""
    import torch  # deferred: imports torch

    return {name: torch.empty(folder.headers[shard].entry(name).shape, device="meta")
            for name, shard in folder.locations.items()}


def require_room_for(config: Any, vocab_size: int, element: int, where: str) -> None:
    """The model ``convert`` will make, checked before it is allocated: its parameters
    counted with the tokenizer's vocabulary (not the config's), against the limit and the
    memory available for the model and the tensors read to fill it."""
    scalars = estimated_parameters(config, vocab_size)
    if scalars > MAX_PARAMETERS:
        raise CheckpointError(f"{where}: the model would have about {scalars:,} parameters with the tokenizer's "
                              f"{vocab_size:,} ids, above the limit of {MAX_PARAMETERS:,}")
    require_memory(2 * scalars * element, f"{where}: converting this model")
