"""A portable model as a folder that transformers loads unchanged:
``AutoModelForCausalLM.from_pretrained(DIR)`` and ``AutoTokenizer.from_pretrained(DIR)``.

The folder holds ``config.json`` (the family's class, tied embeddings, BOS/EOS ids, dtype,
and our own record of the settings transformers has no field for), ``generation_config.json``,
``model.safetensors`` (the learned tensors under the family's names, a tied head left out
because it is the token table, the dropped alias recorded in the metadata the way
``safetensors.torch.save_model`` does), ``tokenizer.json`` with exactly our ids and merges, ``tokenizer_config.json`` and
``special_tokens_map.json``. The dtype is kept: a float64 model exports as float64.

The folder is written under a temporary name beside the target, each file flushed and
fsynced, then renamed into place: a refused or failed export leaves nothing behind.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui import __version__
from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.core.files import built_then_installed, check_new_output, work_path
from minigpt_tui.engine.core.tokenizer import BOS, EOS
from minigpt_tui.engine.formats import hf_tokenizer
from minigpt_tui.engine.formats.hf_families import model_config
from minigpt_tui.engine.formats.hf_family_export import (
    dropped_head,
    family_config,
    family_tensors,
    unexpressed_setting,
)
from minigpt_tui.engine.formats.portable import without_tokenizer
from minigpt_tui.engine.formats.safetensors_format import dtype_name
from minigpt_tui.engine.formats.safetensors_write import (
    atomic_write_bytes,
    write_safetensors,
)

if TYPE_CHECKING:
    from minigpt_tui.engine.models.model_file import PortableModel

CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
FORMATS = ("hf",)
# Our own record inside config.json: the settings transformers has no field for.
RECORD_KEY = "minigpt_tui"
TORCH_DTYPE_NAMES = {"F64": "float64", "F32": "float32"}


@dataclass(frozen=True)
class HFExport:
    path: Path
    architecture: str
    dtype: str
    tensors: int
    scalars: int
    files: tuple[str, ...]
    model_identity: str
    tokenizer_identity: str

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "format": "hf",
            "architecture": self.architecture,
            "dtype": self.dtype,
            "tensors": self.tensors,
            "scalars": self.scalars,
            "files": list(self.files),
            "model_identity": self.model_identity,
            "tokenizer_identity": self.tokenizer_identity,
        }


def _json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def prepare_output_folder(out: Path) -> None:
    """Refuse a target that exists (an empty folder and a dangling link too) or lies inside
    a checkpoint folder: an export never overwrites."""
    check_new_output(out)


def export_record(config: Any, identity: str, tokenizer_identity: str) -> dict[str, Any]:
    """What our export records beside transformers' fields: every setting, both identities."""
    return {
        "format_version": 1,
        "producer": f"minigpt-tui {__version__}",
        "model_config": config.declared(),
        "model_identity": identity,
        "tokenizer_identity": tokenizer_identity,
    }


def _checked_config(portable: "PortableModel", bos: int | None, eos: list[int]) -> dict[str, Any]:
    """config.json of the family's class for the model, refused in one line when the model
    sets a part that class has no setting for (the file would read back as another model)."""
    model, tokenizer = portable.model, portable.tokenizer
    config = model.config
    dtype = dtype_name(model.dtype)
    if dtype not in TORCH_DTYPE_NAMES:
        raise CheckpointError(f"{portable.path}: learned tensors of dtype {dtype} cannot be exported")
    hf_config = family_config(config, tokenizer.vocab_size, TORCH_DTYPE_NAMES[dtype], bos, eos)
    field = unexpressed_setting(config, model_config(hf_config, str(portable.path)))
    if field is not None:
        raise CheckpointError(f"{portable.path}: this model's {field} ({getattr(config, field)!r}) has no "
                              f"{hf_config['architectures'][0]} form; it cannot be exported to transformers")
    return hf_config


