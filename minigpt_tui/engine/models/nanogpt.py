"""nanoGPT's own checkpoints: a ``ckpt.pt`` opens as the gpt2-family model it is.

nanoGPT saves ``{"model": state_dict, "model_args": {n_layer, n_head, n_embd, block_size,
bias, vocab_size, dropout}, "iter_num", "best_val_loss", "config", "optimizer"}``. Its
model is GPT-2 with ``nn.Linear`` weights (q, k and v side by side in ``c_attn``), exact
GELU, LayerNorm with epsilon 1e-5, and biases on every projection and norm only when
``bias`` is true; the head is the token table. A state dict saved from a compiled model
carries ``_orig_mod.`` before every name; it is taken off.

The checkpoint is read with ``torch.load(weights_only=True)``. Its tokenizer is the
character table ``meta.pkl`` beside it (nanoGPT's ``prepare.py`` writes ``stoi``/``itos``),
read by an unpickler that admits dicts, lists, tuples, strings and ints and refuses
anything else in one line, or a ``tokenizer.json`` / ``meta.pkl`` the user names.
"""

from __future__ import annotations

import hashlib
import io
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.config import ModelConfig
from minigpt_tui.engine.core.errors import (
    CheckpointError,
    GenerationError,
    TokenizerError,
)
from minigpt_tui.engine.core.files import read_small_file
from minigpt_tui.engine.core.library_tokenizer import read_library_tokenizer
from minigpt_tui.engine.core.tokenizer import Decoded
from minigpt_tui.engine.formats.foreign_pickle import load_torch_pickle, require_weights
from minigpt_tui.engine.models.hf_models import built_model, compute_dtype

if TYPE_CHECKING:
    import torch

    from minigpt_tui.engine.models.model_file import PortableModel

META_FILE = "meta.pkl"
META_LIMIT = 64 * 1024 * 1024
COMPILED_PREFIX = "_orig_mod."
MODEL_ARGS = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")


class _DataOnly(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings and numbers; any class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}; only plain data is read from a meta.pkl")


