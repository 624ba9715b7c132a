"""What the GGUF architectures share: llama.cpp's names for the tensors every one of them
holds, and its q/k row order for rotary heads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.core.config import ModelConfig
    from minigpt_tui.engine.families.declaration import Getter, Tensors

# (ours, llama.cpp's) where a tensor moves unchanged.
GLOBAL_NAMES = (("token_embedding.weight", "token_embd.weight"), ("final_norm.weight", "output_norm.weight"))
BLOCK_NAMES = (("attn_norm", "attn_norm"), ("ffn_norm", "ffn_norm"), ("attn.o_proj", "attn_output"),
               ("ffn.up_proj", "ffn_up"), ("ffn.down_proj", "ffn_down"))  # weight (and, with biases, bias)
UNTIED_HEAD = ("lm_head.weight", "output.weight")


def shared_from(get: "Getter", config: "ModelConfig") -> "Tensors":
    """The token table, the final norm's weight and an untied head, under our names."""
    out = {ours: get(theirs) for ours, theirs in GLOBAL_NAMES}
    if not config.tied_head:
        out[UNTIED_HEAD[0]] = get(UNTIED_HEAD[1])
    return out


def shared_to(ours: Mapping[str, "torch.Tensor"], config: "ModelConfig") -> "Tensors":
    """The token table, the final norm's weight and an untied head, under llama.cpp's names."""
    out = {theirs: ours[mine] for mine, theirs in GLOBAL_NAMES}
    if not config.tied_head:
        out[UNTIED_HEAD[1]] = ours[UNTIED_HEAD[0]]
    return out


def interleaved(rows: "torch.Tensor", heads: int) -> "torch.Tensor":
    """Rotate-half q/k rows into llama.cpp's order (each head's pairs interleaved)."""
    return rows.reshape(heads, 2, rows.shape[0] // heads // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def rotate_half(rows: "torch.Tensor", heads: int) -> "torch.Tensor":
    """llama.cpp's q/k row order (pairs interleaved per head) back to rotate-half order."""
    half = rows.shape[0] // heads // 2
    return rows.reshape(heads, half, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)
