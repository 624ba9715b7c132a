"""Foreign PyTorch pickles in ``inspect``: nanoGPT-style ``ckpt.pt`` and plain state dicts
open with ``torch.load(weights_only=True)`` only; a pickle that needs code is refused and
never run."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
from pathlib import Path, PurePosixPath

import pytest
import torch

from conftest import cli_command, cli_env
from foreign_support import RunsAShellCommand, nanogpt_checkpoint
from minigpt_tui.engine.formats.inspect import inspect_path
from minigpt_tui.engine.formats.state_groups import StateGroup
from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.formats.foreign import inspect_foreign
from minigpt_tui.engine.formats.foreign_pickle import pickle_imports






def test_nanogpt_checkpoint_shows_tensors_aliases_and_records(tmp_path):
    model = nanogpt_checkpoint(tmp_path / "ckpt.pt")
    inspection = inspect_path(tmp_path / "ckpt.pt")
    assert inspection.kind == "nanogpt"
    names = {e.name for e in inspection.entries}
    assert {f"model.{n}" for n in model.state_dict()} <= names
    assert any(n.startswith("optimizer.state.") and n.endswith("exp_avg_sq") for n in names)
    wte = inspection.entry("model.transformer.wte.weight")
    assert (wte.dtype, wte.shape, wte.elements, wte.bytes, wte.group) == ("F32", (11, 4), 44, 176, "model")
    assert [(a["name"], a["target"], a["transform"]) for a in inspection.aliases] == [
        ("model.lm_head.weight", "model.transformer.wte.weight", "none")]
    assert inspection.state.get(StateGroup.TRAINING) == {"iter_num": 250, "best_val_loss": 1.8125}
    assert inspection.state.get(StateGroup.MODEL_ARGS)["block_size"] == 8
    assert inspection.state.get(StateGroup.CONFIG)["dataset"] == "shakespeare_char"
    optimizer = inspection.state.get(StateGroup.OPTIMIZER)
    assert optimizer["group 0"]["lr"] == 6e-4 and optimizer["group 0"]["betas"] == [0.9, 0.95]
    assert optimizer["state_per_parameter"] == ["exp_avg", "exp_avg_sq", "step"]
    # The state dict names the tied table twice; it is stored once and counted once.
    assert inspection.state.get(StateGroup.PARAMETERS)["F32"]["tensors"] == len(model.state_dict()) - 1
    assert inspection.state.get(StateGroup.PARAMETERS)["F32"]["scalars"] == sum(p.numel() for p in model.parameters())
    assert inspection.entry("best_val_loss").group == "training"
    json.dumps(inspection.to_json())


def test_plain_state_dict_with_shared_storage(tmp_path):
    base = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    state = {"encoder.weight": base, "decoder.weight": base, "row": base[1], "bias": torch.zeros(4, dtype=torch.int64),
             "scale": torch.tensor(0.5), "layers.0.w": torch.ones(2, 2, dtype=torch.bfloat16), "epoch": 3}
    torch.save(state, tmp_path / "weights.pth")
    inspection = inspect_path(tmp_path / "weights.pth")
    assert inspection.kind == "torch-pickle"
    assert [e.name for e in inspection.entries] == [k for k in state if k != "epoch"]
    assert inspection.entry("row").begin == 4 * 8 and inspection.entry("row").end == 8 * 8
    assert inspection.entry("layers.0.w").dtype == "BF16" and inspection.entry("layers.0.w").group == "layer 0"
    aliases = {a["name"]: a for a in inspection.aliases}
    assert set(aliases) == {"decoder.weight", "row"}
    assert aliases["decoder.weight"]["target"] == "encoder.weight" and aliases["decoder.weight"]["transform"] == "none"
    assert aliases["row"]["transform"] == "view" and aliases["row"]["storage_offset"] == 4
    totals = inspection.state.get(StateGroup.PARAMETERS)
    assert totals["F64"]["tensors"] == 2 and totals["F64"]["scalars"] == 12 + 4  # decoder.weight counted once
    assert totals["F32"]["scalars"] == 1 and inspection.state.get(StateGroup.SCALAR_TENSORS) == {"scale": 0.5}
    assert inspection.state.get(StateGroup.RECORDS) == {"epoch": 3}
    assert totals["I64"]["scalars"] == 4 and totals["BF16"]["bytes"] == 8
    assert inspection.metadata["container"] == "torch-zip"


def test_inspect_foreign_leaves_other_paths_to_the_checkpoint_reader(tmp_path):
    (tmp_path / "x.safetensors").write_bytes(b"")
    assert inspect_foreign(tmp_path / "x.safetensors") is None
    assert inspect_foreign(tmp_path) is None
    (tmp_path / "config.json").write_text("{}")  # a run folder's config, no weights beside it
    assert inspect_foreign(tmp_path) is None


class WritesAFile:
    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (open, (str(self.target), "w"))




def test_malicious_pickles_are_refused_and_never_run(tmp_path):
    target = tmp_path / "pwned"
    raw = tmp_path / "evil.pt"
    raw.write_bytes(pickle.dumps({"weights": [1.0], "payload": WritesAFile(target)}, protocol=2))
    raw4 = tmp_path / "evil4.pth"
    raw4.write_bytes(pickle.dumps({"payload": WritesAFile(target)}, protocol=4))
    zipped = tmp_path / "ckpt.pt"
    torch.save({"model": {"w": torch.zeros(2)}, "iter_num": 1, "payload": RunsAShellCommand(target)}, zipped)
    # What the programs would call, read from their opcodes without running them.
    assert pickle_imports(raw.read_bytes()) == ["io.open"]
    assert pickle_imports(pickle.dumps(RunsAShellCommand(target), protocol=4)) == [os.system.__module__ + ".system"]
    assert pickle_imports(b"not a pickle") is None
    for path in (raw, raw4, zipped):
        with pytest.raises(CheckpointError) as caught:
            inspect_path(path)
        message = str(caught.value)
        assert "refused" in message and "code execution" in message and "\n" not in message, message
        assert not target.exists()
    result = subprocess.run(cli_command("inspect", str(zipped), "--json"), capture_output=True, text=True,
                            env=cli_env(tmp_path), timeout=120)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "system" in result.stderr and "Traceback" not in result.stderr
    assert not target.exists()


def test_files_that_are_not_pickles_are_one_line_errors(tmp_path):
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / "noise.pth").write_bytes(bytes(range(256)) * 3)
    for name in ("empty.pt", "noise.pth"):
        with pytest.raises(CheckpointError, match="not a (readable )?PyTorch checkpoint") as caught:
            inspect_path(tmp_path / name)
        assert "\n" not in str(caught.value)


def test_cli_inspect_nanogpt_json(tmp_path):
    nanogpt_checkpoint(tmp_path / "ckpt.pt")
    result = subprocess.run(cli_command("inspect", str(tmp_path / "ckpt.pt"), "--json"), capture_output=True,
                            text=True, env=cli_env(tmp_path), timeout=120)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["kind"] == "nanogpt"
    assert data["state"]["training"]["iter_num"] == 250
    assert data["aliases"][0]["name"] == "model.lm_head.weight"
    table = subprocess.run(cli_command("inspect", str(tmp_path / "ckpt.pt")), capture_output=True, text=True,
                           env=cli_env(tmp_path), timeout=120)
    assert table.returncode == 0 and "iter_num" in table.stdout


def _known_safe_values() -> dict[str, object]:
    import argparse

    import numpy

    return {
        "numpy scalar": {"best_val_loss": numpy.float64(1.8125), "iter_num": numpy.int64(250)},
        "argparse.Namespace": {"args": argparse.Namespace(lr=6e-4, dataset="shakespeare_char")},
        "pathlib path": {"out_dir": Path("/tmp/out"), "data": PurePosixPath("data/train.bin")},
    }


@pytest.mark.parametrize("kind", ["numpy scalar", "argparse.Namespace", "pathlib path"])
def test_routine_values_beside_tensors_open_and_show_as_records(tmp_path, kind):
    path = tmp_path / "ckpt.pt"
    torch.save({"model": {"w": torch.arange(4.0)}, **_known_safe_values()[kind]}, path)
    inspection = inspect_path(path)
    assert [row.name for row in inspection.entries] == ["model.w"]
    records = json.loads(json.dumps(inspection.state.to_json()))  # JSON-ready
    text = json.dumps(records)
    expected = {"numpy scalar": ["1.8125", "250"], "argparse.Namespace": ["shakespeare_char", "0.0006"],
                "pathlib path": ["/tmp/out", "data/train.bin"]}[kind]
    assert all(value in text for value in expected), text
    assert "np.float64" not in text and "Namespace(" not in text and "PosixPath" not in text


@pytest.mark.parametrize("kind", ["numpy scalar", "argparse.Namespace", "pathlib path"])
def test_a_code_payload_beside_an_allowed_value_is_still_refused(tmp_path, kind):
    target = tmp_path / "pwned"
    path = tmp_path / "ckpt.pt"
    torch.save({"model": {"w": torch.zeros(2)}, **_known_safe_values()[kind], "payload": RunsAShellCommand(target)},
               path)
    with pytest.raises(CheckpointError, match="code execution") as caught:
        inspect_path(path)
    assert "system" in str(caught.value) and "\n" not in str(caught.value)
    assert not target.exists()