def hf_folder_contents(portable: "PortableModel") -> tuple[dict[str, Any], list[tuple[str, Any]], dict[str, bytes]]:
    """(config, tensors, other files by name) of the transformers folder for a model."""
    tokenizer = portable.tokenizer
    if tokenizer is None:
        raise without_tokenizer(portable.path, "be exported to transformers")
    if getattr(tokenizer, "kind", "") == "tokenizers":  # a model from elsewhere, with its own tokenizer.json
        return _family_folder_contents(portable)
    if getattr(tokenizer, "kind", None) is not None:
        raise CheckpointError(f"{portable.path}: its tokenizer ({tokenizer.kind}) cannot be written as a tokenizer.json")
    config = portable.model.config
    hf_config = _checked_config(portable, BOS, [EOS])
    hf_config.update(pad_token_id=None, initializer_range=config.init_std, torch_dtype=hf_config["dtype"])
    hf_config[RECORD_KEY] = export_record(config, portable.identity, tokenizer.identity)
    tensors = family_tensors({name: p.detach() for name, p in portable.model.named_parameters()}, config)
    files = {
        hf_tokenizer.TOKENIZER_FILE: _json_bytes(hf_tokenizer.tokenizer_json(tokenizer)),
        hf_tokenizer.TOKENIZER_CONFIG_FILE: _json_bytes(hf_tokenizer.tokenizer_config(config.context)),
        hf_tokenizer.SPECIAL_TOKENS_FILE: _json_bytes(hf_tokenizer.special_tokens_map()),
        GENERATION_CONFIG_FILE: _json_bytes({
            "bos_token_id": hf_config["bos_token_id"],
            "eos_token_id": hf_config["eos_token_id"],
            # Our rule: BOS is never chosen; padding (batched prompts) uses EOS.
            "pad_token_id": hf_config["eos_token_id"],
            "suppress_tokens": [hf_config["bos_token_id"]],
            "do_sample": False,
        }),
        CONFIG_FILE: _json_bytes(hf_config),
    }
    return hf_config, tensors, files


def _family_folder_contents(portable: "PortableModel") -> tuple[dict[str, Any], list[tuple[str, Any]], dict[str, bytes]]:
    """The folder of the family's own class, with the model's own tokenizer.json."""
    model, tokenizer = portable.model, portable.tokenizer
    config = model.config
    eos = list(tokenizer.eos_ids)
    hf_config = _checked_config(portable, tokenizer.bos_id, eos)
    tensors = family_tensors({name: p.detach() for name, p in model.named_parameters()}, config)

    def token(token_id: int | None) -> str | None:
        return None if token_id is None else tokenizer.piece_text(token_id)

    files = {
        hf_tokenizer.TOKENIZER_FILE: tokenizer.text.encode("utf-8"),
        hf_tokenizer.TOKENIZER_CONFIG_FILE: _json_bytes({
            "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": token(tokenizer.bos_id),
            "eos_token": token(eos[0]) if eos else None, "clean_up_tokenization_spaces": False,
            "model_max_length": config.context}),
        GENERATION_CONFIG_FILE: _json_bytes({"bos_token_id": tokenizer.bos_id, "eos_token_id": hf_config["eos_token_id"],
                                             "do_sample": False}),
        CONFIG_FILE: _json_bytes(hf_config),
    }
    return hf_config, tensors, files


def export_hf(portable: "PortableModel", out: Path | str) -> HFExport:
    """Write the transformers folder for ``portable`` at ``out`` (which must not hold anything)."""
    out = Path(out).expanduser()
    prepare_output_folder(out)
    hf_config, tensors, files = hf_folder_contents(portable)
    # The dropped head, recorded as safetensors.torch.save_model records a dropped alias.
    metadata = {"format": "pt", **dropped_head(portable.model.config)}
    with built_then_installed(work_path(out), out, f"cannot write {out}", error=CheckpointError) as work:
        write_safetensors(work / WEIGHTS_FILE, tensors, metadata, atomic=False)
        for name, data in files.items():
            atomic_write_bytes(work / name, data, atomic=False)
    return HFExport(
        path=out,
        architecture=hf_config["architectures"][0],
        dtype=hf_config["dtype"],
        tensors=len(tensors),
        scalars=sum(t.numel() for _, t in tensors),
        files=tuple(sorted([WEIGHTS_FILE, *files])),
        model_identity=portable.identity,
        tokenizer_identity=portable.tokenizer.identity if portable.tokenizer else "",
    )
