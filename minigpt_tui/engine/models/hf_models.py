"""Open a transformers model folder for generation and every view, without converting it.

The folder's ``config.json`` sets the model's parts (:mod:`..formats.hf_families`); its weights come
from one ``model.safetensors``, shards through ``model.safetensors.index.json``, or a
``pytorch_model.bin`` read weights-only. float16 and bfloat16 weights are widened to the
compute dtype (float32, or float64 when asked). Its ``tokenizer.json`` runs through the
``tokenizers`` library; BOS comes from the config, EOS ids from ``generation_config.json``
(else the config). A folder our own export wrote keeps our byte-level tokenizer.

The model is built on the meta device and the folder's tensors, over the memory-mapped
files, assigned to it: opening reads the headers, and a page of weights is read when a
forward first uses it. Its identity is the SHA-256 of the config and of every weights
file's name, size and header.
"""

from __future__ import annotations

import hashlib
import json
import mmap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import RunConfig, settings_in_use
from minigpt_tui.engine.core.errors import CheckpointError, ConfigError
from minigpt_tui.engine.core.files import check_new_output
from minigpt_tui.engine.core.reading import weights_read
from minigpt_tui.engine.core.tokenizer import BOS, EOS
from minigpt_tui.engine.families import family
from minigpt_tui.engine.formats import hf_tokenizer
from minigpt_tui.engine.formats.foreign_pickle import pickle_tensors, require_weights
from minigpt_tui.engine.formats.hf_export import CONFIG_FILE, RECORD_KEY
from minigpt_tui.engine.formats.hf_families import architecture_names, model_config, our_tensors
from minigpt_tui.engine.formats.hf_import import (
    PICKLED_WEIGHTS,
    Conversion,
    folder_tokenizer,
    read_hf_folder,
    read_json_file,
    require_room_for,
    tokenizer_from,
    with_dropped_aliases,
)
from minigpt_tui.engine.formats.portable import TRAINING_ONLY_SETTINGS, write_portable_model
from minigpt_tui.engine.formats.safetensors_read import (
    opening_errors,
    tensor_from_bytes,
)

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.models.model_file import PortableModel

DTYPES = ("float32", "float64")
WIDENED = ("F16", "BF16", "F32", "F64")


@dataclass(frozen=True)
class FolderModel:
    """What a transformers folder holds, read: its config.json, our config, our named
    tensors (over the mapped files) and its weights files with what identifies each."""

    folder: Path
    data: dict[str, Any]
    config: Any
    named: dict[str, "torch.Tensor"]
    files: tuple[str, ...]
    digests: tuple[str, ...]

    @property
    def rows(self) -> int:
        return int(self.named["token_embedding.weight"].shape[0])


def _mapped(path: Path) -> memoryview:
    """The file mapped copy-on-write: tensors over it are writable, and nothing is read
    until a page is used."""
    with path.open("rb") as fh:
        return memoryview(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY))


def _weights(folder: Path) -> tuple[dict[str, "torch.Tensor"], list[str], list[str]]:
    """Every tensor in the folder's weights by name (over the mapped files), the files, and
    what identifies each file: its name, size and validated header."""

    pickled = next((folder / n for n in PICKLED_WEIGHTS if (folder / n).is_file()), None)
    safetensors = (folder / "model.safetensors").is_file() or (folder / "model.safetensors.index.json").is_file()
    if pickled is not None and not safetensors:
        if pickled.name.endswith(".index.json"):
            raise CheckpointError(f"{folder}: sharded pickled weights are not supported; save the model as safetensors")
        tensors = pickle_tensors(pickled)
        require_weights(pickled, tensors)
        return tensors, [pickled.name], [f"{pickled.name}:{pickled.stat().st_size}"]
    read = read_hf_folder(folder)
    tensors: dict[str, torch.Tensor] = {}
    parts = []
    for shard in read.shards:
        parts.append(_shard_tensors(shard, read.headers[shard.name], tensors))
    return with_dropped_aliases(tensors, read.headers.values()), [p.name for p in read.shards], parts


