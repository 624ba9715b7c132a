"""The size of a GGUF export against the size llama.cpp's tensor types give, for each --quant.

The model is a SmolLM2-135M shape (llama: 30 layers, width 576, 9 heads, 3 kv heads, 49,152
ids, tied head) with random weights, made as a transformers folder by bench_models'
``make_models``. Each ``export_gguf`` file's size is compared with the size computed from
the types llama.cpp gives the same tensors (written out below, not taken from the code under
test): the header as our file has it, then each tensor's elements / block size * bytes per
block from ``gguf.GGML_QUANT_SIZES``, padded to the 32-byte alignment. The target is within
5 %. The line "token table F32" is the size a q8_0 export had before it quantized
``token_embd.weight``, computed the same way.

    .venv/bin/python benchmarks/bench_gguf_export.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ALIGNMENT = 32
TARGET = 0.05


def llama_cpp_type(name: str, dims: int, quant: str) -> str:
    """llama.cpp's choice for a llama model whose rows are whole blocks (convert_hf_to_gguf
    and llama-quantize): 1-D tensors and norms F32, every other weight the type."""
    if quant == "f32" or dims < 2 or name.endswith("_norm.weight"):
        return "F32"
    return quant.upper()


def padded(elements: int, type_name: str) -> int:
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]]
    return -(-(elements // block * size) // ALIGNMENT) * ALIGNMENT


def main() -> None:
    import torch

    from bench_models import make_models
    from minigpt_tui.engine.formats.gguf_file import read_gguf_header
    from minigpt_tui.engine.session.opening import open_model
    from minigpt_tui.engine.models.gguf_export import export_gguf

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = make_models(root, ("smollm2-135M",))["smollm2-135M"]
        portable = open_model(str(folder), root)
        print(f"smollm2-135M shape, {sum(p.numel() for p in portable.model.parameters()):,} parameters")
        for quant in ("q8_0", "f16", "f32"):
            out = root / f"smollm2-{quant}.gguf"
            start = time.perf_counter()
            result = export_gguf(portable, out, quant)
            seconds = time.perf_counter() - start
            header = read_gguf_header(out)
            expected = header.data_start + sum(padded(t.elements, llama_cpp_type(t.name, len(t.shape), quant))
                                               for t in header.tensors)
            table = header.tensor("token_embd.weight").elements
            wide = expected - padded(table, llama_cpp_type("token_embd.weight", 2, quant)) + padded(table, "F32")
            off = result.bytes / expected - 1
            types = ", ".join(f"{count} {name}" for name, count in result.types)
            print(f"  {quant:<5} file {result.bytes:>12,} B  llama.cpp's types {expected:>12,} B  "
                  f"{off:+.3%} ({'within' if abs(off) <= TARGET else 'OUTSIDE'} 5 %)  "
                  f"header {header.data_start:,} B  [{types}]  export {seconds:.1f} s")
            if quant == "q8_0":  # f16 already wrote the table as F16
                print(f"        token table F32 (before): {wide:,} B = {wide / expected:.3f}x llama.cpp's")
            os.unlink(out)


if __name__ == "__main__":
    main()
