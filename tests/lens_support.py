"""Models with large, varied logits for lens, contribution, contrast and generation tests,
and the byte-level ids they read."""

from __future__ import annotations

import torch

from minigpt_tui.engine.core.config import ModelConfig
from minigpt_tui.engine.models.model import MiniGPT
from minigpt_tui.engine.core.tokenizer import BYTE_OFFSET, ByteBPETokenizer

BYTES_ONLY = ByteBPETokenizer()
FAMILY_SHAPES = {
    # llama with grouped kv heads (two query heads per kv head), gpt2 with its biases
    "llama": ModelConfig(family="llama", width=16, heads=4, kv_heads=2, ffn=24, layers=3, context=32),
    "gpt2": ModelConfig(family="gpt2", width=16, heads=4, kv_heads=4, ffn=24, layers=3, context=32),
}


def varied_model(family: str, seed: int = 3, dtype: torch.dtype = torch.float64) -> MiniGPT:
    """A model (float64 unless ``dtype``) whose norms and biases are not at their initial
    values and whose logits span several units, so that a sum that misses a part shows."""
    model = MiniGPT(FAMILY_SHAPES[family], BYTES_ONLY.vocab_size, dtype)
    model.initialize(seed)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float64).to(dtype)
            if "norm" in name or name.endswith("bias"):
                param.add_(0.5 * noise)
            else:
                param.mul_(40.0)
    model.eval()
    return model


def random_model(config: ModelConfig, *, seed: int = 3, scale: float = 10.0, vocab: int = BYTES_ONLY.vocab_size,
                 dtype: torch.dtype = torch.float64) -> MiniGPT:
    """A model at its initial values with every weight but the norms and biases times
    ``scale``: a varied continuation rather than one id repeated."""
    model = MiniGPT(config, vocab, dtype)
    model.initialize(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not name.endswith(("norm.weight", ".bias")):
                param.mul_(scale)
    return model


def byte_id(char: str) -> int:
    """The id of a one-byte character in ``BYTES_ONLY``."""
    return ord(char) + BYTE_OFFSET
