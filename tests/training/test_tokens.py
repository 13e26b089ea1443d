"""Token files of any size: memory-mapped batches equal the in-memory ones; ids checked in
bounded chunks; large files digested and counted from samples; a scan is cached."""

from __future__ import annotations

import hashlib
import math
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from ablate.core.config import DataConfig
from ablate.core.errors import DataError
from ablate.training import tokens
from ablate.training.data import (
    batch_offsets,
    gather_windows,
    load_corpus,
    unigram_loss,
)

SEQ_LEN = 16


def _ids(n: int = 5000, vocab: int = 300, seed: int = 0) -> np.ndarray:
    """Skewed ids (a few frequent tokens), so the unigram floor is well below ln(vocab)."""
    rng = np.random.default_rng(seed)
    return np.minimum(rng.geometric(0.02, n) - 1, vocab - 1).astype(np.uint16)


def _corpus(path: Path, **data: object):  # noqa: ANN202
    return load_corpus(DataConfig(source="tokens_file", path=str(path), **data), SEQ_LEN)


@pytest.mark.parametrize("suffix", [".bin", ".npy"])
def test_a_memory_mapped_file_gives_the_batches_of_the_in_memory_ids(
    tmp_path: Path, suffix: str
) -> None:
    ids = _ids()
    path = tmp_path / f"train{suffix}"
    if suffix == ".npy":
        np.save(path, ids.astype(np.int32))
    else:
        ids.tofile(path)
    corpus = _corpus(path, vocab_size=300)
    assert isinstance(corpus.train.array, np.memmap)  # mapped, not read
    assert len(pickle.dumps(corpus.train)) < 1000  # a spawned process maps the file itself
    n_val = int(len(ids) * 0.1)
    train = torch.from_numpy(ids[: len(ids) - n_val].astype(np.int64))
    val = torch.from_numpy(ids[len(ids) - n_val :].astype(np.int64))
    offsets = batch_offsets(len(train), SEQ_LEN, 8, 5, seed=3)
    unpickled = pickle.loads(pickle.dumps(corpus.train))
    for row in offsets:
        batch = gather_windows(corpus.train, row, SEQ_LEN)
        assert torch.equal(gather_windows(unpickled, row, SEQ_LEN), batch)
        assert batch.dtype == torch.int64 and torch.equal(
            batch, gather_windows(train, row, SEQ_LEN)
        )
    assert torch.equal(
        gather_windows(corpus.val, torch.tensor([0, 7]), SEQ_LEN),
        gather_windows(val, torch.tensor([0, 7]), SEQ_LEN),
    )
    assert corpus.digest == hashlib.sha256(ids.astype(np.int64).tobytes()).hexdigest()[:16]
    assert corpus.unigram_loss == unigram_loss(train.numpy(), val.numpy(), 300)
    assert corpus.unigram_loss < math.log(300) - 0.5  # skewed ids: well below uniform


def test_a_separate_validation_file_is_all_of_the_validation(tmp_path: Path) -> None:
    train_ids, val_ids = _ids(4000, seed=1), _ids(600, seed=2)
    train_ids.tofile(tmp_path / "train.bin")
    val_ids.tofile(tmp_path / "val.bin")
    corpus = _corpus(tmp_path / "train.bin", val_path=str(tmp_path / "val.bin"))
    assert np.array_equal(corpus.train.array, train_ids)
    assert np.array_equal(corpus.val.array, val_ids)
    assert corpus.vocab_size == int(max(train_ids.max(), val_ids.max())) + 1
    np.append(val_ids, np.uint16(900)).tofile(tmp_path / "bad_val.bin")
    with pytest.raises(DataError, match=r"bad_val\.bin: token id 900 >= data\.vocab_size 300"):
        _corpus(tmp_path / "train.bin", val_path=str(tmp_path / "bad_val.bin"), vocab_size=300)


