"""The example shard set: the committed files are what the generator writes, and the example
experiment reads them as one corpus of the generator's ids."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import REPO

from ablate.bench.shard_set import SHARD_IDS, TRAIN_SHARDS, VAL_IDS, write_shard_set
from ablate.core.load import load_experiment
from ablate.launch.preflight import check_inputs
from ablate.training.data import builtin_text

COMMITTED = REPO / "experiments" / "data" / "fineweb_style"


def test_the_committed_shard_set_is_what_the_generator_writes(tmp_path: Path) -> None:
    written = write_shard_set(tmp_path)
    assert [p.name for p in written] == sorted(p.name for p in COMMITTED.iterdir())
    for path in written:
        assert path.read_bytes() == (COMMITTED / path.name).read_bytes(), path.name


def test_the_example_experiment_reads_the_shards_as_one_corpus() -> None:
    experiment = load_experiment(REPO / "experiments" / "shard_set.yaml")
    assert experiment.base.data.path == [
        str(COMMITTED / f"fineweb_train_00000{k}.bin") for k in range(1, 5)
    ]
    corpus = check_inputs(experiment)["layernorm"]
    ids = np.frombuffer(builtin_text(), dtype=np.uint8)
    n_train = TRAIN_SHARDS * SHARD_IDS
    assert (len(corpus.train), len(corpus.val), corpus.vocab_size) == (n_train, VAL_IDS, 256)
    assert np.array_equal(corpus.train[np.arange(39_990, 40_010)], ids[39_990:40_010])
    assert np.array_equal(corpus.val[np.arange(5)], ids[n_train : n_train + 5])
