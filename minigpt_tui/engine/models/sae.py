"""A sparse autoencoder over one site's activations, and SAELens' folder layout.

``f = act(x @ W_enc + b_enc)`` (``x - b_dec`` first when ``apply_b_dec_to_input``), and the
reconstruction ``x_hat = f @ W_dec + b_dec``. Three activations, as SAELens names its
architectures:

- ``relu`` (SAELens ``standard``): ReLU, trained with an L1 penalty on ``f`` weighted by each
  decoder row's norm (so shrinking the decoder cannot buy sparsity);
- ``topk``: the K largest pre-activations kept (through a ReLU), every other feature zero;
- ``jumprelu``: a pre-activation kept only above its feature's ``threshold``.

A folder in SAELens' layout holds ``cfg.json`` and ``sae_weights.safetensors`` with
``W_enc [d_in, d_sae]``, ``b_enc [d_sae]``, ``W_dec [d_sae, d_in]``, ``b_dec [d_in]`` and,
for JumpReLU, ``threshold [d_sae]``. Reading one checks every tensor, shape, dtype and config
field and refuses a bad one in one line; the folder is written aside, then put in place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from minigpt_tui.engine.core.errors import CheckpointError
from minigpt_tui.engine.core.files import built_then_installed, check_new_output, shorten_middle, work_path
from minigpt_tui.engine.formats.bounded_json import read_json_input
from minigpt_tui.engine.formats.safetensors_read import load_file
from minigpt_tui.engine.formats.safetensors_write import write_safetensors

KINDS = ("relu", "topk", "jumprelu")
# Our kind's name in SAELens' cfg.json ``architecture`` field, and back.
ARCHITECTURE = {"relu": "standard", "topk": "topk", "jumprelu": "jumprelu"}
KIND_OF_ARCHITECTURE = {v: k for k, v in ARCHITECTURE.items()}
CONFIG_FILE, WEIGHTS_FILE = "cfg.json", "sae_weights.safetensors"
DTYPES = {"float32": torch.float32, "float64": torch.float64}
CONFIG_LIMIT = 1 << 20  # a cfg.json is a few kilobytes
MAX_FEATURES = 1 << 24


class SAERefused(CheckpointError):
    """A sparse autoencoder's folder or settings cannot be used (one line)."""


@dataclass(frozen=True)
class SAEConfig:
    """What a sparse autoencoder is: its kind, widths, K (topk), the site it reads and the
    model it was trained on (both as names), and whether ``b_dec`` is taken from the input."""

    kind: str
    d_in: int
    d_sae: int
    hook_name: str
    k: int | None = None
    model_name: str = ""
    apply_b_dec_to_input: bool = False
    dtype: str = "float64"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SAERefused(f"unknown sparse-autoencoder kind '{self.kind}' (kinds: {', '.join(KINDS)})")
        for name, value in (("d_in", self.d_in), ("d_sae", self.d_sae)):
            if not _count_within(value, MAX_FEATURES):
                raise SAERefused(f"{name} must be a whole number from 1 to {MAX_FEATURES}, got {value!r}")
        if self.kind == "topk" and not _count_within(self.k, self.d_sae):
            raise SAERefused(f"a topk sparse autoencoder needs k from 1 to d_sae={self.d_sae}, got {self.k!r}")
        if self.dtype not in DTYPES:
            raise SAERefused(f"dtype '{self.dtype}' is not supported (float32 or float64)")

    def to_json(self) -> dict[str, Any]:
        """The cfg.json SAELens (version 6) reads."""
        data: dict[str, Any] = {
            "architecture": ARCHITECTURE[self.kind], "d_in": self.d_in, "d_sae": self.d_sae, "dtype": self.dtype,
            "device": "cpu", "apply_b_dec_to_input": self.apply_b_dec_to_input, "normalize_activations": "none",
            "reshape_activations": "none",
            "metadata": {"hook_name": self.hook_name, "model_name": self.model_name, "prepend_bos": True},
        }
        if self.kind == "topk":
            data["k"] = self.k
        return data