def _shard_tensors(shard: Path, header: Any, tensors: dict[str, torch.Tensor]) -> str:
    """Every tensor of one safetensors shard into ``tensors`` (over the mapped file), and
    what identifies the shard: its name, size and validated header."""
    with opening_errors(shard, "a safetensors file"):
        buffer = _mapped(shard)
    if len(buffer) != header.file_size:
        raise CheckpointError(f"{shard} changed size while it was read")
    for entry in header.entries:
        if entry.dtype not in WIDENED:
            raise CheckpointError(f"{shard}: tensor '{entry.name}' is {entry.dtype}; weights must be "
                                  "float16, bfloat16, float32 or float64")
        tensors[entry.name] = tensor_from_bytes(entry, buffer, header.data_start + entry.begin)
    listed = [[e.name, e.dtype, list(e.shape), e.begin, e.end] for e in header.entries]
    return json.dumps([shard.name, header.file_size, listed, dict(header.metadata)], sort_keys=True)


def compute_dtype(name: str) -> "torch.dtype":
    """The compute type of a model from elsewhere: float32, or float64 when asked for."""
    import torch  # deferred: imports torch

    if name not in DTYPES:
        raise CheckpointError(f"--dtype must be one of {', '.join(DTYPES)}, got '{name}'")
    return torch.float64 if name == "float64" else torch.float32


def built_model(config: Any, named: dict[str, "torch.Tensor"], dtype: "torch.dtype", where: Path) -> Any:
    """Our model of ``config`` on the meta device, the named tensors assigned, in eval mode."""
    import torch  # deferred: imports torch

    from minigpt_tui.engine.models.model import MiniGPT  # deferred: imports torch

    with torch.device("meta"):
        model = MiniGPT(config, int(named["token_embedding.weight"].shape[0]), dtype)
    assign_weights(model, named, dtype, where)
    return model.eval()


def assign_weights(model: Any, named: dict[str, "torch.Tensor"], dtype: "torch.dtype", where: Path) -> None:
    """Copy-free where the dtype already matches; shapes checked name by name."""
    expected = dict(model.named_parameters())
    state = {}
    advance = weights_read(sum(int(named[n].nbytes) for n in expected if n in named))  # the opener's progress
    for name, param in expected.items():
        tensor = named.get(name)
        if tensor is None:
            raise CheckpointError(f"{where}: the weights have no tensor for {name}")
        if tuple(tensor.shape) != tuple(param.shape):
            raise CheckpointError(f"{where}: tensor for {name} has shape {list(tensor.shape)}, "
                                  f"the config makes it {list(param.shape)}")
        state[name] = tensor.to(dtype)  # a transposed view stays a view: matmul reads it as it is
        advance(int(tensor.nbytes))
    model.load_state_dict(state, assign=True, strict=True)


def read_folder(path: Path | str) -> FolderModel:
    """A transformers folder's config and tensors as ours (nothing built, no data read)."""
    folder = Path(path).expanduser()
    if folder.is_file() and folder.name.endswith(".index.json"):
        folder = folder.parent
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a transformers model folder")
    config_path = folder / CONFIG_FILE
    data = read_json_file(config_path, "config.json: not a transformers model folder")
    if not isinstance(data, dict):
        raise CheckpointError(f"{config_path}: not a JSON object")
    config = model_config(data, str(config_path))
    tensors, files, digests = _weights(folder)
    try:
        named = our_tensors(tensors, config)
    except CheckpointError as err:
        raise CheckpointError(f"{folder}: {err}") from None
    return FolderModel(folder, data, config, named, tuple(files), tuple(digests))


def open_hf_model(path: Path | str, *, dtype: str = "float32") -> "PortableModel":
    """A transformers folder as a ready model: built from its config, its weights assigned."""
    from minigpt_tui.engine.models.model_file import (  # deferred: imports torch
        PortableModel,
    )

    torch_dtype = compute_dtype(dtype)
    read = read_folder(path)
    tokenizer = folder_tokenizer(read.folder, read.data, read.rows)
    model = built_model(read.config, read.named, torch_dtype, read.folder)
    if tokenizer.vocab_size != read.rows:
        raise CheckpointError(f"{read.folder}: the tokenizer has {tokenizer.vocab_size} ids, the model {read.rows} rows")
    metadata = {"source": "transformers", "architecture": (architecture_names(read.data) or [None])[0],
                "family": read.config.family, "dtype": dtype}
    return PortableModel(model, tokenizer, read.config, _identity(read), read.folder, metadata)


def _identity(read: FolderModel) -> str:
    """The identity of a folder: its config and every weights file's name, size and header
    (tensor names, dtypes, shapes, offsets). Hashing the bytes too would read every page of
    the weights before the first decision."""
    digest = hashlib.sha256(b"transformers-folder\0" + (read.folder / CONFIG_FILE).read_bytes())
    for part in read.digests:
        digest.update(len(part).to_bytes(8, "little") + part.encode())
    return digest.hexdigest()


