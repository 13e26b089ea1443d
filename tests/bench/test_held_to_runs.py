"""The protocol replayed on a reference: every disjoint draw of seeds, the optimum estimators
against a cliff above the optimum, and the scores, on a runs.csv built by hand (where the
answers are known) and on the committed reference."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import REPO
from test_reference import LRS, OPT, write_runs

from ablate.bench import held_to_runs as held
from ablate.bench import reference as ref
from ablate.core.experiment import Experiment
from ablate.core.load import load_experiment


@pytest.fixture
def design(tmp_path: Path) -> Experiment:
    """The default protocol's sections on the hand-built lattice's range."""
    doc = yaml.safe_load((REPO / "experiments" / "ln_vs_rms.yaml").read_text())
    doc["curve"] = {"lr_min": 1.0e-3, "lr_max": 7.9e-3, "extend": 1, "seeds": [3, 4, 5, 6]}
    path = tmp_path / "protocol.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_experiment(path)


def test_every_disjoint_draw_of_curve_and_ab_seeds_is_replayed() -> None:
    draws = held.disjoint_draws(range(8), 4, 3)
    assert len(draws) == 70 * 4 and len(set(draws)) == len(draws)
    assert all(not set(d.curve) & set(d.ab) for d in draws)
    assert len(held.disjoint_draws(range(8), 2, 5)) == 28 * 6


def test_a_cliff_drags_the_old_vertex_below_the_optimum_and_not_the_argmin(
    tmp_path: Path, design: Experiment
) -> None:
    ln = ref.load_reference(write_runs(tmp_path / "runs.csv"))["layernorm"]
    grid = held.protocol_grid(ln, (0, 1), design)
    assert grid == [2.0 ** (k / 2) for k in range(-19, -13)]  # the curve's √2 lattice points
    old = held.vertex(ln, (0, 1), grid)
    assert old.lr < OPT / 2.0**0.25  # more than a quarter octave low: the cliff's doing
    assert held.grid_argmin(ln, (0, 1), grid) == held.Chosen(OPT, False)
    assert held.refined_argmin(ln, (0, 1), grid).lr == OPT
    # the running mean steps one grid point below a cliff right above the optimum: onto the
    # flat side, at 0.05 · 0.5² = 0.0125 nats of regret, not into the cliff
    assert held.smoothed_argmin(ln, (0, 1), grid) == held.Chosen(OPT / 2**0.5, False)


def test_the_scores_find_the_constructed_truth(tmp_path: Path, design: Experiment) -> None:
    curves = ref.load_reference(write_runs(tmp_path / "runs.csv"))
    scores = held.score_rows(curves, design).set_index(["estimator", "variant"])
    refined = scores.loc[("refined_argmin", "layernorm")]
    assert refined["optimum in 2^(1/4)"] == 1.0 and refined["draws"] == 280  # 4 + 3 of 8
    smoothed = scores.loc[("smoothed_argmin", "layernorm")]  # the curve stage's estimator
    assert smoothed["bias (log2)"] == pytest.approx(-0.5) and smoothed[
        "regret (nats)"
    ] == pytest.approx(0.0125)
    assert smoothed["usable in 2^(1/4)"] == 1.0
    assert refined["Δ mean"] == pytest.approx(-0.03, abs=0.002)
    # three pairs of a fixed 7-level pattern, not normal noise: a t interval covers most draws
    assert 0.75 <= refined["Δ CI covers"] < 1.0 and refined["different"] > 0.5
    assert refined["usable in 2^(1/4)"] == 1.0
    assert scores.loc[("vertex", "layernorm"), "optimum in 2^(1/4)"] == 0.0
    truth = held.truth_rows(curves).set_index(["variant", "answer"])
    assert truth.loc[("layernorm", "LR optimum"), "value"] == OPT
    assert truth.loc[("rmsnorm", "divergence edge"), "value"] == LRS[-2]


def test_the_committed_tables_are_what_the_harness_gives_on_the_committed_reference() -> None:
    curves = ref.load_reference(REPO / "reports" / "reference" / "runs.csv")
    design = load_experiment(REPO / "experiments" / "ln_vs_rms.yaml")
    truth = held.truth_markdown(held.truth_rows(curves))
    scores = held.scores_markdown(held.score_rows(curves, design))
    committed = (REPO / "reports" / "reference" / "held_to_runs.md").read_text(encoding="utf-8")
    docs = (REPO / "docs" / "stability-and-search.md").read_text(encoding="utf-8")
    for table in (truth, scores):
        assert table in committed and table in docs


def test_the_committed_shape_table_is_the_reference_s() -> None:
    curves = ref.load_reference(REPO / "reports" / "reference" / "runs.csv")
    shape = held.shape_rows(curves)
    committed = (REPO / "reports" / "reference" / "held_to_runs.md").read_text(encoding="utf-8")
    for row in shape.itertuples():
        cells = f"| {row.statistic:<28} | {row.reference:11.4f} | {row[3]:6.4f} | {row[4]:7.4f} |"
        assert cells in committed, cells
