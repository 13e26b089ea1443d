"""What a file of ids holds: raw uint16 or uint32, llm.c shards of a known or a declared magic
number; a header that does not match its file, an empty file or an undeclared header is
refused in one line."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
from test_tokens import SEQ_LEN, _corpus, _ids, _shards

from ablate.core.errors import DataError
from ablate.training import token_formats as formats
from ablate.training.data import gather_windows


def test_uint32_ids_are_read_raw_or_from_llama_3_shards(tmp_path: Path) -> None:
    ids = np.random.default_rng(7).integers(0, 128_256, 5000).astype(np.uint32)
    ids.tofile(tmp_path / "raw32.bin")
    raw = _corpus(tmp_path / "raw32.bin", token_dtype="uint32", vocab_size=128_256)
    llama = _corpus(_shards(ids, tmp_path / "l3", [2500], magic=20240801), vocab_size=128_256)
    assert (
        raw.digest
        == llama.digest
        == hashlib.sha256(ids.astype(np.int64).tobytes()).hexdigest()[:16]
    )
    row = torch.tensor([0, 2490, 4000])
    assert torch.equal(
        gather_windows(raw.train, row, SEQ_LEN), gather_windows(llama.train, row, SEQ_LEN)
    )
    assert int(gather_windows(raw.train, row, SEQ_LEN).max()) >= 65_536


def test_a_shard_whose_header_does_not_match_its_size_is_refused(tmp_path: Path) -> None:
    paths = _shards(_ids(3000, seed=8), tmp_path, [1000, 2000])
    with paths[1].open("r+b") as handle:
        handle.truncate(1024 + 2 * 999)  # one id short
    with pytest.raises(
        DataError,
        match=r"train_000001\.bin: its llm\.c header \(magic 20240520\) counts 1,000 uint16 ids",
    ):
        _corpus(paths)
    formats.write_shard(paths[1], np.zeros(0, dtype=np.uint16))
    with pytest.raises(DataError, match=r"train_000001\.bin: its llm\.c header counts no ids"):
        _corpus(paths)
    (tmp_path / "empty.bin").write_bytes(b"")
    with pytest.raises(DataError, match=r"empty\.bin: empty"):
        _corpus([paths[0], tmp_path / "empty.bin"])
    (tmp_path / "odd.bin").write_bytes(b"\x01\x00\x02")
    with pytest.raises(
        DataError, match=r"odd\.bin: raw ids of uint16 \(2 bytes each\) but 3 bytes"
    ):
        _corpus(tmp_path / "odd.bin")


def test_a_header_of_an_undeclared_magic_is_refused_not_read_as_ids(tmp_path: Path) -> None:
    ids = _ids(3000, seed=9)
    paths = _shards(ids, tmp_path, [1500], magic=20250401)
    with pytest.raises(DataError, match=r"magic 20250401.*data\.header_magics: \[20250401\]"):
        _corpus(paths)
    declared = _corpus(paths, header_magics=[20250401])
    ids.tofile(tmp_path / "one.bin")
    assert declared.digest == _corpus(tmp_path / "one.bin").digest


def test_a_set_of_files_of_two_dtypes_is_refused(tmp_path: Path) -> None:
    low = _shards(_ids(2000, seed=13), tmp_path / "gpt2", [1000])
    high = _shards(_ids(2000, seed=14).astype(np.uint32), tmp_path / "llama3", [], magic=20240801)
    with pytest.raises(DataError, match=r"a shard set holds ids of one dtype.*'<u2', '<u4'"):
        _corpus([*low, *high])


def test_an_empty_npy_or_a_shard_cut_inside_its_header_is_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", _ids(2000, seed=15))
    (tmp_path / "b.npy").write_bytes(b"")
    with pytest.raises(DataError, match=r"b\.npy: not a readable \.npy array"):
        _corpus([tmp_path / "a.npy", tmp_path / "b.npy"])
    paths = _shards(_ids(3000, seed=16), tmp_path / "llmc", [1500])
    with paths[1].open("r+b") as handle:
        handle.truncate(600)  # inside the 1,024-byte header: not 300 raw ids
    with pytest.raises(DataError, match=r"train_000001\.bin: starts with llm\.c's magic 20240520"):
        _corpus(paths)


def test_raw_ids_of_a_vocabulary_over_65536_must_be_read_as_uint32(tmp_path: Path) -> None:
    ids = np.random.default_rng(17).integers(0, 128_256, 4000).astype(np.uint32)
    ids.tofile(tmp_path / "llama.bin")  # read as uint16 it would be twice as many ids
    with pytest.raises(DataError, match=r"llama\.bin: raw ids read as uint16 for data\.vocab_size"):
        _corpus(tmp_path / "llama.bin", vocab_size=128_256)
    assert (
        len(_corpus(tmp_path / "llama.bin", vocab_size=128_256, token_dtype="uint32").train) == 3600
    )


def test_a_file_listed_twice_in_a_set_is_refused(tmp_path: Path) -> None:
    paths = _shards(_ids(3000, seed=19), tmp_path, [1500])
    with pytest.raises(DataError, match=r"train_000000\.bin: listed twice in one set"):
        _corpus([paths[0], paths[1], paths[0]])
