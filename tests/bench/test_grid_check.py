"""The grid check's boundary and agreement rules."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from conftest import write_experiment

from ablate.bench.grid_check import grid_boundary, grid_specs, overlaps, stable_above
from ablate.core.load import load_experiment


def test_grid_specs_cover_variants_points_and_seeds(tmp_path: Path) -> None:
    path = write_experiment(
        tmp_path / "e.yaml", max_lr={"seeds": [0, 3], "lr_min": 1e-3, "lr_max": 1.0, "tokens": 640}
    )
    specs = grid_specs(load_experiment(path), points=4)
    assert len(specs) == 2 * 4 * 2 and {s.group for s in specs} == {"grid"}
    lrs = sorted({round(s.config.train.lr, 9) for s in specs})
    assert lrs == [0.001, 0.01, 0.1, 1.0] and {s.seed for s in specs} == {0, 3}


def test_boundary_is_the_onset_of_instability() -> None:
    stable = pd.Series([True, True, False, True, False], index=[0.01, 0.1, 1.0, 2.0, 5.0])
    assert grid_boundary(stable) == (0.1, 1.0)
    assert stable_above(stable, 1.0) == 1
    assert grid_boundary(pd.Series([True, True], index=[0.1, 1.0])) == (1.0, None)
    assert grid_boundary(pd.Series([False], index=[0.1])) == (None, 0.1)


def test_overlap_of_boundary_intervals() -> None:
    assert overlaps([0.25, 0.46], [0.32, 0.38])
    assert overlaps([0.46, 0.86], [0.457, 0.543])
    assert not overlaps([0.01, 0.02], [0.3, 0.4])
    assert overlaps([1.0, None], [2.0, 3.0]) and not overlaps([None, 0.1], [0.2, 0.3])
