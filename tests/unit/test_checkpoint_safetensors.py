"""The strict safetensors reader and the atomic writer."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import safetensors.torch
import torch

from minigpt_tui.engine.formats.safetensors_read import (
    MAX_HEADER_BYTES,
    InvalidSafetensors,
    Violation,
    load_file,
    read_header,
    read_tensor,
)
from minigpt_tui.engine.formats.safetensors_write import write_safetensors
from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.core.tensors import u64_values


def raw_file(path: Path, header: dict | bytes, data: bytes = b"", declared: int | None = None) -> Path:
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    length = len(body) if declared is None else declared
    path.write_bytes(struct.pack("<Q", length) + body + data)
    return path


def sample_tensors() -> list[tuple[str, torch.Tensor]]:
    return [
        ("weights", torch.arange(6, dtype=torch.float64).reshape(2, 3) / 7),
        ("counter", torch.tensor([2**64 - 3], dtype=torch.uint64)),
        ("merges", torch.tensor([[1, 2], [3, 4]], dtype=torch.uint32)),
        ("flags", torch.tensor([1, 0, 1], dtype=torch.uint8)),
        ("half", torch.tensor([0.5, -2.0], dtype=torch.bfloat16)),
        ("empty", torch.zeros((0, 4), dtype=torch.float32)),
        ("scalar", torch.tensor(3.0, dtype=torch.float32)),
    ]


def test_written_files_round_trip_and_are_readable_by_the_safetensors_library(tmp_path):
    path = tmp_path / "a.safetensors"
    written = write_safetensors(path, sample_tensors(), {"note": "hello"})
    assert written.size == path.stat().st_size
    loaded = load_file(path)
    assert loaded.sha256 == written.sha256
    theirs = safetensors.torch.load_file(path)
    for name, tensor in sample_tensors():
        ours = loaded.tensor(name)
        assert ours.dtype == tensor.dtype and ours.shape == tensor.shape
        assert torch.equal(ours.reshape(-1).view(torch.uint8), tensor.reshape(-1).view(torch.uint8))
        assert torch.equal(theirs[name].reshape(-1).view(torch.uint8), tensor.reshape(-1).view(torch.uint8))
    assert loaded.metadata == {"note": "hello"}
    assert u64_values(loaded.tensor("counter")) == [2**64 - 3]
    # The header is padded to 8 bytes and every tensor starts at a multiple of its element size.
    header = read_header(path)
    assert header.header_bytes % 8 == 0
    for entry in header.entries:
        size = {"F64": 8, "U64": 8, "U32": 4, "F32": 4, "BF16": 2, "U8": 1}[entry.dtype]
        assert entry.begin % size == 0


def test_files_from_the_safetensors_library_are_read_strictly(tmp_path):
    path = tmp_path / "lib.safetensors"
    safetensors.torch.save_file({"x": torch.randn(3, 5), "y": torch.arange(4)}, path, metadata={"k": "v"})
    header = read_header(path)
    assert [e.name for e in header.entries] and set(header.names) == {"x", "y"}
    assert header.metadata == {"k": "v"}
    assert torch.equal(read_tensor(path, "y"), torch.arange(4))


def test_writing_leaves_no_temporary_file_and_replaces_atomically(tmp_path):
    path = tmp_path / "a.safetensors"
    write_safetensors(path, sample_tensors()[:1])
    write_safetensors(path, sample_tensors()[1:2])
    assert [p.name for p in tmp_path.iterdir()] == ["a.safetensors"]
    assert read_header(path).names == ["counter"]


def test_duplicate_names_are_refused_on_write(tmp_path):
    with pytest.raises(CheckpointError, match="share one name"):
        write_safetensors(tmp_path / "d.safetensors", [("a", torch.zeros(1)), ("a", torch.ones(1))])


GOOD_ENTRY = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


VIOLATION_CASES = [
    (lambda p: p.write_bytes(b"\x01\x02"), "file-too-small"),
    (lambda p: raw_file(p, {"a": GOOD_ENTRY}, bytes(8), declared=MAX_HEADER_BYTES + 1), "header-too-large"),
    (lambda p: raw_file(p, {"a": GOOD_ENTRY}, bytes(8), declared=10_000), "header-length-beyond-file"),
    (lambda p: raw_file(p, b'{"a": "\xff\xfe"}'), "header-not-utf8"),
    (lambda p: raw_file(p, b"[1, 2, 3]"), "header-start"),
    (lambda p: raw_file(p, b'{"a": '), "header-not-json"),
    (lambda p: raw_file(p, b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "a": {}}', bytes(8)), "duplicate-name"),
    (lambda p: raw_file(p, {"a": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}}, bytes(8)), "unknown-dtype"),
    (lambda p: raw_file(p, {"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, bytes(8)), "bad-shape"),
    (lambda p: raw_file(p, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, bytes(8)), "offsets-reversed"),
    (lambda p: raw_file(p, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}}, bytes(8)), "offsets-not-pair"),
    (lambda p: raw_file(p, {"a": {"dtype": "F32", "shape": [2**32, 2**32], "data_offsets": [0, 8]}}, bytes(8)),
     "element-count-overflow"),
    (lambda p: raw_file(p, {"a": {"dtype": "F64", "shape": [2**62], "data_offsets": [0, 8]}}, bytes(8)),
     "byte-size-overflow"),
    (lambda p: raw_file(p, b'{"\\ud800": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', bytes(8)),
     "lone-surrogate-name"),
    (lambda p: raw_file(p, b'{"__metadata__": {"k": "\\udc00"}, "a": {"dtype": "F32", "shape": [2], '
                           b'"data_offsets": [0, 8]}}', bytes(8)), "lone-surrogate-metadata"),
    (lambda p: raw_file(p, {"a": {"dtype": "F32", "shape": [2]}}, bytes(8)), "bad-entry"),
    (lambda p: raw_file(p, {"a": {"dtype": "F64", "shape": [2], "data_offsets": [0, 8]}}, bytes(8)), "byte-length-mismatch"),
    (lambda p: raw_file(p, {"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, bytes(2)), "misaligned-bits"),
    (
        lambda p: raw_file(
            p,
            {"a": GOOD_ENTRY, "b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}},
            bytes(16),
        ),
        "offsets-not-contiguous",
    ),
    (
        lambda p: raw_file(
            p,
            {"a": GOOD_ENTRY, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
            bytes(12),
        ),
        "offsets-not-contiguous",
    ),
    (lambda p: raw_file(p, {"a": GOOD_ENTRY}, bytes(5)), "truncated-data"),
    (lambda p: raw_file(p, {"a": GOOD_ENTRY}, bytes(12)), "data-not-covered"),
    (lambda p: raw_file(p, {"__metadata__": {"k": 1}, "a": GOOD_ENTRY}, bytes(8)), "metadata-not-strings"),
    (lambda p: p.write_bytes(b"This is plain text, not a safetensors file at all.\n"), "header-too-large"),
]
# Checks no file on disk reaches: a header cut short while it is read (the file shrank after
# its size was taken), and JSON that begins with '{' yet is no object.
UNBUILT_VIOLATIONS = {Violation.TRUNCATED_HEADER, Violation.HEADER_NOT_OBJECT}


def test_each_check_has_its_own_violation_and_a_case():
    assert len({v.value for v in Violation}) == len(Violation)
    assert {violation for _, violation in VIOLATION_CASES} == {v.value for v in Violation} - UNBUILT_VIOLATIONS


@pytest.mark.parametrize(("build", "violation"), VIOLATION_CASES)
def test_each_format_violation_is_named(tmp_path, build, violation):
    path = tmp_path / "bad.safetensors"
    build(path)
    with pytest.raises(InvalidSafetensors) as caught:
        read_header(path)
    assert caught.value.violation == violation
    message = str(caught.value)
    assert "\n" not in message and violation in message and str(path) in message
    with pytest.raises(InvalidSafetensors):
        load_file(path)


def test_a_header_only_read_touches_no_tensor_bytes(tmp_path, monkeypatch):
    path = tmp_path / "big.safetensors"
    write_safetensors(path, [("big", torch.zeros(200_000, dtype=torch.float64)), ("small", torch.ones(3))])
    opened: list[int] = []
    real_open = Path.open

    def counting_open(self, *args, **kwargs):
        handle = real_open(self, *args, **kwargs)
        real_read, real_readinto = handle.read, handle.readinto

        def read(n=-1):
            data = real_read(n)
            opened.append(len(data))
            return data

        def readinto(buffer):
            got = real_readinto(buffer)
            opened.append(got)
            return got

        handle.read, handle.readinto = read, readinto
        return handle

    monkeypatch.setattr(Path, "open", counting_open)
    header = read_header(path)
    assert sum(opened) == header.data_start  # the length prefix and the JSON, nothing more
    opened.clear()
    small = read_tensor(path, "small")
    assert torch.equal(small, torch.ones(3))
    assert sum(opened) == read_header(path).data_start + 12  # header again, then 12 bytes of data


def test_missing_files_and_folders_give_one_line(tmp_path):
    with pytest.raises(CheckpointError, match="file not found"):
        read_header(tmp_path / "nope.safetensors")
    with pytest.raises(CheckpointError, match="is a directory"):
        read_header(tmp_path)
