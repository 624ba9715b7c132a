"""Foreign files for the app tests, made in the test: a nanoGPT ``ckpt.pt`` (the dict
nanoGPT's train.py saves, around a small GPT with its tensor names), a sharded safetensors
folder with its index, and a safetensors file of many tiny tensors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import safetensors.numpy
import torch
from torch import nn


def nanogpt_ckpt(path: Path, *, layers: int = 2, width: int = 8, vocab: int = 13, block: int = 8) -> Path:
    """A ``ckpt.pt`` as nanoGPT saves it: model and optimizer state dicts, model args,
    iteration, best validation loss and the training config; lm_head tied to wte."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(width)
            self.attn = nn.ModuleDict({"c_attn": nn.Linear(width, 3 * width), "c_proj": nn.Linear(width, width)})
            self.ln_2 = nn.LayerNorm(width)
            self.mlp = nn.ModuleDict({"c_fc": nn.Linear(width, 4 * width), "c_proj": nn.Linear(4 * width, width)})

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = nn.ModuleDict({
                "wte": nn.Embedding(vocab, width),
                "wpe": nn.Embedding(block, width),
                "h": nn.ModuleList([Block() for _ in range(layers)]),
                "ln_f": nn.LayerNorm(width),
            })
            self.lm_head = nn.Linear(width, vocab, bias=False)
            self.lm_head.weight = self.transformer["wte"].weight

    torch.manual_seed(0)
    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    hidden = model.transformer["ln_f"](model.transformer["wte"](torch.tensor([1, 2, 3])))
    model.lm_head(hidden).square().mean().backward()
    optimizer.step()
    torch.save({
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "model_args": {"n_layer": layers, "n_head": 2, "n_embd": width, "block_size": block, "bias": True,
                       "vocab_size": vocab, "dropout": 0.0},
        "iter_num": 250,
        "best_val_loss": torch.tensor(1.8125),
        "config": {"batch_size": 12, "learning_rate": 6e-4, "dataset": "shakespeare_char", "compile": False},
    }, path)
    return path


def sharded_folder(folder: Path, shards: int = 4) -> Path:
    """A transformers folder: ``model-0000i-of-0000n.safetensors`` files, their
    ``model.safetensors.index.json`` and a ``config.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    for index in range(1, shards + 1):
        name = f"model-{index:05d}-of-{shards:05d}.safetensors"
        tensors = {f"layers.{index - 1}.weight": np.full((2, 3), index, dtype=np.float32)}
        safetensors.numpy.save_file(tensors, str(folder / name))
        weight_map.update({key: name for key in tensors})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    return folder


def many_tensors_file(path: Path, count: int = 10_000) -> Path:
    """A safetensors file of ``count`` one-element tensors named like a deep model's."""
    tensors = {f"model.layers.{i // 10}.block.{i % 10}.weight": np.full((1,), i, dtype=np.float32)
               for i in range(count)}
    safetensors.numpy.save_file(tensors, str(path))
    return path


class TinyNanoGPT(nn.Module):
    """The tensor layout of nanoGPT's GPT at toy size: lm_head tied to wte."""

    def __init__(self) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict({
            "wte": nn.Embedding(11, 4),
            "wpe": nn.Embedding(8, 4),
            "ln_f": nn.LayerNorm(4),
        })
        self.lm_head = nn.Linear(4, 11, bias=False)
        self.lm_head.weight = self.transformer["wte"].weight


def nanogpt_checkpoint(path: Path) -> TinyNanoGPT:
    torch.manual_seed(0)
    model = TinyNanoGPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    loss = model.lm_head(model.transformer["ln_f"](model.transformer["wte"](torch.tensor([1, 2, 3])))).square().mean()
    loss.backward()
    optimizer.step()
    checkpoint = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "model_args": {"n_layer": 0, "n_head": 1, "n_embd": 4, "block_size": 8, "bias": True, "vocab_size": 11,
                       "dropout": 0.0},
        "iter_num": 250,
        "best_val_loss": torch.tensor(1.8125),
        "config": {"batch_size": 12, "learning_rate": 6e-4, "dataset": "shakespeare_char", "compile": False},
    }
    torch.save(checkpoint, path)
    return model


class RunsAShellCommand:
    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))
