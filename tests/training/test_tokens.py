"""Token files of any size: memory-mapped batches equal the in-memory ones; ids checked in
bounded chunks; large files digested and counted from samples; a scan is cached."""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ablate.core.config import DataConfig
from ablate.core.errors import DataError
from ablate.training import token_formats as formats
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


def _corpus(path: Path | list[Path], **data: object):  # noqa: ANN202
    files = str(path) if isinstance(path, Path) else [str(p) for p in path]
    return load_corpus(DataConfig(source="tokens_file", path=files, **data), SEQ_LEN)


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
    assert isinstance(corpus.train.maps[0], np.memmap)  # mapped, not read
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
    assert np.array_equal(corpus.train.maps[0], train_ids)
    assert np.array_equal(corpus.val.maps[0], val_ids)
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
    span = formats.open_tokens(tmp_path / "t.bin")
    assert [len(c) for c in span.chunks()] == [64] * 46 + [56]
    assert np.array_equal(np.concatenate([c.copy() for c in span.chunks()]), ids)
    with pytest.raises(tokens.TokenFileError, match="token id 77 >= data.vocab_size 50"):
        tokens.scanned([tokens.TokenSet((span,))], 50)
    assert tokens.scanned([tokens.TokenSet((span,))], None)[0] == 78
    signed = _ids(3000).astype(np.int32)
    signed[2000] = -5
    np.save(tmp_path / "s.npy", signed)
    with pytest.raises(tokens.TokenFileError, match="token ids must be >= 0, found -5"):
        tokens.scanned([formats.open_set([tmp_path / "s.npy"])], None)


def test_a_large_file_is_digested_whole_and_counted_from_evenly_spaced_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tokens, "EXACT_LIMIT", 4096)
    monkeypatch.setattr(tokens, "SAMPLE_BLOCKS", 16)
    ids = _ids(200_000, seed=4)
    ids.tofile(tmp_path / "big.bin")
    whole = formats.open_set([tmp_path / "big.bin"])
    sample = tokens.sample(whole)
    assert len(sample) == 4096 and np.array_equal(sample[:256], ids[:256])
    assert np.array_equal(sample[-256:], ids[-256:])  # the blocks reach both ends
    train, val = whole.split(180_000)
    exact = unigram_loss(ids[:180_000], ids[180_000:], 300)
    estimate = unigram_loss(tokens.sample(train), tokens.sample(val), 300)
    assert abs(estimate - exact) < 0.05 * exact
    monkeypatch.setattr(tokens, "BLOCK", 50_000)
    monkeypatch.setattr(tokens, "PIECE", 7_000)
    first = tokens.scanned([train, val], None)[1]
    expected = hashlib.sha256(b"blocks:<u2:180000:50000:")
    for start in range(0, 180_000, 50_000):  # the sha256 of each block, in order
        expected.update(hashlib.sha256(ids[start : min(start + 50_000, 180_000)]).digest())
    expected.update(b"blocks:<u2:20000:50000:" + hashlib.sha256(ids[180_000:]).digest())
    assert first == expected.hexdigest()[:16]  # every id, as stored
    shards = formats.open_set(_shards(ids, tmp_path / "cut", [33_333, 120_001]))
    assert tokens.scanned(list(shards.split(180_000)), None)[1] == first  # not the files
    changed = ids.copy()
    changed[100_300] += 1  # between the sampled blocks: the digest still sees it
    changed.tofile(tmp_path / "big.bin")
    assert tokens.scanned([train, val], None)[1] != first
    with pytest.raises(
        tokens.TokenFileError, match=r"big\.bin: token id \d+ >= data\.vocab_size 5"
    ):
        tokens.scanned([train, val], 5)


def test_a_scan_is_cached_until_the_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "t.bin"
    _ids().tofile(path)
    first = _corpus(path)
    scans: list[int] = []
    real = tokens.scanned
    monkeypatch.setattr(tokens, "scanned", lambda *a: (scans.append(1), real(*a))[1])
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


def _shards(ids: np.ndarray, folder: Path, cuts: list[int], magic: int = 20240520) -> list[Path]:
    """``ids`` cut at ``cuts`` into llm.c shards ``folder/train_00000k.bin``."""
    folder.mkdir(exist_ok=True)
    paths = []
    for k, part in enumerate(np.split(ids, cuts)):
        paths.append(folder / f"train_{k:06d}.bin")
        formats.write_shard(paths[-1], part, magic)
    return paths


def test_a_shard_set_reads_as_the_one_file_it_was_cut_from(tmp_path: Path) -> None:
    ids = _ids(6000, vocab=300, seed=5)
    ids.tofile(tmp_path / "one.bin")
    one = _corpus(tmp_path / "one.bin")
    cuts = [700, 1900, 2000, 4100]  # five uneven shards
    headered = _corpus(_shards(ids, tmp_path / "llmc", cuts))
    npy = []
    for k, part in enumerate(np.split(ids, [3000])):
        npy.append(tmp_path / f"part_{k}.npy")
        np.save(npy[-1], part)
    for shards in (headered, _corpus(npy)):
        assert (shards.digest, shards.vocab_size) == (one.digest, one.vocab_size)
        assert shards.unigram_loss == one.unigram_loss
        assert len(shards.train) == len(one.train) and len(shards.val) == len(one.val)
        offsets = batch_offsets(len(one.train), SEQ_LEN, 16, 20, seed=1)
        offsets[0, :4] = torch.tensor([690, 1895, 1990, 4090])  # windows across the cuts
        for row in offsets:
            assert torch.equal(
                gather_windows(shards.train, row, SEQ_LEN), gather_windows(one.train, row, SEQ_LEN)
            )
        last = torch.tensor([len(one.val) - SEQ_LEN - 1])
        assert torch.equal(
            gather_windows(shards.val, last, SEQ_LEN), gather_windows(one.val, last, SEQ_LEN)
        )
    unpickled = pickle.loads(pickle.dumps(headered.train))
    assert np.array_equal(unpickled[np.arange(650, 750)], ids[650:750])


