"""Precision and threads as typed values: each kind's meaning said once, typed thread
counts read once, and the stored forms (a name, a number) unchanged."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.core.errors import ConfigError
from minigpt_tui.engine.core.precision import PRECISIONS, precision_named, precision_of
from minigpt_tui.engine.core.threads import Threads
from minigpt_tui.engine.session.inputs import parse_threads
from minigpt_tui.engine.training.training_state import compared_keys, current_envelope

ENGINE = Path(__file__).resolve().parents[2] / "minigpt_tui" / "engine"


@pytest.mark.parametrize(("name", "dtype", "autocast", "bytes_", "bitwise", "fused", "scales"), [
    ("exact", torch.float64, None, 8, True, False, False),
    ("fast", torch.float32, None, 4, False, True, False),
    ("bf16", torch.float32, torch.bfloat16, 4, False, False, False),
    ("fp16", torch.float32, torch.float16, 4, False, False, True),
])
def test_each_precision_knows_what_it_means(name, dtype, autocast, bytes_, bitwise, fused, scales):
    kind = precision_of(name)
    assert (kind.torch_dtype(), kind.autocast_dtype(), kind.bytes_per_element) == (dtype, autocast, bytes_)
    assert (kind.bitwise, kind.deterministic, kind.fused, kind.scales_loss) == (bitwise, bitwise, fused, scales)
    assert kind.stored_dtype == ("F64" if dtype == torch.float64 else "F32")
    assert kind.threads(Threads(3)) == (Threads(1) if bitwise else Threads(3))


def test_the_config_keeps_the_names_and_numbers_it_stores():
    assert PRECISIONS == ("exact", "fast", "bf16", "fp16")  # the --precision choices, in order
    exact = load_config("tiny", overrides={"train": {"threads": 4}})
    auto = load_config("tiny", overrides={"train": {"precision": "fast", "threads": 0}})
    assert exact.to_dict()["train"]["precision"] == "exact" and auto.to_dict()["train"]["threads"] == 0
    assert (exact.dtype_name, exact.train.effective_threads) == ("float64", Threads(1))  # exact: one thread
    assert (auto.dtype_name, str(auto.train.effective_threads)) == ("float32", "auto")


def test_the_envelope_reads_the_thread_rule_of_the_precision():
    exact = load_config("tiny", overrides={"train": {"threads": 4}}).train
    auto = load_config("tiny", overrides={"train": {"precision": "fast", "threads": 0}}).train
    assert {k: current_envelope(exact, measured=False, device_kind="cpu")[k] for k in ("threads", "deterministic", "dtype")} \
        == {"threads": 1, "deterministic": True, "dtype": "float64"}
    assert {k: current_envelope(auto, measured=False, device_kind="cpu")[k] for k in ("threads", "deterministic", "dtype")} \
        == {"threads": 0, "deterministic": False, "dtype": "float32"}
    assert "threads" in compared_keys(load_config("tiny", overrides={"train": {"threads": 0}}).train)  # exact: always 1
    assert "threads" not in compared_keys(auto)


def test_an_unknown_precision_is_refused_or_not_read():
    with pytest.raises(ConfigError, match="precision must be one of exact, fast, bf16, fp16, got 'half'"):
        precision_of("half")
    assert precision_named("half") is None and precision_named(["exact"]) is None  # a hostile record
    assert precision_named("exact") is precision_of("exact")


@pytest.mark.parametrize(("text", "count"), [("auto", 0), (" AUTO ", 0), ("1", 1), ("12", 12)])
def test_threads_are_auto_or_a_whole_number(text, count):
    threads = Threads.parse(text)
    assert threads.count == count and threads.auto is (count == 0)
    assert str(threads) == ("auto" if count == 0 else str(count))


@pytest.mark.parametrize(("text", "reason"), [("many", "expected auto or a whole number, got 'many'"),
                                              ("0", "expected auto or at least 1, got 0"),
                                              ("-2", "expected auto or at least 1, got -2")])
def test_typed_threads_are_refused_in_one_line_naming_the_field(text, reason):
    with pytest.raises(ConfigError) as bare:
        Threads.parse(text)
    assert str(bare.value) == reason and bare.value.field == "train.threads"
    with pytest.raises(ConfigError) as labelled:
        parse_threads(text, "threads")
    assert str(labelled.value) == f"threads: {reason}"


def test_a_blank_threads_field_keeps_the_default():
    assert parse_threads(None, "threads") is None and parse_threads("  ", "threads") is None
    assert parse_threads("auto", "threads") == 0 and parse_threads("3", "threads") == 3


def test_the_engine_reads_precision_names_in_one_place():
    compared = re.compile(r'(==|!=) "(exact|fast|bf16|fp16)"|precision (not )?in ')
    readers = [str(path.relative_to(ENGINE)) for path in ENGINE.rglob("*.py")
               if compared.search(path.read_text("utf-8"))]
    assert readers == []
