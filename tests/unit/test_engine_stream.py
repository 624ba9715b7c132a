"""Token-stream corpora: encoding, windows, batches, the token cache, the fast encoder,
bounded evaluation and fused attention."""

from __future__ import annotations

import random
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import torch

from minigpt_tui.engine.training import stream as stream_module
from minigpt_tui.engine.core.config import ModelConfig, load_config
from minigpt_tui.engine.training.corpus import load_corpus, parse_records
from minigpt_tui.engine.core.errors import CorpusError
from minigpt_tui.engine.training.fast_encoder import FastEncoder, fast_encoder
from minigpt_tui.engine.models.model import MiniGPT
from minigpt_tui.engine.training.stream import TokenWindows, encode_records, token_dtype
from minigpt_tui.engine.training.token_cache import TokenCache, entry_key
from minigpt_tui.engine.core.tokenizer import BOS, EOS, ByteBPETokenizer
from minigpt_tui.engine.training.trainer import Trainer, TrainingSetup, apply_precision
from conftest import patch_everywhere

STREAM = {"corpus": {"mode": "stream", "source": "bundled:patterns.txt"}}


def bundled(name: str) -> list[str]:
    return parse_records(resources.files("minigpt_tui").joinpath(f"assets/corpus/{name}").read_text("utf-8"))


def stream_trainer(**train: object) -> Trainer:
    config = load_config("mini", overrides=STREAM)
    if train:
        config = config.replace(train=train)
    apply_precision(config.train)
    return Trainer(TrainingSetup.build(config, load_corpus(config.corpus)))


# -- encoding and windows -------------------------------------------------------------------
@pytest.mark.parametrize("merges", [0, 40])
def test_records_are_joined_as_bos_text_eos_in_order(merges):
    texts = ["ab", "", "héllo wörld", "ab ab ab"]
    tok = ByteBPETokenizer.train(texts, merges)
    joined = encode_records(texts, tok)
    assert joined.dtype == np.uint16
    assert joined.tolist() == [i for ids in tok.encode_many(texts) for i in ids]
    if not merges:
        assert joined.tolist()[:6] == [BOS, ord("a") + 2, ord("b") + 2, EOS, BOS, EOS]


def test_a_vocabulary_beyond_uint16_uses_uint32():
    assert token_dtype(65536) == np.uint16 and token_dtype(65537) == np.uint32


def test_windows_are_full_and_batches_are_cut_by_tensor_indexing():
    tokens = np.arange(100, dtype=np.uint16)
    windows = TokenWindows(tokens, context=8)
    assert len(windows) == 92  # starts 0..91: every window has 9 tokens
    assert windows[91].ids == tuple(range(91, 100))
    with pytest.raises(IndexError):
        windows[92]
    batch = windows.batch([0, 91, 5])
    assert batch.inputs.dtype == torch.int64 and tuple(batch.inputs.shape) == (3, 8)
    assert batch.inputs[1].tolist() == list(range(91, 99)) and batch.targets[1].tolist() == list(range(92, 100))
    assert batch.valid_targets == 24 and bool((batch.targets >= 0).all())
    assert windows.tiling() == list(range(0, 92, 8))


def test_stream_training_draws_window_offsets_from_the_data_generator():
    trainer = stream_trainer()
    size = len(trainer.train_examples)
    stream = trainer.setup.token_stream()
    assert size == stream.train.size - trainer.config.model.context
    generator = torch.Generator().manual_seed(trainer.config.seeds.data)
    expected = torch.randint(size, (trainer.config.train.batch_size,), generator=generator).tolist()
    record = trainer.update()
    assert record.batch == [expected]
    assert record.valid_targets == trainer.config.train.batch_size * trainer.config.model.context


def test_stream_mode_refuses_document_order():
    from minigpt_tui.engine.core.errors import ConfigError

    with pytest.raises(ConfigError, match="replacement"):
        load_config("tiny", overrides={"corpus": {"mode": "stream"}})


# -- bounded evaluation ---------------------------------------------------------------------
def test_bounded_evaluation_reads_the_same_fixed_batches_every_time():
    trainer = stream_trainer(eval_batches=3, eval_batch_size=4)
    assert len(trainer._train_eval) == 3 and len(trainer._validation_eval) == 3
    first = [b.inputs.clone() for b in trainer._train_eval]
    before = trainer.evaluate()
    trainer.update()
    trainer.evaluate()
    assert all(torch.equal(a, b.inputs) for a, b in zip(first, trainer._train_eval))
    assert before.train_targets == 3 * 4 * trainer.config.model.context
    again = stream_trainer(eval_batches=3, eval_batch_size=4)
    assert again.evaluate() == before  # same seed, same batches, same weights: same record


