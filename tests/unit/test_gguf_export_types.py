"""`export --format gguf`: each tensor in the type llama.cpp gives it for the `--quant`
(the token table and an untied head included), the file's size what those types make, and
the file read back by our reader and transformers' GGUF loader with the source's logits.

The expected types are written out here per tensor, from llama.cpp's rules
(``convert_hf_to_gguf.py`` and ``llama-quantize``'s ``tensor_allows_quantization``), not
computed by the code under test."""

from __future__ import annotations

import json

import gguf
import pytest
import torch

from conftest import run_cli
from family_support import make_family_folder

from minigpt_tui.engine.formats.gguf_file import read_gguf_header
from minigpt_tui.engine.session.opening import open_model
from minigpt_tui.engine.models.gguf_export import export_gguf, tensor_type

PROMPT = "The json module: héllo wörld 🙂"
ALIGNMENT = 32  # general.alignment when the file does not set it
# Per tensor (the part after blk.N.), its type in a q8_0 file of the test's small models:
# rows of 32 and 128 are whole Q8_0 blocks; llama's and qwen2's ffn_down rows are 48 long,
# so they fall back to F16 as llama.cpp's converter does.
Q8_0_TYPES = {
    "llama": {"token_embd.weight": "Q8_0", "output_norm.weight": "F32", "attn_norm.weight": "F32",
              "ffn_norm.weight": "F32", "attn_q.weight": "Q8_0", "attn_k.weight": "Q8_0", "attn_v.weight": "Q8_0",
              "attn_output.weight": "Q8_0", "ffn_gate.weight": "Q8_0", "ffn_up.weight": "Q8_0",
              "ffn_down.weight": "F16"},
    "qwen2": {"token_embd.weight": "Q8_0", "output.weight": "Q8_0", "output_norm.weight": "F32",
              "attn_norm.weight": "F32", "ffn_norm.weight": "F32", "attn_q.weight": "Q8_0", "attn_k.weight": "Q8_0",
              "attn_v.weight": "Q8_0", "attn_q.bias": "F32", "attn_k.bias": "F32", "attn_v.bias": "F32",
              "attn_output.weight": "Q8_0", "ffn_gate.weight": "Q8_0", "ffn_up.weight": "Q8_0",
              "ffn_down.weight": "F16"},
    "gpt2": {"token_embd.weight": "Q8_0", "position_embd.weight": "F32", "output_norm.weight": "F32",
             "output_norm.bias": "F32", "attn_norm.weight": "F32", "attn_norm.bias": "F32", "ffn_norm.weight": "F32",
             "ffn_norm.bias": "F32", "attn_qkv.weight": "Q8_0", "attn_qkv.bias": "F32", "attn_output.weight": "Q8_0",
             "attn_output.bias": "F32", "ffn_up.weight": "Q8_0", "ffn_up.bias": "F32", "ffn_down.weight": "Q8_0",
             "ffn_down.bias": "F32"},
}


def expected_type(family: str, name: str, quant: str) -> str:
    """f16 puts F16 where q8_0 puts Q8_0 (its blocks are one value, so no fallback); f32 is all F32."""
    q8 = Q8_0_TYPES[family][name.split(".", 2)[2] if name.startswith("blk.") else name]
    return {"f32": "F32", "f16": "F16" if q8 != "F32" else "F32", "q8_0": q8}[quant]


