"""Every family the registry declares round-trips: a transformers folder made here (random
weights, the family's example config) opens as ours with transformers' logits, exports back
to the same tensors under the same names, and ``convert --hf`` makes our model file of it;
where llama.cpp has the architecture, GGUF -> ours -> GGUF gives back the same tensors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli
from family_support import make_family_folder
from safetensors.torch import load_file

from minigpt_tui.engine.core.config import FAMILIES, FAMILY_PARTS
from minigpt_tui.engine.families import REGISTRY, family, gguf_architectures
from minigpt_tui.engine.formats.hf_export import export_hf
from minigpt_tui.engine.models.gguf_export import export_gguf
from minigpt_tui.engine.models.gguf_models import open_gguf_model
from minigpt_tui.engine.models.hf_models import open_hf_model
from minigpt_tui.engine.models.model_file import load_portable_model

NAMES = tuple(f.name for f in REGISTRY)
GGUF_NAMES = tuple(f.name for f in REGISTRY if f.gguf is not None)
PROMPT = "The quick brown fox, naïve café"


def test_the_registry_declares_each_family_of_the_model_once():
    assert NAMES == FAMILIES
    for declared in REGISTRY:
        assert declared.parts == FAMILY_PARTS[declared.name]
        assert family(declared.name) is declared
    assert len({f.architecture for f in REGISTRY}) == len(REGISTRY)
    assert gguf_architectures() == ("llama", "gpt2", "qwen2", "qwen3", "phi3")


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {name: make_family_folder(name, root / name, seed=index) for index, name in enumerate(NAMES)}


def _transformers_logits(folder: Path, ids: list[int]) -> torch.Tensor:
    import transformers as tr

    model = tr.AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def _our_logits(portable, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return portable.model(torch.tensor([ids])).logits[0]


@pytest.mark.parametrize("name", NAMES)
def test_transformers_folder_to_ours_and_back_keeps_every_tensor_and_the_logits(folders, tmp_path, name):
    ours = open_hf_model(folders[name])
    assert ours.config.family == name
    ids = ours.tokenizer.encode_prompt(PROMPT)
    expected = _transformers_logits(folders[name], ids)
    torch.testing.assert_close(_our_logits(ours, ids), expected, atol=3e-5, rtol=1e-5)
    export_hf(ours, tmp_path / "back")
    written, original = load_file(tmp_path / "back" / "model.safetensors"), load_file(
        folders[name] / "model.safetensors")
    assert sorted(written) == sorted(original)
    for tensor_name, tensor in original.items():
        assert torch.equal(written[tensor_name], tensor), tensor_name
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["architectures"] == [family(name).architecture] and config["model_type"] == family(name).model_type
    torch.testing.assert_close(_transformers_logits(tmp_path / "back", ids), expected, atol=0, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_convert_makes_our_model_file_of_every_family(folders, tmp_path, capsys, name):
    out = tmp_path / "model.safetensors"
    code, printed, err = run_cli(capsys, "convert", "--hf", str(folders[name]), "--out", str(out), "--json")
    assert code == 0, err
    report = json.loads(printed)
    assert (report["family"], report["architecture"]) == (name, family(name).architecture)
    converted, opened = load_portable_model(out), open_hf_model(folders[name])
    assert report["tied_alias"] == converted.config.tied_head == opened.config.tied_head
    ids = opened.tokenizer.encode_prompt(PROMPT)
    assert converted.tokenizer.encode_prompt(PROMPT) == ids
    assert torch.equal(_our_logits(converted, ids), _our_logits(opened, ids))


def _gguf_tensors(path: Path) -> dict[str, tuple[str, bytes]]:
    import gguf

    return {t.name: (t.tensor_type.name, np.asarray(t.data).tobytes()) for t in gguf.GGUFReader(str(path)).tensors}


@pytest.mark.parametrize("name", GGUF_NAMES)
def test_gguf_to_ours_to_gguf_gives_back_every_tensor(folders, tmp_path, name):
    first = export_gguf(open_hf_model(folders[name]), tmp_path / "first.gguf", "f32").path
    read = open_gguf_model(first)
    assert read.config.family == name
    second = export_gguf(read, tmp_path / "second.gguf", "f32").path
    assert _gguf_tensors(second) == _gguf_tensors(first)
    opened = open_hf_model(folders[name])
    ids = read.tokenizer.encode_prompt(PROMPT)
    torch.testing.assert_close(_our_logits(read, ids), _our_logits(opened, ids), atol=0, rtol=0)


@pytest.mark.parametrize("name", GGUF_NAMES)
def test_a_gguf_file_llama_cpp_style_reads_and_writes_back_unchanged(tmp_path, name):
    from gguf_support import family_gguf_file

    source = family_gguf_file(tmp_path, name, "F32")
    back = export_gguf(open_gguf_model(source), tmp_path / "back.gguf", "f32").path
    assert _gguf_tensors(back) == _gguf_tensors(source)


def test_families_without_a_gguf_architecture_are_refused_in_one_line(folders, tmp_path, capsys):
    for declared in REGISTRY:
        if declared.gguf is not None:
            continue
        code, _, err = run_cli(capsys, "export", "--model", str(folders[declared.name]), "--format", "gguf",
                               "--out", str(tmp_path / f"{declared.name}.gguf"))
        assert code == 1 and err.count("\n") == 1 and "has no GGUF architecture" in err
