"""Round four, tokenizers: tokenizer.json files and GGUF vocabularies that made the
``tokenizers`` library abort the process (SIGABRT), panic over the terminal, cut a prompt,
or spend minutes and gigabytes before a refusal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attack_cases import Case

PREFIX = "r4 tokenizers: "
WIDTH, VOCAB = 8, 300


def _byte_level_document() -> dict[str, Any]:
    """A byte-level BPE tokenizer.json of ``VOCAB`` ids, trained here on a short text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.train_from_iterator(["hello world, a small text about aaa and bbb"] * 20, trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return json.loads(raw.to_str())


def _gpt2_folder(root: Path, change: dict[str, Any]) -> Path:
    """A one-block gpt2 transformers folder (zero weights) whose tokenizer.json has ``change``."""
    import numpy as np
    from safetensors.numpy import save_file

    folder = root / "hf"
    folder.mkdir()
    c = WIDTH
    shapes = {"transformer.wte.weight": (VOCAB, c), "transformer.wpe.weight": (32, c),
              "transformer.ln_f.weight": (c,), "transformer.ln_f.bias": (c,)}
    block = {"ln_1.weight": (c,), "ln_1.bias": (c,), "ln_2.weight": (c,), "ln_2.bias": (c,),
             "attn.c_attn.weight": (c, 3 * c), "attn.c_attn.bias": (3 * c,), "attn.c_proj.weight": (c, c),
             "attn.c_proj.bias": (c,), "mlp.c_fc.weight": (c, 4 * c), "mlp.c_fc.bias": (4 * c,),
             "mlp.c_proj.weight": (4 * c, c), "mlp.c_proj.bias": (c,)}
    shapes.update({f"transformer.h.0.{name}": shape for name, shape in block.items()})
    save_file({name: np.full(shape, 0.01, dtype=np.float32) for name, shape in shapes.items()},
              str(folder / "model.safetensors"))
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": VOCAB, "n_embd": c,
              "n_layer": 1, "n_head": 2, "n_positions": 32, "n_inner": None, "activation_function": "gelu_new",
              "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "bos_token_id": 0, "eos_token_id": 0}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text(json.dumps({**_byte_level_document(), **change}))
    return folder


def _generate(folder: Path) -> list[str]:
    return ["generate", "--model", str(folder), "--prompt", "hello world aaaa", "--max-new-tokens", "2"]


def _gguf(root: Path, tokens: list[str], rows: int) -> Path:
    """A one-block llama GGUF (zero weights) with a SentencePiece vocabulary."""
    import gguf
    import numpy as np

    path = root / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, setting in (("block_count", 1), ("context_length", 16), ("embedding_length", WIDTH),
                          ("feed_forward_length", 16), ("attention.head_count", 2), ("attention.head_count_kv", 2)):
        writer.add_uint32(f"llama.{name}", setting)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([-float(i) for i in range(len(tokens))])
    writer.add_token_types([1] * len(tokens))
    c = WIDTH
    shapes = {"token_embd.weight": (rows, c), "output_norm.weight": (c,), "blk.0.attn_norm.weight": (c,),
              "blk.0.ffn_norm.weight": (c,), "blk.0.attn_q.weight": (c, c), "blk.0.attn_k.weight": (c, c),
              "blk.0.attn_v.weight": (c, c), "blk.0.attn_output.weight": (c, c), "blk.0.ffn_gate.weight": (16, c),
              "blk.0.ffn_up.weight": (16, c), "blk.0.ffn_down.weight": (c, 16)}
    for name, shape in shapes.items():
        writer.add_tensor(name, np.zeros(shape, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _split(pattern: str) -> dict[str, Any]:
    return {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}}


def _replace(pattern: dict[str, str], content: str, times: int = 1) -> dict[str, Any]:
    return {"normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Replace", "pattern": pattern, "content": content}] * times}}


def cases() -> list[Case]:
    padding = {"padding": {"strategy": {"Fixed": 1_000_000_000}, "direction": "Right", "pad_to_multiple_of": None,
                           "pad_id": 0, "pad_type_id": 0, "pad_token": "<eos>"}}
    many = [f"t{i}" for i in range(200_000)]
    return [
        Case(PREFIX + "padding Fixed 1e9 (aborted)", lambda r: _generate(_gpt2_folder(r, padding))),
        Case(PREFIX + "40 chained Replace a->aa (aborted at 5 GB)",
             lambda r: _generate(_gpt2_folder(r, _replace({"String": "a"}, "aa", 40)))),
        Case(PREFIX + "Replace of the empty string (panic)", lambda r: _generate(_gpt2_folder(r, _replace({"String": ""}, "x")))),
        Case(PREFIX + "Replace with a regex matching empty (panic)",
             lambda r: _generate(_gpt2_folder(r, _replace({"Regex": "z*"}, "x")))),
        Case(PREFIX + "backtracking Split regex (panic)", lambda r: [
            "generate", "--model", str(_gpt2_folder(r, _split("(x+x+)+y"))), "--prompt", "x" * 5000,
            "--max-new-tokens", "1"]),
        Case(PREFIX + "tokenizer.json with more ids than rows", lambda r: _generate(_gpt2_folder(r, {"added_tokens": [
            {"id": 5000, "content": "<x>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
             "special": True}]}))),
        Case(PREFIX + "GGUF vocabulary of 200k for 40 rows", lambda r: ["generate", "--model", str(_gguf(r, many, 40)),
                                                                        "--prompt", "t1"]),
        Case(PREFIX + "GGUF token of a million characters (119 s)",
             lambda r: ["generate", "--model", str(_gguf(r, ["a", "b", "ab", "a" * 1_000_000], 4)), "--prompt", "ab"]),
        Case(PREFIX + "train --init-from a GGUF token of a million characters", lambda r: [
            "train", "--init-from", str(_gguf(r, ["a", "b", "ab", "a" * 1_000_000], 4)), "--steps", "1"]),
    ]
