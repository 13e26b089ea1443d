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

from ablate.core.load import load_experiment
from ablate.core.simulate import mean_loss, run_sd, spike_chance, spike_size
from ablate.core.truth import SimulateConfig, TruthConfig
from research import fit_reference as fit
from research import reference as ref

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
    assert abs(math.log2(found.divergence_lr / truth.divergence_lr)) <= 0.5
    # the expected loss the fit implies tracks the truth's through the basin and past it
    for lr in LATTICE[4:22]:
        assert mean_loss(found, lr) == pytest.approx(mean_loss(truth, lr), abs=0.06)
    # the noise: calm well below the optimum (run_sd 0.01), excursions of about the truth's
    # mean excess 0.5 x 0.15 well above the spike LR, none well below it
    low, high = truth.opt_lr / 4, truth.spike_lr * 4
    assert run_sd(SimulateConfig(**section), found, low) == pytest.approx(0.01, rel=0.5)
    assert spike_chance(found, low) * spike_size(found, low) < 0.01
    assert spike_chance(found, high) * spike_size(found, high) > 0.02


def test_a_left_out_seed_chooses_more_smoothing_for_noisier_runs() -> None:
    rng = np.random.default_rng(0)
    x = np.linspace(-3.0, 3.0, 25)
    curve = 0.05 * x**2
    calm = curve[:, None] + rng.normal(0, 0.002, (25, 8))
    noisy = curve[:, None] + rng.normal(0, 0.05, (25, 8))
    assert fit.chosen_penalty(x, noisy) > fit.chosen_penalty(x, calm)
    smoothed = fit.smooth_mean(x, noisy, fit.chosen_penalty(x, noisy))
    raw = np.nanmean(noisy, axis=1)
    assert np.abs(smoothed - curve).mean() < np.abs(raw - curve).mean()  # closer to the truth


def test_a_window_without_excursions_fits_none() -> None:
    rng = np.random.default_rng(1)
    calm = fit.fit_noise(rng.normal(0, 0.01, 200))
    assert calm.chance == 0.0 and calm.sd == pytest.approx(0.01, rel=0.2)
    spiky = rng.normal(0, 0.01, 400) + (rng.random(400) < 0.2) * rng.exponential(0.1, 400)
    found = fit.fit_noise(spiky - spiky.mean())
    assert found.chance == pytest.approx(0.2, abs=0.08) and found.size == pytest.approx(
        0.1, rel=0.3
    )


REFERENCE = REPO / "reports" / "reference"
STUDIES = 20  # simulated reference-shaped studies (16 seeds each) the check averages over


def test_the_committed_fit_is_what_fitting_the_committed_reference_gives() -> None:
    committed = yaml.safe_load((REFERENCE / "fitted_simulate.yaml").read_text())
    refit = fit.fit_simulate([REPO / p for p in ref.REFERENCE_RUNS])
    for name in ("seed_sd", "run_sd", "unigram_loss"):
        assert refit[name] == pytest.approx(committed[name], rel=1e-3)
    for key, value in committed["default"].items():
        if key not in ("shape", "noise"):
            assert refit["default"][key] == pytest.approx(value, rel=1e-3), key
    for key in ("shape", "noise"):
        assert np.allclose(refit["default"][key], committed["default"][key], atol=1e-4), key


def outside_the_reference(base, section: dict) -> dict[str, tuple]:
    """The statistics whose mean over :data:`STUDIES` reference-shaped studies drawn at
    ``section`` falls outside the committed reference's 95% bootstrap interval."""
    curves = ref.load_reference([REPO / p for p in ref.REFERENCE_RUNS])
    intervals = fit.reference_intervals(curves, draws=400)
    variants = list(curves)
    seeds = range(len(curves[variants[0]].seeds))  # reference-shaped: as many seeds
    drawn = pd.DataFrame(
        [
            fit.shape_statistics(fit.simulated_curves(base, section, LATTICE, seeds, variants, k))
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
    assert outside_the_reference(base, section) == {}  # every statistic inside its interval
    fitted = section["default"]
    old = {  # the old model at the fitted optimum, loss and edge: symmetric valley, iid noise
        "seed_sd": 0.01,
        "run_sd": 0.005,
        "unigram_loss": section["unigram_loss"],
        "default": {k: fitted[k] for k in ("opt_lr", "best_loss", "divergence_lr")},
    }
    missed = outside_the_reference(base, old)
    assert {"layernorm noise above", "layernorm non-monotone steps"} <= set(missed)