def test_every_id_is_checked_chunk_by_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tokens, "CHUNK", 64)
    ids = _ids(3000, vocab=50)
    ids[-1] = 77  # in the last chunk, in the validation split
    ids.tofile(tmp_path / "t.bin")
    span = tokens.open_tokens(tmp_path / "t.bin")
    assert [len(c) for c in span.chunks()] == [64] * 46 + [56]
    assert np.array_equal(np.concatenate([c.copy() for c in span.chunks()]), ids)
    with pytest.raises(tokens.TokenFileError, match="token id 77 >= data.vocab_size 50"):
        tokens.checked_vocab([span], 50)
    assert tokens.checked_vocab([span], None) == 78
    signed = _ids(3000).astype(np.int32)
    signed[2000] = -5
    np.save(tmp_path / "s.npy", signed)
    with pytest.raises(tokens.TokenFileError, match="token ids must be >= 0, found -5"):
        tokens.checked_vocab([tokens.open_tokens(tmp_path / "s.npy")], None)


def test_a_large_file_is_digested_and_counted_from_evenly_spaced_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tokens, "EXACT_LIMIT", 4096)
    monkeypatch.setattr(tokens, "SAMPLE_BLOCKS", 16)
    ids = _ids(200_000, seed=4)
    ids.tofile(tmp_path / "big.bin")
    span = tokens.open_tokens(tmp_path / "big.bin")
    sample = tokens.sample(span)
    assert len(sample) == 4096 and np.array_equal(sample[:256], ids[:256])
    assert np.array_equal(sample[-256:], ids[-256:])  # the blocks reach both ends
    train, val = span.split(180_000)
    exact = unigram_loss(ids[:180_000], ids[180_000:], 300)
    estimate = unigram_loss(tokens.sample(train), tokens.sample(val), 300)
    assert abs(estimate - exact) < 0.05 * exact
    first = tokens.digest([train, val])
    changed = ids.copy()
    changed[100] += 1  # inside the first sampled block
    changed.tofile(tmp_path / "big.bin")
    assert tokens.digest([train, val]) != first
    changed[100_300] += 1  # between blocks: a sample cannot see it
    changed[100] -= 1
    changed.tofile(tmp_path / "big.bin")
    assert tokens.digest([train, val]) == first


def test_a_scan_is_cached_until_the_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "t.bin"
    _ids().tofile(path)
    first = _corpus(path)
    scans: list[int] = []
    real = tokens.checked_vocab
    monkeypatch.setattr(tokens, "checked_vocab", lambda *a: (scans.append(1), real(*a))[1])
    again = _corpus(path)
    assert scans == [] and (again.vocab_size, again.digest) == (first.vocab_size, first.digest)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    _corpus(path)
    assert scans == [1]  # touched: scanned again


def test_a_rewrite_that_keeps_size_and_mtime_is_scanned_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "t.bin"
    ids = _ids()
    ids.tofile(path)
    first = _corpus(path)
    stat = path.stat()
    changed = ids.copy()
    changed[10] = (changed[10] + 1) % 200  # same size, other ids
    with path.open("r+b") as handle:  # in place: the same inode
        handle.write(changed.tobytes())
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the old mtime set back
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert _corpus(path).digest != first.digest


@pytest.mark.trains
def test_a_run_on_a_token_file_equals_the_run_on_the_same_ids_in_memory(tmp_path: Path) -> None:
    from conftest import tiny_config

    from ablate.core.plan import RunSpec
    from ablate.training.data import builtin_text
    from ablate.training.run import execute_run

    ids = np.frombuffer(builtin_text(), dtype=np.uint8).astype(np.uint16)
    ids.tofile(tmp_path / "help.bin")
    mapped = tiny_config(
        **{"data.source": "tokens_file", "data.path": str(tmp_path / "help.bin")},
        **{"data.vocab_size": 256},
    )
    in_memory = execute_run(RunSpec("e", "a", 0, tiny_config()), tmp_path / "a")
    from_file = execute_run(RunSpec("e", "a", 0, mapped), tmp_path / "b")
    assert from_file.status == in_memory.status == "finished"
    for key in ("final_val_loss", "final_train_loss", "data_digest", "init_digest", "unigram_loss"):
        assert getattr(from_file, key) == getattr(in_memory, key), key
