"""Q8_0 tensors are read in one vectorized product instead of gguf's row-group dequantizer:
the values must be the same float32 bits, for every scale a float16 can hold (zeros,
subnormals, infinities and NaN included)."""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType, quants

from minigpt_tui.engine.formats.gguf_file import q8_0_values


def test_q8_0_values_equal_ggufs_dequantizer_bit_for_bit():
    generator = np.random.default_rng(7)
    blocks = generator.integers(0, 256, size=(4096, 34), dtype=np.uint8)
    scales = np.array([0.0, -0.0, 6e-8, 1e-5, 0.5, 65504.0, np.inf, -np.inf, np.nan], dtype=np.float16)
    blocks[: len(scales), :2] = scales.view(np.uint8).reshape(-1, 2)
    rows = blocks.reshape(64, -1)  # 64 rows of 64 blocks, as a tensor's rows are stored
    ours = q8_0_values(rows.reshape(-1)).reshape(64, -1)
    with np.errstate(invalid="ignore"):  # an infinite scale times a zero quant
        theirs = quants.dequantize(rows, GGMLQuantizationType.Q8_0)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape == (64, 64 * 32)
    assert np.array_equal(ours.view(np.uint32), theirs.astype(np.float32).view(np.uint32))