def convert_hf(source: Path | str, out: Path | str, *, tokenizer_path: Path | str | None = None) -> Conversion:
    """Convert a transformers folder of any declared family into our model file at ``out``
    (a new file): read as ``generate`` reads it, widened to float32 (float64 where a weight
    is float64: nothing is narrowed), with its own tokenizer or the one given."""
    import torch  # deferred: imports torch

    out = check_new_output(out)
    read = read_folder(source)
    where = str(read.folder)
    config = with_recorded_settings(read.config, read.data, where)
    tokenizer, tokenizer_source = _conversion_tokenizer(read, tokenizer_path)
    _check_vocabulary(read, tokenizer, tokenizer_source)
    wide = any(t.dtype == torch.float64 for t in read.named.values())
    require_room_for(config, tokenizer.vocab_size, 8 if wide else 4, where)
    model = built_model(config, read.named, torch.float64 if wide else torch.float32, read.folder)
    declared = family(config.family)
    record = read.data.get(RECORD_KEY)
    exported = record.get("model_identity") if isinstance(record, dict) else None
    provenance = {"converted_from": "transformers", "architecture": declared.architecture, "source": where,
                  "shards": list(read.files), "tokenizer_source": tokenizer_source}
    identity, _ = write_portable_model(model, tokenizer, out, provenance=provenance)
    return Conversion(
        path=out, source=read.folder, architecture=declared.architecture, family=config.family,
        dtype="float64" if wide else "float32", tensors=len(list(model.parameters())),
        scalars=sum(p.numel() for p in model.parameters()), shards=len(read.files), model_identity=identity,
        tokenizer_identity=tokenizer.identity, tokenizer_source=tokenizer_source,
        exported_identity=exported if isinstance(exported, str) else None, tied_head=config.tied_head)


def with_recorded_settings(config: Any, data: dict[str, Any], where: str) -> Any:
    """Our export's record gives back the settings config.json has no field for: those the
    model's parts never read (a gpt2 model's rope_base) and the training-only ones, so that
    an export followed by a conversion keeps the model's identity and settings."""
    record = data.get(RECORD_KEY)
    saved = record.get("model_config") if isinstance(record, dict) else None
    if not isinstance(saved, dict):
        return config
    fields = config.__dataclass_fields__
    read = settings_in_use(saved)
    unread = {k: v for k, v in saved.items() if k in fields and (k in TRAINING_ONLY_SETTINGS or k not in read)}
    try:
        return RunConfig.from_dict({"preset": "converted", "model": {**config.declared(), **unread}}).model
    except ConfigError as err:
        raise CheckpointError(f"{where}: the model's settings are not valid here: {err}") from None


def _conversion_tokenizer(read: FolderModel, tokenizer_path: Path | str | None) -> tuple[Any, str]:
    """The tokenizer a conversion writes and where it came from: the one given, else the
    folder's own. Our byte-level tokenizer's BOS and EOS are fixed: the config must agree."""
    if tokenizer_path is not None:
        tokenizer, source = tokenizer_from(tokenizer_path)
    else:
        tokenizer = folder_tokenizer(read.folder, read.data, read.rows)
        source = str(read.folder / hf_tokenizer.TOKENIZER_FILE)
    if getattr(tokenizer, "kind", None) is None:
        for key, expected in (("bos_token_id", BOS), ("eos_token_id", EOS)):
            value = read.data.get(key)
            if value is not None and value != expected and value != [expected]:
                raise CheckpointError(f"{read.folder}: unsupported {key} {value!r} (minigpt-tui's is {expected})")
    return tokenizer, source


def _check_vocabulary(read: FolderModel, tokenizer: Any, tokenizer_source: str) -> None:
    """The config's vocabulary (where it says one) and the token table's rows both equal
    the tokenizer's ids."""
    vocab = read.data.get("vocab_size", read.rows)
    if vocab != tokenizer.vocab_size or read.rows != tokenizer.vocab_size:
        raise CheckpointError(
            f"{read.folder}: the model's vocabulary ({vocab} ids, table of {read.rows} rows) differs from the "
            f"tokenizer's ({tokenizer.vocab_size} ids from {tokenizer_source})"
        )
