"""GGUF files, round four: metadata of the wrong type or value, tensors the metadata does
not describe, tensor types without a dequantizer and plain integer / float64 arrays, and
``inspect --verify`` / ``--compare`` of a GGUF file. Each file is a tiny llama written in
the test with the gguf package's own writer."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import gguf
import numpy as np
import pytest

from conftest import run_cli

from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.formats.gguf_file import GGUFData, read_gguf_header
from minigpt_tui.engine.formats.gguf_inspect import read_gguf_tensor
from minigpt_tui.engine.models.gguf_models import open_gguf_model

V = gguf.GGUFValueType
Q = gguf.GGMLQuantizationType
TOKENS = [chr(c) for c in range(ord("a"), ord("a") + 15)] + ["ab"]


def _metadata(width: int, ffn: int, layers: int) -> dict[str, tuple[object, object]]:
    return {"llama.block_count": (layers, V.UINT32), "llama.context_length": (16, V.UINT32),
            "llama.embedding_length": (width, V.UINT32), "llama.feed_forward_length": (ffn, V.UINT32),
            "llama.attention.head_count": (2, V.UINT32), "llama.attention.head_count_kv": (2, V.UINT32),
            "llama.attention.layer_norm_rms_epsilon": (1e-6, V.FLOAT32), "llama.rope.freq_base": (10000.0, V.FLOAT32),
            "tokenizer.ggml.model": ("gpt2", V.STRING), "tokenizer.ggml.pre": ("default", V.STRING),
            "tokenizer.ggml.tokens": (TOKENS, V.ARRAY), "tokenizer.ggml.merges": (["a b"], V.ARRAY),
            "tokenizer.ggml.token_type": ([1] * len(TOKENS), V.ARRAY)}


def _llama_arrays(width: int, ffn: int, layers: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    out = {"token_embd.weight": normal(len(TOKENS), width), "output_norm.weight": np.ones(width, dtype=np.float32)}
    for i in range(layers):
        block = f"blk.{i}."
        out.update({block + "attn_norm.weight": np.ones(width, dtype=np.float32),
                    block + "ffn_norm.weight": np.ones(width, dtype=np.float32),
                    block + "attn_q.weight": normal(width, width), block + "attn_k.weight": normal(width, width),
                    block + "attn_v.weight": normal(width, width), block + "attn_output.weight": normal(width, width),
                    block + "ffn_gate.weight": normal(ffn, width), block + "ffn_up.weight": normal(ffn, width),
                    block + "ffn_down.weight": normal(width, ffn)})
    return out


def tiny_gguf(path: Path, meta: dict | None = None, tensors: dict | None = None, raw: dict | None = None,
              width: int = 32, ffn: int = 32, layers: int = 1, drop: tuple[str, ...] = ()) -> Path:
    """A 1-block llama of width 32 (16 tokens); ``meta``: key -> (value, value type), a value
    None leaves the key out; ``tensors``: arrays written as they are (their numpy type);
    ``raw``: name -> (bytes, GGML type) written as that type."""
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, (value, kind) in {**_metadata(width, ffn, layers), **(meta or {})}.items():
        if value is not None:
            writer.add_key_value(key, value, kind)
    arrays = {**_llama_arrays(width, ffn, layers), **(tensors or {})}
    for name, array in arrays.items():
        if name not in drop and name not in (raw or {}):
            writer.add_tensor(name, np.ascontiguousarray(array))
    for name, (data, kind) in (raw or {}).items():
        writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def zero_blocks(kind: Q, rows: int, columns: int) -> tuple[np.ndarray, Q]:
    block, nbytes = gguf.GGML_QUANT_SIZES[kind]
    return np.zeros((rows, columns // block * nbytes), dtype=np.uint8), kind


def refusal(path: Path, monkeypatch) -> str:
    """The one-line CheckpointError that opening ``path`` ends in, no tensor read first."""
    def no_reading(self, name):
        raise AssertionError(f"tensor {name} was read before the refusal")

    monkeypatch.setattr(GGUFData, "values", no_reading)
    with pytest.raises(CheckpointError) as caught:
        open_gguf_model(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    return message


def test_a_tiny_llama_opens(tmp_path):
    portable = open_gguf_model(tiny_gguf(tmp_path / "good.gguf"))
    assert portable.model.config.width == 32 and portable.model.config.kv_heads == 2


@pytest.mark.parametrize(("key", "value", "kind", "said"), [
    ("llama.attention.head_count_kv", 0, V.UINT32, "integer from 1 to 2, got 0"),
    ("llama.attention.head_count_kv", "2", V.STRING, "got '2'"),
    ("llama.attention.head_count_kv", 2.0, V.FLOAT32, "got 2.0"),
    ("llama.attention.head_count_kv", -2, V.INT32, "got -2"),
    ("llama.attention.head_count_kv", True, V.BOOL, "got True"),
    ("llama.attention.head_count", 3, V.UINT32, "do not divide width 32"),
    ("llama.block_count", 0, V.UINT32, "integer from 1"),
    ("llama.embedding_length", 2 ** 40, V.UINT64, "integer from 1 to 16,384"),
    ("llama.context_length", 2 ** 63, V.UINT64, "integer from 1"),
    ("llama.feed_forward_length", [1, 2], V.ARRAY, "got an array of 2 items"),
    ("llama.attention.layer_norm_rms_epsilon", "x", V.STRING, "must be a positive number, got 'x'"),
    ("llama.attention.layer_norm_rms_epsilon", [1.0], V.ARRAY, "got an array of 1 items"),
    ("llama.attention.layer_norm_rms_epsilon", float("nan"), V.FLOAT32, "positive number"),
    ("llama.attention.layer_norm_rms_epsilon", 1e-300, V.FLOAT64, "positive number"),
    ("llama.rope.freq_base", float("inf"), V.FLOAT32, "positive number"),
    ("llama.rope.freq_base", 1e300, V.FLOAT64, "positive number"),
    ("llama.rope.dimension_count", 8, V.UINT32, "rotary positions on 8 of each head's 16"),
    ("general.architecture", ["llama"], V.ARRAY, "unsupported GGUF architecture an array of 1 items"),
    ("tokenizer.ggml.pre", ["gpt2"], V.ARRAY, "must be a string, got a value of type array[string]"),
    ("tokenizer.ggml.token_type", 1, V.INT32, "must be an array of integers, got a value of type i32"),
    ("tokenizer.ggml.tokens", 5, V.UINT32, "must be an array of strings"),
    ("tokenizer.ggml.scores", ["x"], V.ARRAY, "must be an array of numbers"),
    ("tokenizer.ggml.bos_token_id", "1", V.STRING, "must be an integer"),
    ("tokenizer.ggml.add_bos_token", 1, V.UINT8, "must be true or false"),
])
def test_metadata_of_the_wrong_type_or_value_is_one_line_naming_the_key(tmp_path, monkeypatch, key, value, kind,
                                                                        said):
    message = refusal(tiny_gguf(tmp_path / "bad.gguf", meta={key: (value, kind)}), monkeypatch)
    assert said in message
    assert key in message or "divide" in message


def test_a_missing_width_is_named(tmp_path, monkeypatch):
    message = refusal(tiny_gguf(tmp_path / "bad.gguf", meta={"llama.embedding_length": (None, None)}), monkeypatch)
    assert "'llama.embedding_length' is missing" in message


def test_an_odd_head_size_is_refused_before_any_reshape(tmp_path, monkeypatch):
    meta = {"llama.attention.head_count": (64, V.UINT32), "llama.attention.head_count_kv": (64, V.UINT32),
            "llama.embedding_length": (64, V.UINT32)}
    message = refusal(tiny_gguf(tmp_path / "bad.gguf", meta=meta, width=64), monkeypatch)
    assert "head size of 1" in message and "odd" in message


def test_tensors_past_block_count_are_refused_as_llama_cpp_does(tmp_path, monkeypatch):
    path = tiny_gguf(tmp_path / "bad.gguf", layers=2, meta={"llama.block_count": (1, V.UINT32)})
    message = refusal(path, monkeypatch)
    assert "unexpected tensor 'blk.1." in message and "llama.block_count 1" in message


def test_a_stray_tensor_is_refused(tmp_path, monkeypatch):
    path = tiny_gguf(tmp_path / "bad.gguf", tensors={"blk.0.attn_rot_embd.weight": np.ones(4, dtype=np.float32)})
    assert "unexpected tensor 'blk.0.attn_rot_embd.weight'" in refusal(path, monkeypatch)


def test_a_missing_tensor_and_a_wrong_shape_are_refused_from_the_header(tmp_path, monkeypatch):
    missing = refusal(tiny_gguf(tmp_path / "a.gguf", drop=("blk.0.ffn_gate.weight",)), monkeypatch)
    assert "no tensor 'blk.0.ffn_gate.weight'" in missing
    wrong = tiny_gguf(tmp_path / "b.gguf", tensors={"blk.0.attn_k.weight": np.zeros((16, 32), dtype=np.float32)})
    assert "tensor 'blk.0.attn_k.weight' has shape [16, 32]; the metadata makes it [32, 32]" in refusal(
        wrong, monkeypatch)
    table = tiny_gguf(tmp_path / "c.gguf", tensors={"token_embd.weight": np.zeros(16, dtype=np.float32)})
    assert "'token_embd.weight' is of shape [16]" in refusal(table, monkeypatch)


@pytest.mark.parametrize(("kind", "width"), [(Q.Q8_1, 32), (Q.Q8_K, 256), (Q.Q1_0, 128)])
def test_types_without_a_dequantizer_are_one_line_naming_tensor_and_type(tmp_path, monkeypatch, capsys, kind,
                                                                         width):
    path = tiny_gguf(tmp_path / "q.gguf", width=width, ffn=width,
                     raw={"blk.0.ffn_up.weight": zero_blocks(kind, width, width)})
    header = read_gguf_header(path)
    with pytest.raises(CheckpointError, match=f"tensor 'blk.0.ffn_up.weight' is stored as {kind.name},"):
        GGUFData(header).values("blk.0.ffn_up.weight")
    with pytest.raises(CheckpointError, match=kind.name):
        read_gguf_tensor(path, "blk.0.ffn_up.weight")
    code, _, err = run_cli(capsys, "inspect", str(path), "--tensor", "blk.0.ffn_up.weight")
    assert code == 1 and err.count("\n") == 1 and kind.name in err
    assert f"stored as {kind.name}" in refusal(path, monkeypatch)


def test_plain_integer_and_float64_arrays_read_exactly(tmp_path):
    big = np.arange(32, dtype=np.int32) + 2 ** 24 + 1  # float32 would round these
    fine = np.arange(32, dtype=np.float64) / 3
    stored = {"blk.0.attn_norm.weight": np.arange(-16, 16, dtype=np.int8),
              "blk.0.ffn_norm.weight": (np.arange(32, dtype=np.int16) - 16) * 1000,
              "output_norm.weight": fine, "extra_i32": big,
              "extra_i64": np.array([2 ** 53, -(2 ** 53), 7], dtype=np.int64)}
    path = tiny_gguf(tmp_path / "plain.gguf", tensors=stored)
    data = GGUFData(read_gguf_header(path))
    for name, array in stored.items():
        values = data.values(name)
        assert values.dtype == (np.float32 if array.dtype.itemsize <= 2 else np.float64), name
        assert np.array_equal(values, array.astype(np.float64)), name
    assert read_gguf_tensor(path, "output_norm.weight").tensor.numpy().tolist() == fine.tolist()


def test_an_i64_beyond_float64_integers_is_refused(tmp_path):
    path = tiny_gguf(tmp_path / "i64.gguf", tensors={"extra": np.array([2 ** 53 + 1], dtype=np.int64)})
    with pytest.raises(CheckpointError, match="'extra' \\(I64\\) holds integers beyond 2\\^53"):
        GGUFData(read_gguf_header(path)).values("extra")


def test_a_model_with_plain_typed_weights_opens_with_their_exact_values(tmp_path):
    norm = np.arange(1, 33, dtype=np.int8)
    table = np.random.default_rng(1).standard_normal((16, 32))  # float64
    path = tiny_gguf(tmp_path / "m.gguf", tensors={"blk.0.attn_norm.weight": norm, "token_embd.weight": table})
    model = open_gguf_model(path, dtype="float64").model
    params = dict(model.named_parameters())
    assert params["blocks.0.attn_norm.weight"].tolist() == norm.tolist()
    assert params["token_embedding.weight"].detach().numpy().tobytes() == table.tobytes()


def test_cli_refusals_are_one_line_and_write_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MINIGPT_TUI_RUNS_DIR", str(tmp_path / "runs"))
    bad = tiny_gguf(tmp_path / "bad.gguf", meta={"llama.attention.head_count_kv": (0, V.UINT32)})
    out = tmp_path / "out.gguf"
    for args in (["generate", "--model", str(bad), "--prompt", "ab"],
                 ["export", "--model", str(bad), "--format", "gguf", "--out", str(out)],
                 ["train", "--preset", "tiny", "--init-from", str(bad), "--steps", "1", "--run", "warm"]):
        code, _, err = run_cli(capsys, *args)
        assert code == 1 and err.count("\n") == 1 and "head_count_kv" in err, args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.gguf"]


def test_inspect_verify_of_a_gguf_checks_what_a_gguf_allows(tmp_path, capsys):
    path = tiny_gguf(tmp_path / "good.gguf")
    code, out, err = run_cli(capsys, "inspect", str(path), "--verify", "--json")
    assert code == 0, err
    verified = json.loads(out)["verified"]
    assert verified == {"ok": True, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "tensors": 11}
    code, out, _ = run_cli(capsys, "inspect", str(path), "--verify")
    assert code == 0 and "verified: ok; SHA-256 " in out and "safetensors" not in out
    unreadable = tiny_gguf(tmp_path / "q.gguf", raw={"blk.0.ffn_up.weight": zero_blocks(Q.Q8_1, 32, 32)})
    code, _, err = run_cli(capsys, "inspect", str(unreadable), "--verify")
    assert code == 1 and err.count("\n") == 1 and "Q8_1" in err and "safetensors" not in err


def test_inspect_compare_of_two_gguf_files_names_the_changed_tensor(tmp_path, capsys):
    a = tiny_gguf(tmp_path / "a.gguf")
    b = tiny_gguf(tmp_path / "b.gguf", tensors={"output_norm.weight": np.full(32, 2, dtype=np.float32)})
    code, out, err = run_cli(capsys, "inspect", str(a), "--compare", str(b), "--json")
    assert code == 0, err
    comparison = json.loads(out)["comparison"]
    assert comparison["changed"] == ["a.gguf:output_norm.weight"] and comparison["unchanged"] == 10
    row = next(t for t in comparison["tensors"] if t["name"] == "output_norm.weight")
    assert row["max_abs_diff"] == 1.0


def test_the_generation_screen_refuses_a_bad_gguf_then_loads_a_good_one(tmp_path):
    from textual.widgets import Input

    from tests.app_support import make_app, record_notifications, run_async, settle

    bad = tiny_gguf(tmp_path / "bad.gguf", meta={"llama.attention.head_count_kv": (0, V.UINT32)})
    good = tiny_gguf(tmp_path / "good.gguf")

    @run_async
    async def scenario() -> None:
        app = make_app(tmp_path / "runs")
        notes = record_notifications(app)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("g")
            await settle(pilot)
            screen = pilot.app.screen
            field = screen.query_one("#model", Input)
            for path in (bad, good):
                field.value = str(path)
                field.focus()
                await pilot.press("enter")
                await settle(pilot)
            assert any("'llama.attention.head_count_kv' must be an integer" in text for text, _ in notes)
            assert screen.focused is screen.query_one("#prompt", Input)  # the good one loaded
            assert screen.session.portable.path == good

    scenario()