def padded_bytes(elements: int, type_name: str) -> int:
    """The bytes a tensor takes in the data section: its blocks, padded to the alignment."""
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]]
    return -(-(elements // block * size) // ALIGNMENT) * ALIGNMENT


def _folder(tmp_path, family: str):
    """llama tied as SmolLM2 is, qwen2 untied; transformers reads a GGUF GPT-2 as 1024
    positions whatever the file says."""
    extra = {"llama": {"tie_word_embeddings": True}, "qwen2": {"tie_word_embeddings": False},
             "gpt2": {"n_positions": 1024}}[family]
    return make_family_folder(family, tmp_path / family, **extra)


def test_the_rules_llama_cpp_applies():
    assert tensor_type("token_embd.weight", (49152, 576), "q8_0").name == "Q8_0"
    assert tensor_type("output.weight", (49152, 576), "q8_0").name == "Q8_0"
    assert tensor_type("token_embd.weight", (49152, 576), "f16").name == "F16"
    assert tensor_type("position_embd.weight", (1024, 768), "q8_0").name == "F32"
    assert tensor_type("blk.3.attn_norm.weight", (576,), "q8_0").name == "F32"
    assert tensor_type("blk.3.attn_qkv.bias", (2304,), "f16").name == "F32"
    assert tensor_type("blk.3.ffn_down.weight", (576, 1536), "q8_0").name == "Q8_0"
    assert tensor_type("blk.3.ffn_down.weight", (576, 1540), "q8_0").name == "F16"  # not whole blocks
    assert tensor_type("blk.3.ffn_down.weight", (576, 1540), "f16").name == "F16"
    assert {tensor_type(n, (64, 64), "f32").name for n in ("token_embd.weight", "blk.0.attn_q.weight")} == {"F32"}


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("quant", ["f32", "f16", "q8_0"])
def test_each_tensor_has_llama_cpp_type_and_the_size_follows(tmp_path, family, quant):
    source = open_model(str(_folder(tmp_path, family)), tmp_path)
    result = export_gguf(source, tmp_path / "model.gguf", quant)
    header = read_gguf_header(result.path)
    got = {t.name: t.type_name for t in header.tensors}
    assert got == {name: expected_type(family, name, quant) for name in got}
    assert ("output.weight" in got) == (family == "qwen2")  # only qwen2's head is untied here
    counts: dict[str, int] = {}
    for kind in got.values():
        counts[kind] = counts.get(kind, 0) + 1
    assert dict(result.types) == counts
    assert header.metadata["general.file_type"] == {"f32": 0, "f16": 1, "q8_0": 7}[quant]

    # The size from the types: the header, then each tensor's blocks padded to the alignment.
    expected = header.data_start + sum(padded_bytes(t.elements, t.type_name) for t in header.tensors)
    assert result.bytes == result.path.stat().st_size
    assert abs(result.bytes - expected) <= 0.05 * expected, (result.bytes, expected)
    assert result.bytes == expected  # the gguf writer pads exactly so


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_a_q8_0_export_reads_back_here_and_in_transformers_with_the_source_logits(tmp_path, family):
    import transformers as tr

    source = open_model(str(_folder(tmp_path, family)), tmp_path)
    out = export_gguf(source, tmp_path / "model.gguf", "q8_0").path
    back = open_model(str(out), tmp_path)
    theirs = tr.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=out.name, dtype=torch.float32).eval()
    ids = torch.tensor([source.tokenizer.encode_prompt(PROMPT)])
    assert back.tokenizer.encode_prompt(PROMPT) == ids[0].tolist()
    with torch.no_grad():
        original, read, loaded = (m(ids).logits[0] for m in (source.model, back.model, theirs))
    # Q8_0 rounds each weight to 1/127 of its block's largest; through two random blocks the
    # logits move by up to about a tenth of their scale (measured 0.11 for llama).
    assert float((read - original).abs().max()) < 0.2 * float(original.abs().max())
    # Both readers dequantize the same blocks to float32; what differs is float32 rounding.
    torch.testing.assert_close(read, loaded, atol=1e-4, rtol=1e-5)


def test_the_command_names_the_types(tmp_path, capsys):
    folder = _folder(tmp_path, "llama")
    capsys.readouterr()  # what transformers printed while saving
    code, out, err = run_cli(capsys, "export", "--model", str(folder), "--format", "gguf", "--quant", "q8_0",
                             "--out", str(tmp_path / "a.gguf"), "--json")
    assert code == 0, err
    assert json.loads(out)["types"] == {"Q8_0": 13, "F32": 5, "F16": 2}
    code, out, err = run_cli(capsys, "export", "--model", str(folder), "--format", "gguf", "--quant", "q8_0",
                             "--out", str(tmp_path / "b.gguf"))
    assert code == 0, err
    assert "20 tensors (13 Q8_0, 5 F32, 2 F16)" in out
