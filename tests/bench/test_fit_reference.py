"""The simulator fitted to the reference: the fit recovers a known spiky truth from a
reference-shaped study drawn from it, and the fitted simulator's studies look like the
committed reference (its statistics inside the reference's bootstrap intervals)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO

from ablate.bench import fit_reference as fit
from ablate.bench import reference as ref
from ablate.core.load import load_experiment
from ablate.core.simulate import mean_loss
from ablate.core.truth import TruthConfig

LATTICE = load_experiment(REPO / "experiments" / "reference.yaml").sweep.lrs()
SPIKY = {
    "seed_sd": 0.01,
    "run_sd": 0.01,
    "unigram_loss": 3.3,
    "default": {
        "opt_lr": 2.0**-8.5,
        "best_loss": 2.28,
        "curvature": 0.5,
        "run_sd_above": 0.02,
        "spike_rate": 0.5,
        "spike_lr": 2.0**-8,
        "spike_width": 0.4,
        "spike_size": 0.15,
        "divergence_lr": 0.45,
        "boundary_sd": 0.1,
    },
    "variants": {"rmsnorm": {"best_loss": 2.26, "opt_lr": 2.0**-8.25}},
}


def as_runs_csv(curves: dict[str, ref.Curves], path: Path) -> Path:
    """A reference's runs.csv holding ``curves`` (what load_reference reads back)."""
    rows = []
    for variant, c in curves.items():
        for i, lr in enumerate(c.lrs):
            for j, seed in enumerate(c.seeds):
                blew = bool(c.diverged[i, j])
                rows.append(
                    {
                        "group": "sweep",
                        "variant": variant,
                        "seed": seed,
                        "lr": lr,
                        "final_val_loss": math.nan if blew else c.select[i, j],
                        "final_test_loss": math.nan if blew else c.test[i, j],
                        "status": "diverged" if blew else "finished",
                        "stable": bool(c.learned[i, j]),
                        "unstable_reason": "diverged: loss" if blew else "",
                        "initial_loss": math.log(256),
                        "unigram_loss": 3.3,
                    }
                )
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def base():
    return load_experiment(REPO / "experiments" / "reference.yaml").base


def test_the_fit_recovers_a_spiky_truth_from_a_reference_shaped_study(base, tmp_path: Path) -> None:
    drawn = fit.simulated_curves(base, SPIKY, LATTICE, range(8), ["layernorm", "rmsnorm"], 3)
    section = fit.fit_simulate(as_runs_csv(drawn, tmp_path / "runs.csv"))
    found = TruthConfig(**section["default"])
    truth = TruthConfig(**SPIKY["default"])
    assert abs(math.log2(found.opt_lr / truth.opt_lr)) <= 0.5  # within two lattice steps
    assert section["run_sd"] == pytest.approx(0.01, rel=0.5)
    assert found.spike_size == pytest.approx(0.15, rel=0.6)
    assert abs(math.log2(found.divergence_lr / truth.divergence_lr)) <= 0.5
    # the expected loss the fit implies tracks the truth's through the basin and past it
    for lr in LATTICE[4:22]:
        assert mean_loss(found, lr) == pytest.approx(mean_loss(truth, lr), abs=0.06)


def test_a_unimodal_fit_falls_then_rises() -> None:
    values = np.array([3.0, 2.5, 2.6, 2.2, 2.4, 2.3, 2.9])
    fitted = fit.unimodal(values)
    low = int(np.argmin(fitted))
    assert (np.diff(fitted[: low + 1]) <= 0).all() and (np.diff(fitted[low:]) >= 0).all()
    assert fitted[3] == pytest.approx(2.2)


REFERENCE = REPO / "reports" / "reference"
STUDIES = 40  # simulated reference-shaped studies the check averages over


def test_the_committed_fit_is_what_fitting_the_committed_reference_gives() -> None:
    committed = yaml.safe_load((REFERENCE / "fitted_simulate.yaml").read_text())
    refit = fit.fit_simulate(REFERENCE / "runs.csv")
    for name in ("seed_sd", "run_sd", "unigram_loss"):
        assert refit[name] == pytest.approx(committed[name], rel=1e-3)
    for key, value in committed["default"].items():
        if key != "shape":
            assert refit["default"][key] == pytest.approx(value, rel=1e-3), key
    assert np.allclose(refit["default"]["shape"], committed["default"]["shape"], atol=1e-4)


def outside_the_reference(base, section: dict) -> dict[str, tuple]:
    """The statistics whose mean over :data:`STUDIES` reference-shaped studies drawn at
    ``section`` falls outside the committed reference's 95% bootstrap interval."""
    curves = ref.load_reference(REFERENCE / "runs.csv")
    intervals = fit.reference_intervals(curves, draws=400)
    variants = list(curves)
    drawn = pd.DataFrame(
        [
            fit.shape_statistics(
                fit.simulated_curves(base, section, LATTICE, range(8), variants, k)
            )
            for k in range(STUDIES)
        ]
    ).mean()
    return {
        name: (round(drawn[name], 4), tuple(round(x, 4) for x in bounds))
        for name, bounds in intervals.items()
        if not bounds[0] <= drawn[name] <= bounds[1]
    }


def test_the_fitted_simulator_looks_like_the_reference_and_the_old_one_does_not(
    base,
) -> None:
    section = yaml.safe_load((REFERENCE / "fitted_simulate.yaml").read_text())
    # every statistic inside the reference's 95% interval but one, which the fitted model is
    # known to miss (docs/simulator.md): its noise steps up at the optimum instead of growing
    # with the LR, so excursions at the optimum inflate the paired SD there
    assert set(outside_the_reference(base, section)) == {"paired SD at the optima"}
    fitted = section["default"]
    old = {  # the old model at the fitted optimum, loss and edge: symmetric valley, iid noise
        "seed_sd": 0.01,
        "run_sd": 0.005,
        "unigram_loss": section["unigram_loss"],
        "default": {k: fitted[k] for k in ("opt_lr", "best_loss", "divergence_lr")},
    }
    missed = outside_the_reference(base, old)
    assert {"layernorm noise above", "layernorm non-monotone steps"} <= set(missed)