def _count_within(value: Any, limit: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and 1 <= value <= limit


class SparseAutoencoder(nn.Module):
    """The encoder, the activation and the decoder (see the module doc)."""

    def __init__(self, config: SAEConfig) -> None:
        super().__init__()
        self.config = config
        dtype = DTYPES[config.dtype]
        self.W_enc = nn.Parameter(torch.zeros(config.d_in, config.d_sae, dtype=dtype))
        self.b_enc = nn.Parameter(torch.zeros(config.d_sae, dtype=dtype))
        self.W_dec = nn.Parameter(torch.zeros(config.d_sae, config.d_in, dtype=dtype))
        self.b_dec = nn.Parameter(torch.zeros(config.d_in, dtype=dtype))
        self.threshold = nn.Parameter(torch.zeros(config.d_sae, dtype=dtype), requires_grad=False)

    def tensors(self) -> list[tuple[str, Tensor]]:
        """The tensors SAELens saves, in its order (``threshold`` only for JumpReLU)."""
        names = ["W_enc", "b_enc", "W_dec", "b_dec"] + (["threshold"] if self.config.kind == "jumprelu" else [])
        return [(name, getattr(self, name).detach()) for name in names]

    def pre_activations(self, x: Tensor) -> Tensor:
        if self.config.apply_b_dec_to_input:
            x = x - self.b_dec
        return x @ self.W_enc + self.b_enc

    def encode(self, x: Tensor) -> Tensor:
        """The feature activations [..., d_sae] of activations ``x`` [..., d_in]."""
        return self.activate(self.pre_activations(x))

    def activate(self, pre: Tensor) -> Tensor:
        """The kind's activation of pre-activations ``pre`` (of any floating dtype)."""
        if self.config.kind == "topk":
            kept = torch.topk(pre, self.config.k, dim=-1)
            return torch.zeros_like(pre).scatter(-1, kept.indices, torch.relu(kept.values))
        if self.config.kind == "jumprelu":
            return torch.relu(pre) * (pre > self.threshold.to(pre.dtype))
        return torch.relu(pre)

    def decode(self, features: Tensor) -> Tensor:
        return features @ self.W_dec + self.b_dec

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The reconstruction and the features."""
        features = self.encode(x)
        return self.decode(features), features


def initialized(config: SAEConfig, seed: int, mean: Tensor | None = None) -> SparseAutoencoder:
    """A new autoencoder: decoder rows drawn with ``seed`` and scaled to norm 0.1, the encoder
    their transpose, ``b_enc`` zero and ``b_dec`` the activations' ``mean`` (zero if none)."""
    sae = SparseAutoencoder(config)
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randn(config.d_sae, config.d_in, generator=generator, dtype=torch.float64)
    rows = 0.1 * rows / rows.norm(dim=-1, keepdim=True)
    with torch.no_grad():
        sae.W_dec.copy_(rows)
        sae.W_enc.copy_(rows.t())
        if mean is not None:
            sae.b_dec.copy_(mean)
    return sae


# -- SAELens' folder layout ---------------------------------------------------------------
def write_saelens(sae: SparseAutoencoder, folder: Path | str) -> Path:
    """``cfg.json`` and ``sae_weights.safetensors`` in a new ``folder`` (built aside, then
    installed: a folder already there is refused, never replaced)."""
    final = check_new_output(folder)
    config_bytes = (json.dumps(sae.config.to_json(), indent=2) + "\n").encode("utf-8")
    tensors = [(name, tensor.contiguous()) for name, tensor in sae.tensors()]
    with built_then_installed(work_path(final), final, f"cannot write {final}", error=SAERefused) as work:
        (work / CONFIG_FILE).write_bytes(config_bytes)
        write_safetensors(work / WEIGHTS_FILE, tensors, atomic=False)
    return final


def read_saelens(folder: Path | str) -> SparseAutoencoder:
    """The autoencoder a SAELens folder holds, every part checked (see the module doc)."""
    folder = Path(folder)
    where = shorten_middle(str(folder))
    if not folder.is_dir():
        raise SAERefused(f"{where} is not a folder (a sparse autoencoder is a folder with {CONFIG_FILE} "
                         f"and {WEIGHTS_FILE})")
    config = config_from_json(read_json_input(folder / CONFIG_FILE, f"{where}'s {CONFIG_FILE}", limit=CONFIG_LIMIT),
                              where)
    loaded = load_file(folder / WEIGHTS_FILE)
    sae = SparseAutoencoder(config)
    found = set(loaded.header.names)
    wanted = [name for name, _ in sae.tensors()]
    _check_names(where, found, wanted)
    with torch.no_grad():
        for name in wanted:
            getattr(sae, name).copy_(_checked_tensor(where, name, loaded.tensor(name), getattr(sae, name)))
    return sae


def _check_names(where: str, found: set[str], wanted: list[str]) -> None:
    missing = [name for name in wanted if name not in found]
    if missing:
        raise SAERefused(f"{where}: {WEIGHTS_FILE} lacks {', '.join(missing)}")
    extra = sorted(found - set(wanted))
    if extra:
        raise SAERefused(f"{where}: {WEIGHTS_FILE} holds tensors this kind does not use: {', '.join(extra)}")


def _checked_tensor(where: str, name: str, tensor: Tensor, slot: Tensor) -> Tensor:
    if tensor.dtype != slot.dtype:
        raise SAERefused(f"{where}: {name} is {str(tensor.dtype).removeprefix('torch.')}, "
                         f"cfg.json says {str(slot.dtype).removeprefix('torch.')}")
    if tuple(tensor.shape) != tuple(slot.shape):
        raise SAERefused(f"{where}: {name} has shape {list(tensor.shape)}, expected {list(slot.shape)} "
                         "from cfg.json's d_in and d_sae")
    if not torch.isfinite(tensor).all():
        raise SAERefused(f"{where}: {name} holds a value that is not finite")
    return tensor


def config_from_json(data: Any, where: str) -> SAEConfig:
    """An :class:`SAEConfig` from a cfg.json SAELens wrote (version 6, or the older layout
    with ``activation_fn`` and top-level ``hook_name``)."""
    if not isinstance(data, dict):
        raise SAERefused(f"{where}: {CONFIG_FILE} is not a JSON object")
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    for field in ("d_in", "d_sae"):
        if field not in data:
            raise SAERefused(f"{where}: {CONFIG_FILE} has no '{field}'")
    hook_name = metadata.get("hook_name", data.get("hook_name"))
    if not isinstance(hook_name, str) or not hook_name:
        raise SAERefused(f"{where}: {CONFIG_FILE} names no site ('hook_name')")
    _check_input_handling(data, where)
    model_name = metadata.get("model_name", data.get("model_name", ""))
    try:
        return SAEConfig(_kind_of(data, where), data["d_in"], data["d_sae"], hook_name, _k_of(data),
                         model_name if isinstance(model_name, str) else "", data.get("apply_b_dec_to_input", False),
                         str(data.get("dtype", "")))
    except SAERefused as err:
        raise SAERefused(f"{where}: {err}") from None


def _check_input_handling(data: dict[str, Any], where: str) -> None:
    """Refuse an input normalization we do not apply, and a non-boolean apply_b_dec_to_input."""
    normalize = data.get("normalize_activations", "none")
    if normalize not in (None, "none"):
        raise SAERefused(f"{where}: normalize_activations '{normalize}' is not supported (only 'none')")
    apply_b_dec = data.get("apply_b_dec_to_input", False)
    if not isinstance(apply_b_dec, bool):
        raise SAERefused(f"{where}: apply_b_dec_to_input must be true or false, got {apply_b_dec!r}")


def _kind_of(data: dict[str, Any], where: str) -> str:
    architecture = data.get("architecture", "standard")
    if architecture == "standard" and data.get("activation_fn") == "topk":
        return "topk"  # the older layout: a standard architecture with a topk activation
    if architecture not in KIND_OF_ARCHITECTURE:
        raise SAERefused(f"{where}: architecture '{architecture}' is not supported "
                         f"({', '.join(KIND_OF_ARCHITECTURE)})")
    if architecture == "standard" and data.get("activation_fn", "relu") != "relu":
        raise SAERefused(f"{where}: activation_fn '{data.get('activation_fn')}' is not supported (relu or topk)")
    return KIND_OF_ARCHITECTURE[architecture]


def _k_of(data: dict[str, Any]) -> Any:
    kwargs = data.get("activation_fn_kwargs")
    if "k" not in data and isinstance(kwargs, dict):
        return kwargs.get("k")
    return data.get("k")
