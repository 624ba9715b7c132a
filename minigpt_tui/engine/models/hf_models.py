"""Open a transformers model folder for generation and every view, without converting it.

The folder's ``config.json`` sets the model's parts (:mod:`hf_families`); its weights come
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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.errors import CheckpointError, TokenizerError
from minigpt_tui.engine.core.files import check_new_output
from minigpt_tui.engine.core.library_tokenizer import read_library_tokenizer
from minigpt_tui.engine.formats import hf_layout, hf_tokenizer
from minigpt_tui.engine.formats.foreign_pickle import pickle_tensors, require_weights
from minigpt_tui.engine.formats.hf_families import architecture_names, model_config, our_tensors
from minigpt_tui.engine.formats.hf_import import (
    PICKLED_WEIGHTS,
    Conversion,
    folder_tokenizer,
    plan_conversion,
    read_hf_folder,
    read_json_file,
    require_room_for,
    tokenizer_from,
)
from minigpt_tui.engine.formats.portable import write_portable_model
from minigpt_tui.engine.formats.safetensors_read import (
    LoadedFile,
    load_file,
    opening_errors,
    tensor_from_bytes,
)

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.models.model_file import PortableModel

DTYPES = ("float32", "float64")
GENERATION_CONFIG = "generation_config.json"
WIDENED = ("F16", "BF16", "F32", "F64")


def _token_ids(value: Any, where: str, key: str) -> tuple[int, ...]:
    if value is None:
        return ()
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise CheckpointError(f"{where}: {key} must be a token id or a list of them, got {value!r}")
    return tuple(values)


def special_ids(folder: Path, config: dict[str, Any]) -> tuple[int | None, tuple[int, ...]]:
    """(BOS, EOS ids): generation_config.json first, then config.json."""
    where = str(folder / "config.json")
    bos = _token_ids(config.get("bos_token_id"), where, "bos_token_id")
    eos = _token_ids(config.get("eos_token_id"), where, "eos_token_id")
    if (folder / GENERATION_CONFIG).is_file():
        generation = read_json_file(folder / GENERATION_CONFIG, GENERATION_CONFIG)
        if isinstance(generation, dict):
            where = str(folder / GENERATION_CONFIG)
            bos = _token_ids(generation.get("bos_token_id"), where, "bos_token_id") or bos
            eos = _token_ids(generation.get("eos_token_id"), where, "eos_token_id") or eos
    return (bos[0] if bos else None), eos


def _mapped(path: Path) -> memoryview:
    """The file mapped copy-on-write: tensors over it are writable, and nothing is read
    until a page is used."""
    with path.open("rb") as fh:
        return memoryview(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY))


def _weights(folder: Path) -> tuple[dict[str, "torch.Tensor"], list[str]]:
    """Every tensor in the folder's weights by name (over the mapped files), and what
    identifies each file: its name, size and validated header."""

    pickled = next((folder / n for n in PICKLED_WEIGHTS if (folder / n).is_file()), None)
    safetensors = (folder / "model.safetensors").is_file() or (folder / "model.safetensors.index.json").is_file()
    if pickled is not None and not safetensors:
        if pickled.name.endswith(".index.json"):
            raise CheckpointError(f"{folder}: sharded pickled weights are not supported; save the model as safetensors")
        tensors = pickle_tensors(pickled)
        require_weights(pickled, tensors)
        return tensors, [f"{pickled.name}:{pickled.stat().st_size}"]
    read = read_hf_folder(folder)
    tensors: dict[str, torch.Tensor] = {}
    parts = []
    for shard in read.shards:
        parts.append(_shard_tensors(shard, read.headers[shard.name], tensors))
    return tensors, parts


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
    for name, param in expected.items():
        tensor = named.get(name)
        if tensor is None:
            raise CheckpointError(f"{where}: the weights have no tensor for {name}")
        if tuple(tensor.shape) != tuple(param.shape):
            raise CheckpointError(f"{where}: tensor for {name} has shape {list(tensor.shape)}, "
                                  f"the config makes it {list(param.shape)}")
        state[name] = tensor.to(dtype)  # a transposed view stays a view: matmul reads it as it is
    model.load_state_dict(state, assign=True, strict=True)


def _tokenizer(folder: Path, config: dict[str, Any], vocab_size: int) -> Any:
    path = folder / hf_tokenizer.TOKENIZER_FILE
    if not path.is_file():
        raise CheckpointError(f"{folder}: no {hf_tokenizer.TOKENIZER_FILE}: a model without its tokenizer "
                              "cannot encode a prompt")
    try:
        if isinstance(config.get("minigpt_tui"), dict):  # our own export: our tokenizer, exactly
            return hf_tokenizer.read_tokenizer_json(path)
        bos, eos = special_ids(folder, config)
        return read_library_tokenizer(path, vocab_size, bos_id=bos, eos_ids=eos)
    except TokenizerError as err:
        raise CheckpointError(str(err)) from None


def open_hf_model(path: Path | str, *, dtype: str = "float32") -> "PortableModel":
    """A transformers folder as a ready model: built from its config, its weights assigned."""
    from minigpt_tui.engine.models.model_file import (  # deferred: imports torch
        PortableModel,
    )

    torch_dtype = compute_dtype(dtype)
    folder = Path(path).expanduser()
    config_path = folder / "config.json"
    data = read_json_file(config_path, "config.json: not a transformers model folder")
    if not isinstance(data, dict):
        raise CheckpointError(f"{config_path}: not a JSON object")
    config = model_config(data, str(config_path))
    tensors, digests = _weights(folder)
    try:
        named = our_tensors(tensors, config)
    except CheckpointError as err:
        raise CheckpointError(f"{folder}: {err}") from None
    vocab_size = int(named["token_embedding.weight"].shape[0])
    tokenizer = _tokenizer(folder, data, vocab_size)
    model = built_model(config, named, torch_dtype, folder)
    if tokenizer.vocab_size != vocab_size:
        raise CheckpointError(f"{folder}: the tokenizer has {tokenizer.vocab_size} ids, the model {vocab_size} rows")
    # The identity of a folder: its config and every weights file's name, size and header
    # (tensor names, dtypes, shapes, offsets). Hashing the bytes too would read every page
    # of the weights before the first decision.
    digest = hashlib.sha256(b"transformers-folder\0" + config_path.read_bytes())
    for part in digests:
        digest.update(len(part).to_bytes(8, "little") + part.encode())
    metadata = {"source": "transformers", "architecture": (architecture_names(data) or [None])[0],
                "family": config.family, "dtype": dtype}
    return PortableModel(model, tokenizer, config, digest.hexdigest(), folder, metadata)


def convert_hf(source: Path | str, out: Path | str, *, tokenizer_path: Path | str | None = None) -> Conversion:
    """Convert a transformers folder into our portable model file at ``out`` (new file)."""
    import torch  # deferred: imports torch

    from minigpt_tui.engine.models.model import MiniGPT  # deferred: imports torch

    out = check_new_output(out)
    folder = read_hf_folder(source)
    where = str(folder.path)
    config, names, dtype, head_stored = plan_conversion(folder)
    tokenizer, tokenizer_source = _conversion_tokenizer(folder, tokenizer_path)
    family = config.family
    _check_vocabulary(folder, names, family, tokenizer, tokenizer_source)
    torch_dtype = torch.float64 if dtype == "F64" else torch.float32
    require_room_for(config, tokenizer.vocab_size, 8 if dtype == "F64" else 4, where)
    model = MiniGPT(config, tokenizer.vocab_size, torch_dtype)
    loaded: dict[str, LoadedFile] = {}

    def tensor(name: str) -> "torch.Tensor":
        stored = names[name]
        shard = folder.locations[stored]
        if shard not in loaded:
            loaded[shard] = load_file(folder.path / shard)
        return loaded[shard].tensor(stored)

    ours = hf_layout.from_hf(tensor, config)
    if head_stored:
        _check_tied_head(tensor(hf_layout.HEAD_NAME), ours["token_embedding.weight"], where)
    _copy_weights(model, ours, where)
    model.eval()
    record = folder.config.get(hf_layout.RECORD_KEY)
    exported = record.get("model_identity") if isinstance(record, dict) else None
    provenance = {
        "converted_from": "transformers",
        "architecture": hf_layout.ARCHITECTURES[family],
        "source": str(folder.path),
        "shards": [p.name for p in folder.shards],
        "tokenizer_source": tokenizer_source,
    }
    identity, _ = write_portable_model(model, tokenizer, out, provenance=provenance)
    return Conversion(
        path=out,
        source=folder.path,
        architecture=hf_layout.ARCHITECTURES[family],
        family=family,
        dtype=hf_layout.TORCH_DTYPE_NAMES[dtype],
        tensors=len(list(model.parameters())),
        scalars=sum(p.numel() for p in model.parameters()),
        shards=len(folder.shards),
        model_identity=identity,
        tokenizer_identity=tokenizer.identity,
        tokenizer_source=tokenizer_source,
        exported_identity=exported if isinstance(exported, str) else None,
    )


def _conversion_tokenizer(folder: Any, tokenizer_path: Path | str | None) -> tuple[Any, str]:
    """The tokenizer a conversion writes and where it came from: the one given, else the
    folder's own."""
    if tokenizer_path is not None:
        return tokenizer_from(tokenizer_path)
    return folder_tokenizer(folder.path), str(folder.path / hf_tokenizer.TOKENIZER_FILE)


