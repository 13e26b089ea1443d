"""The example data: the committed files are what the generator writes, and the example
experiments read them as one corpus each."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import REPO
from tokenizers import Tokenizer

from ablate.bench.example_data import (
    SHARD_IDS,
    TRAIN_SHARDS,
    VAL_IDS,
    paragraphs,
    write_shard_set,
    write_text_parquet,
)
from ablate.core.load import load_experiment
from ablate.launch.preflight import check_inputs
from ablate.training.data import builtin_text

COMMITTED = REPO / "experiments" / "data"


def test_the_committed_shard_set_is_what_the_generator_writes(tmp_path: Path) -> None:
    written = write_shard_set(tmp_path)
    committed = COMMITTED / "fineweb_style"
    assert [p.name for p in written] == sorted(p.name for p in committed.iterdir())
    for path in written:
        assert path.read_bytes() == (committed / path.name).read_bytes(), path.name


def test_the_committed_parquet_text_is_what_the_generator_writes(tmp_path: Path) -> None:
    written = write_text_parquet(tmp_path)
    committed = COMMITTED / "text_parquet"
    assert [p.name for p in written] == sorted(p.name for p in committed.iterdir())
    for path in written[:-1]:  # the rows (parquet's bytes name the pyarrow that wrote them)
        assert pq.read_table(path).equals(pq.read_table(committed / path.name)), path.name
    rows = pq.read_table(committed / "shard_00000.parquet")["text"].to_pylist()
    assert rows[:3] == paragraphs()[:3]
    text = "".join(paragraphs())
    ours, theirs = (Tokenizer.from_file(str(d / "tokenizer.json")) for d in (tmp_path, committed))
    assert ours.encode(text).ids == theirs.encode(text).ids


def test_the_shard_set_experiment_reads_the_shards_as_one_corpus() -> None:
    experiment = load_experiment(REPO / "experiments" / "shard_set.yaml")
    shards = COMMITTED / "fineweb_style"
    assert experiment.base.data.path == [
        str(shards / f"fineweb_train_00000{k}.bin") for k in range(1, 5)
    ]
    corpus = check_inputs(experiment)["layernorm"]
    ids = np.frombuffer(builtin_text(), dtype=np.uint8)
    n_train = TRAIN_SHARDS * SHARD_IDS
    assert (len(corpus.train), len(corpus.val), corpus.vocab_size) == (n_train, VAL_IDS, 256)
    assert np.array_equal(corpus.train[np.arange(39_990, 40_010)], ids[39_990:40_010])
    assert np.array_equal(corpus.val[np.arange(5)], ids[n_train : n_train + 5])


def test_the_parquet_experiment_reads_the_text_with_its_tokenizer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    experiment = load_experiment(REPO / "experiments" / "parquet_text.yaml")
    corpus = check_inputs(experiment)["layernorm"]
    tokenizer = Tokenizer.from_file(str(COMMITTED / "text_parquet" / "tokenizer.json"))
    first = tokenizer.encode(paragraphs()[0]).ids
    assert corpus.vocab_size == 1024 and corpus.train[np.arange(len(first))].tolist() == first
    assert 0.3 < corpus.tokens_per_byte < 0.6
