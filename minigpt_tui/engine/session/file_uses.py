"""What an opened file from another tool is, and what this tool can do with it.

A nanoGPT ``ckpt.pt``, a plain PyTorch state dict, a transformers folder or a safetensors
file made elsewhere open for reading like our own checkpoints, but they cannot be resumed
(their optimizer state, if any, is theirs) nor generated from until converted. The
Checkpoints screen says so in its summary, on ``p`` (generate) and on ``r`` (resume), from
the one :class:`FileUses` made here from an inspection's header records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from minigpt_tui.engine.session.display import counted
from minigpt_tui.engine.formats.state_groups import InspectionState, StateGroup

FOREIGN_KINDS = ("nanogpt", "torch-pickle", "hf-model", "safetensors")
INSPECT_USES = (
    "browse its tensors, shared tensors (aliases), records and metadata (tabs 1 to 5)",
    "statistics and a histogram of any tensor (enter on a row of the tensor table)",
    "compare it with another checkpoint or file, tensor by tensor (m)",
)


@dataclass(frozen=True)
class FileUses:
    """``name`` says what the file is, ``contents`` what it holds; ``uses`` are what works
    on it here; ``convert`` says whether ``minigpt-tui convert`` makes a model of it."""

    name: str
    contents: str
    uses: tuple[str, ...]
    convert: str

    @property
    def why_not_resumable(self) -> str:
        return (f"{self.name}: {self.contents}; minigpt-tui resumes only its own checkpoint folders "
                "(model, training state, manifest)")

    @property
    def why_no_generation(self) -> str:
        return f"this is {self.name}; generation needs a minigpt-tui model file, and {self.convert}"


def _nanogpt_family(state: InspectionState) -> str:
    args = state.get(StateGroup.MODEL_ARGS)
    shape = [f"{counted(args[key], label)}" for key, label in (("n_layer", "layer"), ("n_head", "head"))
             if isinstance(args.get(key), int)]
    shape += [f"{label} {args[key]}" for key, label in (("n_embd", "width"), ("vocab_size", "vocabulary"),
                                                        ("block_size", "context")) if isinstance(args.get(key), int)]
    return "a GPT-2-style model" + (f" ({', '.join(shape)})" if shape else "")


def _optimizer_text(state: InspectionState) -> str:
    """nanoGPT's optimizer state dict in words: which moments, for how many parameters."""
    optimizer: Mapping[str, Any] = state.get(StateGroup.OPTIMIZER)
    if not optimizer:
        return ""
    parts = []
    moments = [str(k) for k in optimizer.get("state_per_parameter") or []]
    if moments:
        parts.append(" and ".join([", ".join(moments[:-1]), moments[-1]] if len(moments) > 1 else moments))
    with_state = optimizer.get("parameters_with_state")
    if isinstance(with_state, int):
        parts.append(f"for {counted(with_state, 'parameter')}")
    groups = optimizer.get("param_groups")
    if isinstance(groups, int):
        parts.append(f"in {counted(groups, 'group')}")
    return "its own optimizer state" + (f" ({' '.join(parts)})" if parts else "")


def file_uses(inspection: Any) -> FileUses | None:
    """How a foreign file is described and used; None for minigpt-tui's own files and folders."""
    kind = str(inspection.kind)
    if kind not in FOREIGN_KINDS:
        return None
    tensors = counted(len(inspection.entries), "tensor")
    state = inspection.state
    no_convert = "it cannot be converted (minigpt-tui convert reads transformers folders)"
    if kind == "nanogpt":
        optimizer = _optimizer_text(state)
        contents = tensors + (f" and {optimizer}, which this tool does not resume from" if optimizer else "")
        return FileUses(f"a nanoGPT checkpoint (a PyTorch pickle from another tool) of {_nanogpt_family(state)}",
                        contents, INSPECT_USES, no_convert)
    if kind == "torch-pickle":
        return FileUses("a PyTorch state dict from another tool", tensors, INSPECT_USES, no_convert)
    if kind == "safetensors":
        return FileUses("a safetensors file made by another tool", tensors, INSPECT_USES, no_convert)
    model = state.get(StateGroup.MODEL)
    family = model.get("architecture") or model.get("model_type")
    name = f"a transformers model folder ({family})" if isinstance(family, str) else "a transformers model folder"
    if model.get("convertible") is True:
        convert = f"minigpt-tui convert --hf {inspection.path} --out FILE makes one of it"
    elif isinstance(model.get("unsupported"), str):
        convert = f"minigpt-tui convert refuses this folder: {model['unsupported']}"
    else:
        convert = "minigpt-tui convert --hf FOLDER --out FILE says whether it converts"
    return FileUses(name, tensors, INSPECT_USES, convert)