def _check_vocabulary(folder: Any, names: dict[str, str], family: str, tokenizer: Any,
                      tokenizer_source: str) -> None:
    """The config's vocabulary and the token table's rows both equal the tokenizer's ids."""
    vocab = folder.config.get("vocab_size")
    table_entry = folder.headers[folder.locations[names[hf_layout.table_name(family)]]].entry(
        names[hf_layout.table_name(family)])
    rows = table_entry.shape[0] if table_entry.shape else None
    if vocab != tokenizer.vocab_size or rows != tokenizer.vocab_size:
        raise CheckpointError(
            f"{folder.path}: the model's vocabulary ({vocab} ids, table of {rows} rows) differs from the "
            f"tokenizer's ({tokenizer.vocab_size} ids from {tokenizer_source})"
        )


def _check_tied_head(head: torch.Tensor, table: torch.Tensor, where: str) -> None:
    """A stored output head must be the token table itself (we convert tied heads only)."""
    import torch  # deferred: imports torch

    if head.shape != table.shape or head.dtype != table.dtype or not torch.equal(head, table):
        raise CheckpointError(
            f"{where}: unsupported untied output head (lm_head.weight differs from the token table)"
        )


def _copy_weights(model: Any, ours: dict[str, torch.Tensor], where: str) -> None:
    """Copy each converted tensor into the model's parameter, shapes checked name by name."""
    import torch  # deferred: imports torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            value = ours[name]
            if tuple(value.shape) != tuple(param.shape):
                raise CheckpointError(
                    f"{where}: tensor for '{name}' has shape {list(value.shape)}, the config needs {list(param.shape)}"
                )
            param.copy_(value)