def test_evaluation_never_changes_the_training_trajectory():
    evaluated = stream_trainer(eval_batches=2)
    plain = stream_trainer(eval_batches=2)
    evaluated.evaluate()
    assert evaluated.update().exact_fields() == plain.update().exact_fields()


def test_the_evaluation_seed_chooses_the_batches():
    a = stream_trainer(eval_batches=2)
    config = a.config.replace(seeds={"evaluation": 99})
    b = Trainer(TrainingSetup.build(config, load_corpus(config.corpus)))
    assert not torch.equal(a._train_eval[0].inputs, b._train_eval[0].inputs)


def test_a_split_that_fits_in_the_bounded_batches_is_read_completely():
    trainer = stream_trainer(eval_batches=1000, eval_batch_size=8)
    tiling = trainer.validation_examples.tiling()
    assert sum(b.inputs.shape[0] for b in trainer._validation_eval) == len(tiling)
    assert "complete" in trainer.evaluation_rule or "read completely" in trainer.evaluation_rule


def test_bounded_evaluation_in_records_mode_draws_fixed_examples():
    config = load_config("mini", overrides={"corpus": {"source": "bundled:patterns.txt"}})
    config = config.replace(train={"eval_batches": 2})
    trainer = Trainer(TrainingSetup.build(config, load_corpus(config.corpus)))
    assert len(trainer._train_eval) == 2
    assert trainer.evaluate() == trainer.evaluate()


# -- the token cache ------------------------------------------------------------------------
def test_a_second_build_reads_the_cache_without_encoding(monkeypatch, tmp_path):
    first = stream_trainer()
    cache = TokenCache(Path(tmp_path / "token-cache"))
    assert len(cache.entries()) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("encoded again despite an intact cache entry")

    assert patch_everywhere(monkeypatch, stream_module, "encode_records", refuse) >= 2
    second = stream_trainer()
    assert isinstance(second.setup.token_stream().train, np.memmap)
    assert np.array_equal(second.setup.token_stream().train, first.setup.token_stream().train)


def test_a_changed_byte_gives_a_new_cache_entry(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("one paragraph of text\n\n" * 200, "utf-8")
    config = load_config("mini", overrides={"corpus": {"mode": "stream", "source": str(path)}})
    TrainingSetup.build(config, load_corpus(config.corpus))
    path.write_text("one paragraph of text\n\n" * 199 + "one paragraph of texT\n", "utf-8")
    TrainingSetup.build(config, load_corpus(config.corpus))
    assert len(TokenCache(tmp_path / "token-cache").entries()) == 2


def test_a_damaged_cache_entry_is_detected_and_rebuilt(tmp_path):
    first = stream_trainer()
    corpus, tok = first.setup.corpus, first.tokenizer
    folder = tmp_path / "token-cache" / entry_key(corpus.identity, tok.identity)
    data = bytearray((folder / "train.npy").read_bytes())
    data[-3] ^= 0x40  # one token changed, size and header intact
    (folder / "train.npy").write_bytes(bytes(data))
    assert TokenCache(tmp_path / "token-cache").load(corpus.identity, tok.identity) is None
    assert not folder.exists()  # never trusted: removed
    rebuilt = stream_trainer()
    assert np.array_equal(rebuilt.setup.token_stream().train, encode_records(corpus.train, tok))
    assert folder.is_dir()


def test_an_interrupted_cache_write_leaves_no_entry(monkeypatch, tmp_path):
    config = load_config("mini", overrides=STREAM)
    corpus = load_corpus(config.corpus)
    original = np.save
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(args[0])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(np, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        TrainingSetup.build(config, corpus)
    root = tmp_path / "token-cache"
    assert list(root.iterdir()) == []


def test_cache_clear_frees_every_entry(tmp_path):
    stream_trainer()
    cache = TokenCache(tmp_path / "token-cache")
    (entry,) = cache.entries()
    assert entry.intact and entry.source == "bundled:patterns.txt" and entry.bytes > 0
    cleared = cache.clear()
    assert [e.key for e in cleared.entries] == [entry.key] and cleared.freed >= entry.bytes
    assert cache.entries() == []


# -- bad input --------------------------------------------------------------------------------
def test_a_text_shorter_than_one_window_names_the_sizes(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("just a few words", "utf-8")
    config = load_config("mini", overrides={"corpus": {"mode": "stream", "source": str(path)}, "tokenizer": {"merges": 0}})
    with pytest.raises(CorpusError, match="training split has 18 tokens, fewer than one window of 65"):
        TrainingSetup.build(config, load_corpus(config.corpus))
    assert not (tmp_path / "token-cache").exists()


def test_a_validation_split_shorter_than_one_window_is_refused(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("a long training paragraph " * 10 + "\n\nshort\n", "utf-8")
    config = load_config(
        "mini", overrides={"corpus": {"mode": "stream", "source": str(path), "val_every": 2}, "tokenizer": {"merges": 0}}
    )
    with pytest.raises(CorpusError, match="validation split has 7 tokens"):
        TrainingSetup.build(config, load_corpus(config.corpus))


# -- the fast encoder -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tiny.txt", "teaching.txt", "patterns.txt"])
@pytest.mark.parametrize("merges", [0, 8, 96, 400])
def test_the_fast_encoder_gives_our_ids_on_the_bundled_corpora(name, merges):
    texts = bundled(name)
    tok = ByteBPETokenizer.train(texts, merges)
    assert FastEncoder(tok).encode_many(texts) == [tok.encode(t) for t in texts]


def test_the_fast_encoder_gives_our_ids_on_random_byte_strings():
    rng = random.Random(5)
    # Random bytes read as Latin-1 cover every byte value (one or two UTF-8 bytes each);
    # random code points add three- and four-byte sequences.
    texts = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 80))).decode("latin-1") for _ in range(150)]
    texts += ["".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x800, 0xD000), rng.randrange(0x10000, 0x10FFFF)]))
                      for _ in range(rng.randrange(1, 40))) for _ in range(100)]
    tok = ByteBPETokenizer.train(texts + ["abababab"] * 5, 200)
    encoder = fast_encoder(tok)
    assert encoder is not None
    assert encoder.encode_many(texts) == [tok.encode(t) for t in texts]


