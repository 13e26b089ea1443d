"""The one pre-flight step: each check refuses bad input with its one-line error before
anything is written, and a simulated experiment reads no data (that a whole simulated run never
loads torch: tests/launch/test_pipeline.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, write_experiment

from ablate.core.errors import ConfigError, DataError
from ablate.core.load import load_experiment
from ablate.launch.preflight import preflight, studies_configured


def test_a_missing_data_file_stops_it_before_the_results_folder_exists(tmp_path: Path) -> None:
    path = write_experiment(tmp_path / "e.yaml")
    experiment = load_experiment(path)
    missing = experiment.base.data.model_copy(update={"source": "file", "path": "nope.txt"})
    base = experiment.base.model_copy(update={"data": missing})
    broken = experiment.model_copy(
        update={"variants": {n: base for n in experiment.variants}, "base": base}
    )
    with pytest.raises(DataError, match="variants.layernorm"):
        preflight(broken, tmp_path / "results", None)
    assert not (tmp_path / "results").exists()


def test_a_storage_that_does_not_open_stops_a_file_with_studies(tmp_path: Path) -> None:
    experiment = load_experiment(REPO / "experiments" / "smoke.yaml", backend="simulate")
    assert studies_configured(experiment)
    with pytest.raises(ConfigError):
        preflight(experiment, tmp_path / "results", "postgresql://nobody@127.0.0.1:9/none")


def test_a_stage_s_own_budget_is_held_to_the_token_file_too(tmp_path: Path) -> None:
    import numpy as np

    np.random.default_rng(0).integers(0, 200, 3000).astype(np.uint16).tofile(tmp_path / "t.bin")
    data = {"source": "tokens_file", "path": "t.bin", "vocab_size": 256}
    sweep = {"lr_min": 1.0e-3, "lr_max": 1.0e-2, "points": 2, "tokens": 200_000}
    experiment = load_experiment(write_experiment(tmp_path / "e.yaml", data=data, sweep=sweep))
    with pytest.raises(DataError, match=r"sweep\.tokens 200,000 would read its 2,700 training"):
        preflight(experiment, tmp_path / "results", None)  # train.tokens (1,280) fits
    assert not (tmp_path / "results").exists()
