"""GGUF files: read without trusting them, and opened as models whose tokens and logits
equal transformers' GGUF loading. The files are written in the test by the gguf package."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
import torch

from family_support import family_config, reference_greedy
from gguf_support import family_gguf_file, write_gguf
from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.analysis.generation import DecisionStepper
from minigpt_tui.engine.analysis.generation_rule import GenerationRule
from minigpt_tui.engine.formats.gguf_file import InvalidGGUF, read_gguf_header
from minigpt_tui.engine.models.gguf_models import open_gguf_model
from minigpt_tui.engine.analysis.lens import inspect_decision

PROMPT = "The json module: héllo wörld 🙂 — tabs\tand spaces, 12345"
QUANTS = ("F32", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
# Shapes whose rows hold whole 32-element blocks; GPT-2 at transformers' GGUF context (1024).






@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("quant", QUANTS)
def test_tokens_logits_and_greedy_ids_equal_transformers_gguf_loading(tmp_path, family, quant):
    import transformers as tr

    path = family_gguf_file(tmp_path, family, quant)
    ref = tr.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, dtype=torch.float32).eval()
    ref_tokenizer = tr.AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    ours = open_gguf_model(path)
    ids = ref_tokenizer(PROMPT).input_ids
    assert ours.tokenizer.encode_prompt(PROMPT) == ids
    with torch.no_grad():
        expected = ref(torch.tensor([ids])).logits[0]
        got = ours.model(torch.tensor([ids])).logits[0]
    # Both dequantize the same blocks to float32; what differs is float32 rounding.
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-5)
    greedy = reference_greedy(ref, ids, 5)
    chosen = [d.chosen.id for d in DecisionStepper.from_portable(ours, PROMPT, GenerationRule("greedy", max_new_tokens=5)).run()]
    assert chosen == greedy[: len(chosen)]
    assert ours.metadata["source"] == "gguf" and ours.config.family == family


def test_the_views_add_up_on_a_quantized_file(tmp_path):
    ours = open_gguf_model(family_gguf_file(tmp_path, "llama", "Q4_1"), dtype="float64")
    ids = ours.tokenizer.encode_prompt(PROMPT)
    insight = inspect_decision(ours.model, ours.tokenizer, ids, 7, lens=True, contributions=True)
    assert abs(insight.contributions[0].total - insight.contributions[0].logit) < 1e-9
    with torch.no_grad():
        assert torch.equal(insight.lens[-1].logits, ours.model(torch.tensor([ids]), last_only=True).logits[0, -1])


def test_the_header_lists_entries_and_metadata(tmp_path):
    path = family_gguf_file(tmp_path, "qwen2", "Q8_0")
    header = read_gguf_header(path)
    assert header.version == 3 and header.metadata["general.architecture"] == "qwen2"
    assert header.types["tokenizer.ggml.tokens"] == "array[string]"
    q = header.tensor("blk.0.attn_q.weight")
    assert q.type_name == "Q8_0" and q.shape == (64, 64) and q.nbytes == 64 * 64 // 32 * 34
    assert header.tensor("blk.0.attn_norm.weight").type_name == "F32"


def _mutate(path: Path, offset: int, data: bytes, out: Path) -> Path:
    raw = bytearray(path.read_bytes())
    raw[offset:offset + len(data)] = data
    out.write_bytes(bytes(raw))
    return out


def test_hostile_files_are_one_line_each(tmp_path):
    good = family_gguf_file(tmp_path, "llama", "Q8_0")
    header = read_gguf_header(good)
    size = good.stat().st_size
    cases = {
        "truncated-data": lambda out: (out.write_bytes(good.read_bytes()[: size - 100]), out)[1],
        "count-too-large": lambda out: _mutate(good, 8, struct.pack("<Q", 2**63), out),
        "bad-magic": lambda out: _mutate(good, 0, b"GGML", out),
        "bad-version": lambda out: _mutate(good, 4, struct.pack("<I", 9), out),
    }
    for violation, make in cases.items():
        bad = make(tmp_path / f"{violation}.gguf")
        with pytest.raises(InvalidGGUF) as caught:
            read_gguf_header(bad)
        assert caught.value.violation == violation and "\n" not in str(caught.value)
    # An unknown quantization type: the type field of the last tensor info.
    raw = good.read_bytes()
    last = header.tensors[-1].name.encode()
    at = raw.rindex(struct.pack("<Q", len(last)) + last) + 8 + len(last)
    dims = struct.unpack_from("<I", raw, at)[0]
    bad = _mutate(good, at + 4 + 8 * dims, struct.pack("<I", 250), tmp_path / "unknown.gguf")
    with pytest.raises(InvalidGGUF, match="GGML type 250"):
        read_gguf_header(bad)
    with pytest.raises(CheckpointError, match="unsupported GGUF architecture"):
        open_gguf_model(_mutate(good, raw.index(b"llama"), b"mamba", tmp_path / "arch.gguf"))


def test_fuzzed_headers_never_escape_as_other_errors(tmp_path):
    good = family_gguf_file(tmp_path, "gpt2", "F32")
    raw = good.read_bytes()
    header_end = read_gguf_header(good).data_start
    rng = random.Random(11)
    refused = 0
    for case in range(300):
        data = bytearray(raw[: rng.choice([header_end, header_end + 64, len(raw)])])
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(0, header_end)
            data[at:at + 8] = rng.randbytes(rng.choice([1, 4, 8]))
        path = tmp_path / f"fuzz-{case}.gguf"
        path.write_bytes(bytes(data))
        try:
            read_gguf_header(path)
        except CheckpointError as err:
            refused += 1
            assert "\n" not in str(err)
        path.unlink()
    assert refused > 100


def test_inspect_and_generate_take_a_gguf_file(tmp_path, capsys):
    import json

    from conftest import run_cli

    path = family_gguf_file(tmp_path, "qwen2", "Q5_1")
    code, out, err = run_cli(capsys, "inspect", str(path), "--json")
    assert code == 0, err
    record = json.loads(out)
    assert record["kind"] == "gguf"
    assert {e["dtype"] for e in record["entries"]} == {"F32", "Q5_1"}
    groups = record["state"]
    assert groups["tokenizer"]["tokenizer.ggml.tokens"] == {"items": 400, "type": "array[string]"}
    assert groups["architecture"]["qwen2.block_count"] == 2
    code, _, err = run_cli(capsys, "inspect", str(path), "--tensor", "blk.0.attn_q.weight", "--json")
    assert code == 0, err
    code, out, err = run_cli(capsys, "generate", "--model", str(path), "--prompt", "The json", "--max-new-tokens",
                             "2", "--greedy", "--json", "--contributions")
    assert code == 0, err
    trace = json.loads(out)
    assert trace["model"]["family"] == "qwen2" and len(trace["decisions"]) == 2
    assert trace["model"]["source"] == "gguf"


@pytest.mark.parametrize("quant", ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"])
def test_k_quants_dequantize_as_transformers_does(tmp_path, quant):
    """The gguf package writes no K-quants, so the blocks are random bytes with sane f16 scales."""
    import gguf
    import numpy as np
    from transformers.integrations.gguf.dequant import dequantize as reference

    from minigpt_tui.engine.formats.gguf_file import GGUFData

    kind = getattr(gguf.GGMLQuantizationType, quant)
    block, block_bytes = gguf.GGML_QUANT_SIZES[kind]
    rows, columns = 4, 2 * block
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, size=(rows * columns // block, block_bytes), dtype=np.uint8)
    scale_at = block_bytes - 2 if quant in ("Q3_K", "Q6_K") else 0  # where each block's f16 d sits
    raw[:, scale_at:scale_at + 2] = np.frombuffer(np.float16(0.01).tobytes(), dtype=np.uint8)
    if quant in ("Q2_K", "Q4_K", "Q5_K"):
        offset = 16 if quant == "Q2_K" else 0
        raw[:, offset:offset + 4] = np.frombuffer(np.array([0.01, 0.002], dtype=np.float16).tobytes(), np.uint8)
    packed = raw.reshape(rows, -1)
    writer = gguf.GGUFWriter(str(tmp_path / "k.gguf"), "llama")
    writer.add_tensor("blk.0.ffn_up.weight", packed, raw_shape=packed.shape, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    header = read_gguf_header(tmp_path / "k.gguf")
    assert header.tensors[0].shape == (rows, columns)
    ours = GGUFData(header).float32("blk.0.ffn_up.weight")
    expected = reference(torch.from_numpy(raw.reshape(-1).copy()), int(kind)).reshape(rows, columns)
    assert np.isfinite(ours).all()
    torch.testing.assert_close(torch.from_numpy(ours), expected, atol=1e-6, rtol=1e-6)


def test_the_generation_screen_steps_through_a_gguf_model(tmp_path):
    from textual.widgets import Input

    from tests.app_support import make_app, record_notifications, run_async, settle

    path = family_gguf_file(tmp_path, "llama", "Q8_0")

    @run_async
    async def scenario() -> None:
        app = make_app(tmp_path / "runs")
        notes = record_notifications(app)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("g")
            await settle(pilot)
            screen = pilot.app.screen
            field = screen.query_one("#model", Input)
            field.value = str(path)
            field.focus()
            await pilot.press("enter")
            await settle(pilot)
            # No BOS in this tokenizer: loaded, and the prompt field has the keyboard.
            assert screen.view is None and screen.focused is screen.query_one("#prompt", Input)
            assert any("type a prompt" in text for text, _ in notes)
            await pilot.press(*"The json", "enter")
            await settle(pilot)
            await pilot.press("n", "n")
            await settle(pilot)
            assert screen.view is not None and len(screen.view.decisions) == 2
            expected = open_gguf_model(path).tokenizer.encode_prompt("The json")
            assert [p.id for p in screen.view.prompt] == expected

    scenario()


def test_a_sentencepiece_vocabulary_encodes_as_transformers_gguf_loader_does(tmp_path):
    import transformers as tr

    from family_support import metaspace_tokenizer

    raw = metaspace_tokenizer()
    bos, eos = raw.token_to_id("<s>"), raw.token_to_id("</s>")
    torch.manual_seed(2)
    model = tr.AutoModelForCausalLM.from_config(family_config("llama", raw.get_vocab_size(), bos, eos,
                                                              hidden_size=64)).eval()
    path = write_gguf(model, raw, "llama", tmp_path / "spm.gguf", quant="Q8_0")
    ours = open_gguf_model(path)
    reference = tr.AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    rng = random.Random(8)
    texts = [PROMPT, "héllo wörld", " leading space", "日本語", "tab\tand\nnewline"]
    texts += ["".join(rng.choice("abc xyz éü日🙂\n.,") for _ in range(rng.randrange(1, 40))) for _ in range(100)]
    for text in texts:
        assert ours.tokenizer.encode_prompt(text) == reference(text).input_ids, text
    assert ours.tokenizer.encode_prompt("a")[0] == bos  # BOS first, as llama.cpp adds it
    ref = tr.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, dtype=torch.float32).eval()
    ids = reference(PROMPT).input_ids
    with torch.no_grad():
        torch.testing.assert_close(ours.model(torch.tensor([ids])).logits, ref(torch.tensor([ids])).logits,
                                   atol=1e-4, rtol=1e-5)


def test_llama3_per_frequency_rope_factors_are_refused_in_one_line(tmp_path):
    """A GGUF file of a Llama 3.1 or 3.2 keeps its rope scaling as a tensor of factors; read
    as if it were not there, every position past the short wavelengths would be wrong."""
    import numpy as np

    from gguf_support import random_family_model

    model, raw = random_family_model("llama", 0)
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    path = write_gguf(model, raw, "llama", tmp_path / "llama3.gguf",
                      extra=(("rope_freqs.weight", np.ones(head_dim // 2, dtype=np.float32)),))
    with pytest.raises(CheckpointError, match="per-frequency rope factors") as caught:
        open_gguf_model(path)
    assert "\n" not in str(caught.value)