def test_a_tokenizer_the_library_cannot_hold_falls_back_to_our_encoder():
    # Two merges producing the same bytes "aaa": (a,aa) and (aa,a).
    a = ord("a") + 2
    tok = ByteBPETokenizer(((a, a), (a, 258), (258, a)))
    assert fast_encoder(tok) is None
    texts = ["aaaa aaa", "aaaaaaa"]
    assert encode_records(texts, tok).tolist() == [i for ids in tok.encode_many(texts) for i in ids]


# -- fused attention --------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_fused_attention_agrees_with_the_explicit_path_in_float64(family):
    config = ModelConfig(family=family, width=32, heads=4, kv_heads=2 if family == "llama" else 4, ffn=64,
                         layers=2, context=16)
    explicit = MiniGPT(config, 300, torch.float64)
    explicit.initialize(3)
    fused = MiniGPT(config, 300, torch.float64, fused_attention=True)
    fused.load_state_dict(explicit.state_dict())
    ids = torch.randint(300, (3, 16), generator=torch.Generator().manual_seed(1))
    a, b = explicit(ids).logits, fused(ids).logits
    assert float((a - b).detach().abs().max()) < 1e-10
    # Every parameter's gradient, the query, key and value projections' included (training
    # in fast precision computes the three as one product).
    assert fused.training
    grads_a = torch.autograd.grad(a.square().sum(), list(explicit.parameters()))
    grads_b = torch.autograd.grad(b.square().sum(), list(fused.parameters()))
    assert max(float((ga - gb).abs().max()) for ga, gb in zip(grads_a, grads_b)) < 1e-9
    # Asked for weights, the fused model takes the explicit path: the same bits.
    assert torch.equal(fused(ids, return_attention=True).logits, a)


def test_exact_precision_never_uses_fused_attention():
    trainer = stream_trainer()
    assert trainer.config.train.precision == "exact" and not trainer.model.fused_attention


def test_merges_can_be_learned_from_a_declared_prefix_of_the_training_split():
    from minigpt_tui.engine.training.trainer import merge_training_records

    texts = ["abc", "defg", "hi", "jklmn"]
    assert merge_training_records(texts, 0) == texts
    assert merge_training_records(texts, 5) == ["abc", "defg"]
    assert merge_training_records(texts, 1) == ["abc"]
    config = load_config("mini", overrides={"corpus": {"source": "bundled:patterns.txt"}, "tokenizer": {"train_bytes": 2000}})
    corpus = load_corpus(config.corpus)
    setup = TrainingSetup.build(config, corpus)
    assert setup.tokenizer == ByteBPETokenizer.train(merge_training_records(corpus.train, 2000), 32)
    assert setup.tokenizer != ByteBPETokenizer.train(corpus.train, 32)
