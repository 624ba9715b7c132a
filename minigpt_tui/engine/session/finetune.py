"""The model the ``finetune`` exact-resume experiment starts from: a random-weight
GPT-NeoX-style model (parallel residual, partial rotary, its own head) with a byte-level BPE
tokenizer.json trained here on the bundled teaching corpus, saved as a model file. It stands
for a model from elsewhere with its own tokenizer, made without a download.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from minigpt_tui.engine.core.config import ModelConfig
from minigpt_tui.engine.core.library_tokenizer import LibraryTokenizer
from minigpt_tui.engine.formats.portable import save_portable_model
from minigpt_tui.engine.training.corpus import parse_records


def finetune_model(folder: Path) -> Path:
    """A random-weight GPT-NeoX-style model (parallel residual, partial rotary, its own head)
    with a byte-level BPE tokenizer.json trained here on the bundled teaching corpus, saved
    as a model file: what the finetune experiment starts from."""
    import torch  # deferred: imports torch

    from minigpt_tui.engine.models.model import MiniGPT  # deferred: imports torch

    text = resources.files("minigpt_tui").joinpath("assets/corpus/teaching.txt").read_text("utf-8")
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.train_from_iterator(parse_records(text), trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    end = raw.token_to_id("<|endoftext|>")
    tokenizer = LibraryTokenizer.from_text(raw.to_str(), None, bos_id=end, eos_ids=(end,), source="verify")
    config = ModelConfig(family="gpt_neox", width=32, heads=4, kv_heads=4, ffn=64, layers=2, context=64,
                         rotary_fraction=0.5, tied_head=False, gelu_approximation="none")
    model = MiniGPT(config, tokenizer.vocab_size, torch.float64)
    model.initialize(20261201)
    folder.mkdir(parents=True, exist_ok=True)
    save_portable_model(model, tokenizer, folder / "model.safetensors")
    return folder / "model.safetensors"
