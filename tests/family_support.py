"""Transformers model folders of every declared family, made in the test: a tokenizer
trained here of the kind the family's declaration names, random weights from transformers
for the family's example config, save_pretrained. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import torch

from minigpt_tui.engine.families import REGISTRY, family
from minigpt_tui.engine.families import family as declared_family

FAMILIES = tuple(sorted(f.name for f in REGISTRY))
# Text from files already on the machine: the docstrings of the standard library.
TEXT_MODULES = ("json", "pathlib", "argparse", "textwrap", "collections")


def training_text() -> list[str]:
    import importlib

    lines = []
    for name in TEXT_MODULES:
        doc = importlib.import_module(name).__doc__ or ""
        lines += [line for line in doc.splitlines() if line.strip()]
    return lines + ["héllo wörld — naïve café", "日本語のテキスト", "emoji 🙂 and tabs\tand\nnewlines"]


def byte_level_tokenizer(vocab: int = 400, split_regex: bool = False):
    """GPT-2 style: ByteLevel with its regex (or a Split regex as Qwen2 writes it)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    if split_regex:
        pattern = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(training_text(), trainer)
    return tokenizer


def metaspace_tokenizer(vocab: int = 400, bos: str = "<s>", eos: str = "</s>"):
    """Llama 2 style (Gemma's with its token names): Metaspace, byte fallback, BOS added by
    the post-processor."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tokenizer = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(" ", 1, 0)])
    specials = ["<unk>", bos, eos] + [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, show_progress=False)
    tokenizer.train_from_iterator(training_text(), trainer)
    tokenizer.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, 1)])
    return tokenizer


def family_config(family_name: str, vocab: int, bos: int, eos: int, **extra):
    """transformers' config of the family's declared example, with ``extra`` over it."""
    import transformers as tr

    declared = family(family_name)
    return tr.AutoConfig.for_model(declared.model_type, **{**declared.example, "vocab_size": vocab,
                                                           "bos_token_id": bos, "eos_token_id": eos, **extra})


def family_tokenizer(family_name: str):
    """(a tokenizers.Tokenizer of the family's kind, its transformers wrapper, BOS id, EOS id)."""
    import transformers as tr

    defaults = family(family_name).tokenizer
    if defaults.kind == "metaspace":
        raw = metaspace_tokenizer(bos=defaults.bos, eos=defaults.eos)
    else:
        raw = byte_level_tokenizer(split_regex=defaults.kind == "byte_level_split")
    names = {"bos_token": defaults.bos, "eos_token": defaults.eos}
    if defaults.kind == "metaspace":
        names["unk_token"] = "<unk>"
    wrapped = tr.PreTrainedTokenizerFast(tokenizer_object=raw, **names)
    return raw, wrapped, raw.token_to_id(defaults.bos), raw.token_to_id(defaults.eos)


def make_family_folder(family: str, folder: Path, *, seed: int = 0, pad_rows: int = 0, dtype=torch.float32,
                       **extra) -> Path:
    """A random-weight model of ``family`` with its kind of tokenizer, saved with save_pretrained."""
    import transformers as tr

    raw, wrapped, bos, eos = family_tokenizer(family)
    vocab = raw.get_vocab_size() + pad_rows
    torch.manual_seed(seed)
    model = tr.AutoModelForCausalLM.from_config(family_config(family, vocab, bos, eos, **extra))
    unit = 0.0 if declared_family(family).parts.get("norm_offset") else 1.0  # Gemma stores a norm's w as w - 1
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                param.copy_(unit + 0.3 * torch.randn_like(param))
            else:
                param.copy_(0.3 * torch.randn_like(param))
    model = model.to(dtype)
    model.save_pretrained(folder)
    wrapped.save_pretrained(folder)
    return folder


def reference(folder: Path, dtype=torch.float32):
    import transformers as tr

    model = tr.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    model.eval()
    return model, tr.AutoTokenizer.from_pretrained(folder)


def reference_greedy(model, ids: list[int], steps: int) -> list[int]:
    """transformers' greedy continuation of ``ids`` (every position attended, no EOS stop)."""
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=steps, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(ids):].tolist()


CHAT_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")


def make_chat_folder(folder: Path, template: str | None, *, seed: int = 0) -> Path:
    """A random-weight GPT-2 folder whose byte-level tokenizer has the role markers as
    special tokens and ``template`` (None: no template) as its chat template."""
    import transformers as tr

    raw = byte_level_tokenizer()
    raw.add_special_tokens(list(CHAT_TOKENS))
    eos = raw.token_to_id("<|endoftext|>")
    wrapped = tr.PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    if template is not None:
        wrapped.chat_template = template
    torch.manual_seed(seed)
    model = tr.AutoModelForCausalLM.from_config(family_config("gpt2", raw.get_vocab_size(), eos, eos))
    model.save_pretrained(folder)
    wrapped.save_pretrained(folder)
    return folder


def cached_decisions_equal_recompute(portable, prompt: str, steps: int = 5) -> tuple[list, list[int]]:
    """Greedy decisions with the key/value cache, each checked against the whole prefix run
    again (float64, 1e-12); the decisions and the prefix they made."""
    from minigpt_tui.engine.analysis.generation import DecisionStepper
    from minigpt_tui.engine.analysis.generation_rule import GenerationRule

    rule = GenerationRule("greedy", max_new_tokens=steps, forbidden_ids=())
    stepper = DecisionStepper.from_portable(portable, prompt, rule, use_kv_cache=True)
    decisions = list(stepper.run())
    prefix = list(stepper.prompt_ids)
    for decision in decisions:
        with torch.no_grad():
            whole = portable.model(torch.tensor([prefix])).logits[0, -1]
        torch.testing.assert_close(decision.logits, whole, atol=1e-12, rtol=1e-12)
        prefix.append(decision.chosen.id)
    return decisions, prefix