def test_a_set_split_for_validation_cuts_the_shard_it_falls_in(tmp_path: Path) -> None:
    ids = _ids(1000, seed=6)
    whole = formats.open_set(_shards(ids, tmp_path, [300, 600]))
    train, val = whole.split(450)
    assert [len(s) for s in train.spans] == [300, 150] and [len(s) for s in val.spans] == [150, 400]
    assert np.array_equal(val.read(0, 550), ids[450:])
    assert np.array_equal(train.read(290, 20), ids[290:310])


def test_a_validation_file_that_is_a_training_file_is_refused(tmp_path: Path) -> None:
    paths = _shards(_ids(3000, seed=10), tmp_path, [1000, 2000])
    with pytest.raises(DataError, match=r"train_000002\.bin: is both a training and a validation"):
        _corpus(paths, val_path=str(paths[2]))
    (tmp_path / "val.bin").write_bytes(paths[1].read_bytes())  # a copy under another name
    with pytest.raises(
        DataError, match=r"val\.bin: holds the same ids as training file .*train_000001"
    ):
        _corpus(paths, val_path=str(tmp_path / "val.bin"))
    formats.write_shard(tmp_path / "val.bin", _ids(1000, seed=11))
    assert len(_corpus(paths, val_path=str(tmp_path / "val.bin")).val) == 1000


@pytest.mark.trains
def test_a_run_on_shards_equals_the_run_on_the_file_they_were_cut_from(tmp_path: Path) -> None:
    from conftest import tiny_config

    from ablate.core.plan import RunSpec
    from ablate.training.data import builtin_text
    from ablate.training.run import execute_run

    ids = np.frombuffer(builtin_text(), dtype=np.uint8).astype(np.uint16)
    ids.tofile(tmp_path / "help.bin")
    cuts = list(np.linspace(0, len(ids), 6).astype(int)[1:-1])  # five shards
    layouts = {
        "one file": str(tmp_path / "help.bin"),
        "five llm.c shards": [str(p) for p in _shards(ids, tmp_path / "llmc", cuts)],
        "three .npy shards": [],
    }
    for k, part in enumerate(np.split(ids, cuts[::2])):
        np.save(tmp_path / f"help_{k}.npy", part)
        layouts["three .npy shards"].append(str(tmp_path / f"help_{k}.npy"))
    found = {}
    for name, path in layouts.items():
        cfg = tiny_config(**{"data.source": "tokens_file", "data.path": path})
        found[name] = execute_run(RunSpec("e", "a", 0, cfg), tmp_path / name)
    keys = ("final_val_loss", "final_train_loss", "data_digest", "init_digest", "unigram_loss")
    one = found["one file"]
    assert one.status == "finished"
    for name, result in found.items():
        assert [getattr(result, k) for k in keys] == [getattr(one, k) for k in keys], name


@pytest.mark.trains
def test_uint32_ids_of_a_128256_token_vocabulary_train(tmp_path: Path) -> None:
    from conftest import tiny_config

    from ablate.core.plan import RunSpec
    from ablate.training.run import execute_run

    vocab = 128_256  # Llama 3's
    ids = np.random.default_rng(12).integers(0, vocab, 6000).astype(np.uint32)
    paths = [str(p) for p in _shards(ids, tmp_path, [3000], magic=20240801)]
    cfg = tiny_config(
        **{"data.source": "tokens_file", "data.path": paths, "data.vocab_size": vocab}
    )
    result = execute_run(RunSpec("e", "a", 0, cfg), tmp_path / "run")
    assert result.status == "finished" and result.steps == cfg.steps()
    assert abs(result.initial_loss - math.log(vocab)) < 0.5  # the embedding is 128,256 wide
    assert math.isfinite(result.final_val_loss)


def test_a_refused_id_stops_a_large_scan_without_waiting_for_its_other_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tokens, "EXACT_LIMIT", 4096)
    monkeypatch.setattr(tokens, "BLOCK", 5_000)
    monkeypatch.setattr(tokens, "SCAN_THREADS", 1)
    ids = _ids(200_000, vocab=50, seed=18)
    ids[10] = 99  # in the first of 40 blocks
    ids.tofile(tmp_path / "big.bin")
    hashed: list[int] = []
    real = tokens.hashed_block
    monkeypatch.setattr(
        tokens, "hashed_block", lambda *a: (hashed.append(a[1]), time.sleep(0.01), real(*a))[2]
    )
    with pytest.raises(tokens.TokenFileError, match="token id 99 >= data.vocab_size 50"):
        tokens.scanned([formats.open_set([tmp_path / "big.bin"])], 50)
    assert hashed[0] == 0 and len(hashed) < 10  # the blocks not begun were dropped
