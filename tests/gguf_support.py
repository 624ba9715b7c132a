"""GGUF files written in the test with the gguf package's own writer and quantizers, from
transformers models made in the test, laid out as llama.cpp's converter lays them out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from family_support import byte_level_tokenizer, family_config

QUANTIZABLE = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "attn_qkv.weight",
               "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")


def _permute(rows: np.ndarray, heads: int) -> np.ndarray:
    """transformers' rotate-half q/k rows into llama.cpp's interleaved order."""
    return rows.reshape(heads, 2, rows.shape[0] // heads // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def _tensors(model, family: str) -> list[tuple[str, np.ndarray]]:
    import gguf

    config = model.config
    arch = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2, "gpt2": gguf.MODEL_ARCH.GPT2,
            "qwen3": gguf.MODEL_ARCH.QWEN3, "phi3": gguf.MODEL_ARCH.PHI3}[family]
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    out = []
    for name, tensor in model.state_dict().items():
        if name.endswith((".attn.bias", ".attn.masked_bias")) or (name == "lm_head.weight"
                                                                 and config.tie_word_embeddings):
            continue
        data = tensor.detach().to(torch.float32).numpy()
        if family == "gpt2" and name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            data = data.T.copy()
        if family == "llama" and name.endswith("q_proj.weight"):
            data = _permute(data, config.num_attention_heads)
        if family == "llama" and name.endswith("k_proj.weight"):
            data = _permute(data, config.num_key_value_heads)
        mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert mapped is not None, name
        out.append((mapped, np.ascontiguousarray(data)))
    return out


def write_gguf(model, tokenizer, family: str, path: Path, quant: str = "F32", pre: str = "gpt2",
               chat_template: str | None = None, extra: tuple[tuple[str, np.ndarray], ...] = ()) -> Path:
    """``tokenizer``: a tokenizers.Tokenizer (byte-level BPE) that the model's ids follow;
    ``extra``: tensors written after the model's."""
    import json

    import gguf

    arch = {"llama": "llama", "qwen2": "qwen2", "gpt2": "gpt2", "qwen3": "qwen3", "phi3": "phi3"}[family]
    writer = gguf.GGUFWriter(str(path), arch)
    config = model.config
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(getattr(config, "intermediate_size", None) or 4 * config.hidden_size)
    writer.add_head_count(config.num_attention_heads)
    if family == "gpt2":
        writer.add_layer_norm_eps(config.layer_norm_epsilon)
    else:
        writer.add_head_count_kv(config.num_key_value_heads)
        writer.add_layer_norm_rms_eps(config.rms_norm_eps)
        writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        writer.add_rope_dimension_count(int(head_dim * config.rope_parameters.get("partial_rotary_factor", 1.0)))
        if family == "qwen3":  # llama.cpp's converter writes Qwen3's own head width
            writer.add_key_length(head_dim)
            writer.add_value_length(head_dim)
        if getattr(config, "sliding_window", None) and family == "phi3":
            writer.add_sliding_window(config.sliding_window)
    data = json.loads(tokenizer.to_str())
    vocab = sorted(data["model"]["vocab"].items(), key=lambda item: item[1])
    tokens = [t for t, _ in vocab]
    # A vocabulary as long as the model's rows (transformers' GGUF loader takes its size from it).
    tokens += [f"[PAD{i}]" for i in range(len(tokens), model.config.vocab_size)]
    specials = {t["id"] for t in data["added_tokens"] if t["special"]}
    writer.add_token_list(tokens)
    if data["model"].get("byte_fallback"):
        # A SentencePiece vocabulary as llama.cpp writes one: scores, token types, no merges.
        writer.add_tokenizer_model("llama")
        writer.add_token_scores([-float(i) for i in range(len(tokens))])
        kinds = {"<unk>": 2, "<s>": 3, "</s>": 3}
        writer.add_token_types([kinds.get(t, 6 if t.startswith("<0x") else 1) for t in tokens])
    else:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre)
        writer.add_token_types([3 if i in specials else (5 if tokens[i].startswith("[PAD") else 1)
                                for i in range(len(tokens))])
        merges = data["model"]["merges"]
        writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
        writer.add_add_bos_token(False)
    writer.add_bos_token_id(config.bos_token_id)
    writer.add_eos_token_id(config.eos_token_id)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    kind = getattr(gguf.GGMLQuantizationType, quant)
    for name, array in [*_tensors(model, family), *extra]:
        if quant != "F32" and name.endswith(QUANTIZABLE) and array.shape[-1] % 32 == 0:
            packed = gguf.quants.quantize(array, kind)
            writer.add_tensor(name, packed, raw_shape=packed.shape, raw_dtype=kind)
        else:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# -- random transformers models of three families, written as GGUF ------------------------------
SHAPES = {"llama": {"hidden_size": 64}, "qwen2": {"hidden_size": 64}, "gpt2": {"n_embd": 64, "n_positions": 1024},
          "qwen3": {"hidden_size": 64}, "phi3": {"hidden_size": 64}}


def random_family_model(family: str, seed: int):
    import transformers as tr

    raw = byte_level_tokenizer(split_regex=family in ("qwen2", "qwen3"))
    end = raw.token_to_id("<|endoftext|>")
    torch.manual_seed(seed)
    model = tr.AutoModelForCausalLM.from_config(family_config(family, raw.get_vocab_size(), end, end,
                                                              **SHAPES[family]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            is_norm = ("norm" in name or "ln_" in name) and name.endswith("weight")
            param.copy_(1 + 0.3 * torch.randn_like(param) if is_norm else 0.3 * torch.randn_like(param))
    return model.eval(), raw


def family_gguf_file(tmp_path: Path, family: str, quant: str, seed: int = 0, chat_template: str | None = None) -> Path:
    model, raw = random_family_model(family, seed)
    return write_gguf(model, raw, family, tmp_path / f"{family}-{quant}.gguf", quant=quant,
                      pre="qwen2" if family in ("qwen2", "qwen3") else "gpt2", chat_template=chat_template)
