"""Corpora, the split, and a batch order that depends on the data seed alone."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from ablate.core.config import DataConfig
from ablate.core.errors import DataError
from ablate.training.data import (
    WindowBatches,
    batch_offsets,
    builtin_text,
    entropy_rate,
    eval_offsets,
    load_corpus,
    markov_chain,
    split_offsets,
    unigram_loss,
)


def test_builtin_text_is_english_prose_of_about_half_a_megabyte() -> None:
    text = builtin_text()
    assert 300_000 < len(text) < 1_000_000
    assert b"the" in text and text == builtin_text()
    corpus = load_corpus(DataConfig(), seq_len=64)
    assert corpus.vocab_size == 256
    assert len(corpus.val) == int(len(text) * 0.1)
    assert torch.equal(torch.cat([corpus.train, corpus.val]), torch.tensor(list(text)))


def test_synthetic_entropy_floor_matches_the_sampled_text() -> None:
    cfg = DataConfig(
        source="synthetic", synthetic_vocab=16, synthetic_branching=3, synthetic_tokens=100_000
    )
    corpus = load_corpus(cfg, seq_len=32)
    transitions = markov_chain(16, 3, cfg.synthetic_seed)
    assert corpus.entropy_floor == pytest.approx(entropy_rate(transitions))
    assert 0 < corpus.entropy_floor < math.log(3) + 1e-9  # at most log(branching)
    ids = torch.cat([corpus.train, corpus.val]).numpy()
    # the empirical conditional entropy of the sample approaches the floor
    counts = np.zeros((16, 16))
    np.add.at(counts, (ids[:-1], ids[1:]), 1)
    p = counts / counts.sum()
    cond = counts / counts.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        empirical = -np.nansum(p * np.log(cond))
    assert empirical == pytest.approx(corpus.entropy_floor, abs=0.02)


def test_text_file_byte_and_char(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("héllo wörld " * 100, encoding="utf-8")
    byte = load_corpus(DataConfig(source="text_file", path=str(path)), 8)
    char = load_corpus(DataConfig(source="text_file", path=str(path), tokenizer="char"), 8)
    assert byte.vocab_size == 256 and char.vocab_size == len(set("héllo wörld "))
    assert len(char.train) + len(char.val) == 1200
    assert len(byte.train) + len(byte.val) == len(("héllo wörld " * 100).encode())
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(DataError, match="not UTF-8"):
        load_corpus(DataConfig(source="text_file", path=str(path)), 8)


def test_tokens_files_uint16_and_npy(tmp_path: Path) -> None:
    ids = (np.arange(5000) * 7 % 300).astype(np.uint16)
    ids.tofile(tmp_path / "train.bin")
    np.save(tmp_path / "ids.npy", ids.astype(np.int32))
    a = load_corpus(DataConfig(source="tokens_file", path=str(tmp_path / "train.bin")), 16)
    b = load_corpus(DataConfig(source="tokens_file", path=str(tmp_path / "ids.npy")), 16)
    assert a.vocab_size == b.vocab_size == 300 and a.digest == b.digest
    with pytest.raises(DataError, match="token id 299 >= data.vocab_size 100"):
        load_corpus(
            DataConfig(source="tokens_file", path=str(tmp_path / "ids.npy"), vocab_size=100), 16
        )


def test_too_short_corpus_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("short text")
    with pytest.raises(DataError, match="too few for model.seq_len 64"):
        load_corpus(DataConfig(source="text_file", path=str(path)), 64)


def test_batch_order_depends_only_on_the_data_seed() -> None:
    torch.manual_seed(1)
    a = batch_offsets(10_000, 32, 8, 50, seed=5)
    torch.manual_seed(2)
    torch.rand(100)  # consuming the global RNG changes nothing
    b = batch_offsets(10_000, 32, 8, 50, seed=5)
    assert torch.equal(a, b)
    assert not torch.equal(a, batch_offsets(10_000, 32, 8, 50, seed=6))
    assert int(a.max()) <= 10_000 - 33 and int(a.min()) >= 0
    # a longer run starts with the same batches (budgets differ, the prefix does not)
    assert torch.equal(batch_offsets(10_000, 32, 8, 80, seed=5)[:50], a)


def test_batches_are_the_same_for_any_loader_worker_count() -> None:
    corpus = load_corpus(DataConfig(), seq_len=16)
    offsets = batch_offsets(len(corpus.train), 16, 4, 12, seed=0)
    data = WindowBatches(corpus.train, offsets, 16)
    serial = list(DataLoader(data, batch_size=None))
    parallel = list(DataLoader(data, batch_size=None, num_workers=2))
    assert len(serial) == 12 and all(
        torch.equal(x, y) for x, y in zip(serial, parallel, strict=True)
    )
    first = serial[0]
    assert first.shape == (4, 17)
    assert torch.equal(first[0], corpus.train[offsets[0, 0] : offsets[0, 0] + 17])
    # resuming at batch 7 sees exactly what an uninterrupted run sees there
    assert torch.equal(data[7], serial[7])


def test_eval_windows_are_fixed_and_in_range() -> None:
    a = eval_offsets(1000, 32, 4, 3)
    assert a.shape == (3, 4) and torch.equal(a, eval_offsets(1000, 32, 4, 3))
    assert int(a.min()) == 0 and int(a.max()) == 1000 - 33


def test_unigram_floor_against_a_hand_computation() -> None:
    train, val = np.array([0, 0, 1]), np.array([0, 2])
    # add-1/2 counts: 2.5, 1.5, 0.5 of 4.5; val scores p(0) and p(2)
    expected = -(math.log(2.5 / 4.5) + math.log(0.5 / 4.5)) / 2
    assert unigram_loss(train, val, vocab_size=3) == pytest.approx(expected, rel=1e-12)


def test_corpus_floor_uses_train_frequencies_scored_on_val(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("ab" * 450 + "c" * 100)  # val (last 10%) is all 'c', never seen in train
    corpus = load_corpus(DataConfig(source="text_file", path=str(path), val_fraction=0.1), 8)
    assert corpus.vocab_size == 256
    expected = -math.log(0.5 / (900 + 0.5 * 256))  # 'c' has only the half count
    assert corpus.unigram_loss == pytest.approx(expected, rel=1e-9)
    builtin = load_corpus(DataConfig(), 128)
    assert 3.2 < builtin.unigram_loss < 3.3 < math.log(256)  # the default text: about 3.25


def test_split_offsets_predict_every_token_of_the_split_once_in_full_batches() -> None:
    offsets = split_offsets(1000, 16, 4)  # 62 windows of 16 predicted tokens: 15 batches of 4
    assert offsets.shape == (15, 4)
    starts = offsets.flatten()
    assert starts[0] == 0 and bool((starts.diff() == 16).all())  # adjacent, never overlapping
    assert int(starts[-1]) + 16 <= 999  # the last window's last target is inside the split
    with pytest.raises(ValueError, match="holds no batch of 4 windows"):
        split_offsets(40, 16, 4)


def test_a_test_split_is_cut_from_the_end_and_keeps_the_training_ids() -> None:
    whole = load_corpus(DataConfig(val_fraction=0.1), 64)
    cut = load_corpus(DataConfig(val_fraction=0.05, test_fraction=0.05), 64)
    assert whole.test is None and cut.test is not None
    assert torch.equal(cut.train, whole.train)  # the sum of the fractions decides training
    assert torch.equal(torch.cat([cut.val, cut.test]), whole.val)  # val first, test last
    assert abs(len(cut.val) - len(cut.test)) <= 1
    assert cut.digest == whole.digest


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"val_fraction": 0.3, "test_fraction": 0.2}, "must stay below 0.5"),
        ({"tokenizer": "bpe", "test_fraction": 0.05}, "only for in-memory byte or char ids"),
    ],
)
def test_test_fraction_errors_say_what_is_allowed(keys: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DataConfig(**keys)