def read_meta(path: Path) -> dict[str, Any]:
    data = read_small_file(path, META_LIMIT, "a meta.pkl")
    try:
        meta = _DataOnly(io.BytesIO(data)).load()
    except pickle.UnpicklingError as err:
        raise CheckpointError(f"{path}: refused: {err}") from None
    except Exception as err:  # a damaged pickle fails in many ways; each is one line
        raise CheckpointError(f"{path}: not a readable meta.pkl ({type(err).__name__}: {str(err)[:120]})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("itos"), dict):
        raise CheckpointError(f"{path}: no character table (itos) in this meta.pkl")
    return meta


@dataclass(frozen=True, eq=False)
class CharTokenizer:
    """nanoGPT's character-level table: id i is the character ``itos[i]``; no BOS, no EOS."""

    itos: tuple[str, ...]
    vocab_size: int
    source: str = ""
    bos_id: None = None
    eos_ids: tuple[int, ...] = ()
    merges: tuple[()] = ()
    kind: str = "nanogpt-characters"

    @staticmethod
    def from_meta(meta: dict[str, Any], vocab_size: int, source: str) -> "CharTokenizer":
        itos = meta["itos"]
        if not all(isinstance(k, int) and isinstance(v, str) for k, v in itos.items()):
            raise CheckpointError(f"{source}: itos must map ids to characters")
        if sorted(itos) != list(range(len(itos))) or len(itos) > vocab_size:
            raise CheckpointError(f"{source}: itos must cover ids 0 to {len(itos) - 1} within the model's "
                                  f"{vocab_size} rows")
        return CharTokenizer(tuple(itos[i] for i in range(len(itos))), vocab_size, source)

    @cached_property
    def _stoi(self) -> dict[str, int]:
        return {ch: i for i, ch in enumerate(self.itos)}

    @cached_property
    def identity(self) -> str:
        return hashlib.sha256(("nanogpt-characters\0" + "\0".join(self.itos)).encode()).hexdigest()

    def encode_prompt(self, text: str) -> list[int]:
        ids = []
        for ch in text:
            if ch not in self._stoi:
                raise GenerationError(f"the character {ch!r} is not in this model's {len(self.itos)}-character table")
            ids.append(self._stoi[ch])
        return ids

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        return self.encode_prompt(text)  # no BOS or EOS to add

    def piece(self, token_id: int) -> bytes:
        if not 0 <= token_id < self.vocab_size:
            raise TokenizerError(f"token id {token_id} is outside the vocabulary of {self.vocab_size}")
        return self.itos[token_id].encode("utf-8") if token_id < len(self.itos) else b""

    def piece_text(self, token_id: int) -> str:
        return self.piece(token_id).decode("utf-8", errors="backslashreplace")

    def decode(self, ids: list[int]) -> Decoded:
        return Decoded.of(b"".join(self.piece(i) for i in ids))


def _model_args(obj: Any, path: Path) -> dict[str, Any]:
    if not (isinstance(obj, dict) and isinstance(obj.get("model"), dict) and isinstance(obj.get("model_args"), dict)):
        raise CheckpointError(f"{path}: not a nanoGPT checkpoint (no 'model' state dict and 'model_args')")
    args = obj["model_args"]
    for key in MODEL_ARGS:
        value = args.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CheckpointError(f"{path}: model_args.{key} must be a positive integer, got {value!r}")
    if args["n_embd"] % args["n_head"]:
        raise CheckpointError(f"{path}: model_args.n_embd {args['n_embd']} is not a multiple of n_head {args['n_head']}")
    return args


def nanogpt_config(args: dict[str, Any]) -> Any:
    bias = bool(args.get("bias", True))
    width = args["n_embd"]
    return ModelConfig(family="gpt2", width=width, heads=args["n_head"], kv_heads=args["n_head"], ffn=4 * width,
                       layers=args["n_layer"], context=args["block_size"], dropout=0.0, norm_eps=1e-5,
                       gelu_approximation="none", attention_bias="all" if bias else "none", ffn_bias=bias,
                       norm_bias=bias)


def _our_tensors(state: dict[str, "torch.Tensor"], config: Any, path: Path) -> dict[str, "torch.Tensor"]:
    require_weights(path, state)
    state = {str(k).removeprefix(COMPILED_PREFIX): v for k, v in state.items()}
    used = {"lm_head.weight"}  # the head: nanoGPT ties it to the token table

    def get(name: str) -> "torch.Tensor":
        tensor = state.get("transformer." + name)
        if tensor is None:
            raise CheckpointError(f"{path}: the state dict has no 'transformer.{name}'")
        used.add("transformer." + name)
        return tensor

    kinds = ("weight", "bias") if config.ffn_bias else ("weight",)
    out = {"token_embedding.weight": get("wte.weight"), "position_embedding.weight": get("wpe.weight")}
    for i in range(config.layers):
        for kind in kinds:
            out.update(_block_tensors(get, i, kind, config.width))
    for kind in kinds:
        out[f"final_norm.{kind}"] = get(f"ln_f.{kind}")
    # A tensor the model_args have no place for (a layer past n_layer) is refused, not dropped.
    extra = [name for name in state if name not in used and not name.endswith(".attn.bias")]
    if extra:
        raise CheckpointError(f"{path}: unexpected tensor '{extra[0]}' ({len(extra)} in all): not part of the "
                              f"{config.layers}-layer model that model_args declare")
    return out


# Our names for a nanoGPT block's tensors (besides the fused q/k/v rows).
_BLOCK_NAMES = (("attn.o_proj", "attn.c_proj"), ("ffn.up_proj", "mlp.c_fc"), ("ffn.down_proj", "mlp.c_proj"),
                ("attn_norm", "ln_1"), ("ffn_norm", "ln_2"))


def _block_tensors(get: Callable[[str], "torch.Tensor"], i: int, kind: str, width: int) -> dict[str, "torch.Tensor"]:
    """Block ``i``'s ``kind`` (weight or bias) tensors under our names."""
    ours, theirs = f"blocks.{i}.", f"h.{i}."
    out = {f"{ours}attn.{proj}_proj.{kind}": rows
           for proj, rows in zip("qkv", get(f"{theirs}attn.c_attn.{kind}").split(width, dim=0))}
    out.update({f"{ours}{mine}.{kind}": get(f"{theirs}{file}.{kind}") for mine, file in _BLOCK_NAMES})
    return out


def _tokenizer(path: Path, vocab_size: int, given: Path | None) -> Any:
    source = given if given is not None else path.parent / META_FILE
    if given is None and not source.is_file():
        raise CheckpointError(f"{path}: no {META_FILE} beside it (nanoGPT's character table); name a tokenizer "
                              "with --tokenizer tokenizer.json or meta.pkl")
    if source.suffix == ".json":
        try:
            return read_library_tokenizer(source, vocab_size, bos_id=None, eos_ids=())
        except TokenizerError as err:
            raise CheckpointError(str(err)) from None
    return CharTokenizer.from_meta(read_meta(source), vocab_size, str(source))


def open_nanogpt(path: Path | str, *, dtype: str = "float32", tokenizer: Path | str | None = None) -> "PortableModel":
    """A nanoGPT ``ckpt.pt`` as a ready model with its character table (see module doc)."""
    from minigpt_tui.engine.models.model_file import (  # deferred: imports torch
        PortableModel,
    )

    torch_dtype = compute_dtype(dtype)
    path = Path(path).expanduser()
    obj = load_torch_pickle(path, mmap=True)
    args = _model_args(obj, path)
    config = nanogpt_config(args)
    named = _our_tensors(obj["model"], config, path)
    vocab_size = int(named["token_embedding.weight"].shape[0])
    chars = _tokenizer(path, vocab_size, None if tokenizer is None else Path(tokenizer).expanduser())
    model = built_model(config, named, torch_dtype, path)
    digest = hashlib.sha256(b"nanogpt-ckpt\0")
    for name in sorted(named):
        digest.update(name.encode() + b"\0" + named[name].detach().to(torch_dtype).contiguous().numpy().tobytes())
    metadata = {"source": "nanogpt", "family": "gpt2", "dtype": dtype, "iter_num": obj.get("iter_num")}
    return PortableModel(model, chars, config, digest.hexdigest(), path, metadata)
