"""Round four, the app's part on the command line: ``inspect --tensor`` of a 1 GiB tensor
(its statistics are read in bounded pieces, never whole and then copied as float64), in a
safetensors file and in a transformers folder, and of a tensor whose bytes are cut short."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from attack_cases import Case

SIDE = 16_384  # an F32 [SIDE, SIDE] tensor: 1 GiB


def _sparse_tensor(path: Path, *, cut: int = 0) -> Path:
    """A safetensors file declaring one 1 GiB F32 tensor whose bytes are a hole in a sparse
    file (no disk blocks); ``cut`` bytes short of what its header declares."""
    nbytes = SIDE * SIDE * 4
    header = json.dumps({"big": {"dtype": "F32", "shape": [SIDE, SIDE], "data_offsets": [0, nbytes]}}).encode()
    header += b" " * (-len(header) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header)
        fh.truncate(8 + len(header) + nbytes - cut)
    return path


def _hf_folder(root: Path) -> Path:
    folder = root / "hf-big"
    _sparse_tensor(folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    return folder


def cases() -> list[Case]:
    return [
        Case("r4 app: inspect --tensor of a 1 GiB tensor",
             lambda r: ["inspect", str(_sparse_tensor(r / "big.safetensors")), "--tensor", "big"]),
        Case("r4 app: inspect --tensor --json of a 1 GiB tensor",
             lambda r: ["inspect", str(_sparse_tensor(r / "big.safetensors")), "--tensor", "big", "--json"]),
        Case("r4 app: inspect --tensor of a 1 GiB tensor cut short",
             lambda r: ["inspect", str(_sparse_tensor(r / "cut.safetensors", cut=4096)), "--tensor", "big"]),
        Case("r4 app: inspect --tensor of a 1 GiB tensor in a transformers folder",
             lambda r: ["inspect", str(_hf_folder(r)), "--tensor", "big"]),
    ]
