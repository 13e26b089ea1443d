"""The grid check's boundary and agreement rules."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import LENIENT, max_lr_result, write_experiment

from ablate.bench.grid_check import grid_boundary, grid_specs, main, overlaps, stable_above
from ablate.core import store
from ablate.core.folders import ExperimentFolder
from ablate.core.load import load_experiment
from ablate.core.studies import StoredStudies


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


@pytest.mark.trains
def test_the_check_prints_each_seeds_grid_beside_its_stored_bracket(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sections = {"max_lr": {"seeds": [0], "lr_min": 1e-3, "lr_max": 10.0, "tokens": 640}}
    path = write_experiment(tmp_path / "e.yaml", **{**LENIENT, **sections})
    root = tmp_path / "results"
    edges = {"layernorm": {0: 0.01}, "rmsnorm": {0: 1e4}}  # rmsnorm: stable past the range
    studies = StoredStudies(max_lr={v: max_lr_result(v, e) for v, e in edges.items()})
    folder = ExperimentFolder.of(root, "tiny")
    folder.path.mkdir(parents=True)
    store.write_studies(folder, studies)
    main([str(path), "--points", "2", "--results-dir", str(root), "--workers", "1"])
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in out if line.startswith(("layernorm ", "rmsnorm "))}
    # 0.001 stable, 10 blown up on the grid: it agrees with layernorm's stored bracket at
    # 0.01, not with rmsnorm's (stable to the lattice's end), each read back typed
    assert "[0.001, 10]" in rows["layernorm"] and "[0.009291, 0.01013]" in rows["layernorm"]
    assert " yes  (stable again" in rows["layernorm"] and " NO  (stable again" in rows["rmsnorm"]
    assert "[98.7, –]" in rows["rmsnorm"] and "  rmsnorm: 0 probe runs in all" in out
