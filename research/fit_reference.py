"""The simulator fitted to the dense reference, and the check that it looks like it.

:func:`fit_simulate` turns the reference's runs (:mod:`research.reference`) into a
``runtime.simulate`` section (:mod:`ablate.core.simulate`) whose parts are fitted, not assumed:

- **seed effects**: each seed's median offset from the per-LR median below the optimum, over
  both norms (their SD is ``seed_sd``);
- **the mean curve**: the per-LR means (seed effects removed) smoothed in log LR, with the
  penalty that best predicts a left-out seed; its lowest lattice point is ``opt_lr``;
- **run noise and excursions**: per lattice LR, the residuals from the mean curve there and
  :data:`WINDOW` steps either side, fitted by maximum likelihood as a mixture: normal noise or,
  with some chance, that noise plus an exponential excess (an exponentially modified normal):
  the heavy upper tail and the non-monotone curves above the optimum. Each LR's (sd, chance,
  mean excess) is a row of the ``noise`` table, and the valley ``shape`` is the mean curve less
  chance × mean excess, so that valley plus excursions averages to the mean curve;
- **the divergence edge**: the median over seeds of each seed's bracket midpoint, with the
  seeds' SD of its log as ``boundary_sd``.

:func:`shape_statistics` measures what the estimators feel (noise below and above the optimum,
the rise one √2 step past it, the share of steps above it where a seed's loss falls, the paired
SD at the optima); tests/research/test_fit_reference.py checks that simulated reference-shaped
studies land inside the reference's bootstrap intervals of each. Run::

    python -m research.fit_reference [RUNS.csv ...] \\
        [--write reports/reference/fitted_simulate.yaml]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy import optimize, special, stats

from ablate.core.config import RunConfig
from ablate.core.plan import RunSpec, seed_run_ids, with_train
from ablate.core.simulate import final_loss
from ablate.core.truth import SimulateConfig
from research import REPO
from research import reference as ref

FITTED = REPO / "reports/reference/fitted_simulate.yaml"
MIN_RUNS = 4  # an LR needs this many finite, not-diverged runs to be fitted
FALL = 0.02  # nats: a step above the optimum where a seed's loss falls more is non-monotone
PENALTIES = 10.0 ** np.arange(-3.0, 4.01, 0.5)  # the mean curve's smoothing penalties tried
SD_FLOOR = 0.005  # nats: no LR's mean is weighted as if its runs scattered less than this
WINDOW = 1  # lattice steps each side whose residuals an LR's noise is fitted on


def seed_effects(curves: dict[str, ref.Curves]) -> dict[int, float]:
    """Each seed's median offset from its LR's median over seeds, below each norm's optimum
    (where excursions are rare), pooled over the norms; centred on 0."""
    offsets: dict[int, list[float]] = {}
    for c in curves.values():
        below = c.lrs < ref.optimum(c)
        block = c.select[below]
        residual = block - np.median(block, axis=1, keepdims=True)
        for j, seed in enumerate(c.seeds):
            offsets.setdefault(seed, []).extend(residual[:, j])
    effects = {seed: float(np.median(values)) for seed, values in offsets.items()}
    centre = float(np.mean(list(effects.values())))
    return {seed: value - centre for seed, value in effects.items()}


def second_differences(x: np.ndarray) -> np.ndarray:
    """The matrix of second divided differences on the points ``x`` (spacing may vary)."""
    d = np.zeros((len(x) - 2, len(x)))
    for i in range(len(x) - 2):
        h1, h2 = x[i + 1] - x[i], x[i + 2] - x[i + 1]
        d[i, i : i + 3] = 2 / (h1 * (h1 + h2)), -2 / (h1 * h2), 2 / (h2 * (h1 + h2))
    return d


def smooth_mean(x: np.ndarray, values: np.ndarray, penalty: float) -> np.ndarray:
    """The per-LR means of ``values`` (LR × seed, NaN where none) smoothed in log2 LR: weighted
    least squares (each mean by its runs over their variance) with ``penalty`` on the squared
    second derivative (a Whittaker smoother)."""
    n = np.isfinite(values).sum(axis=1)
    sd = np.maximum(np.nanstd(values, axis=1, ddof=1), SD_FLOOR)
    weights = n / sd**2
    d = second_differences(x)
    return np.linalg.solve(np.diag(weights) + penalty * d.T @ d, weights * np.nanmean(values, 1))


def chosen_penalty(x: np.ndarray, values: np.ndarray) -> float:
    """The smoothing penalty of :data:`PENALTIES` whose curve, fitted without one seed,
    predicts that seed's losses best (squared error, summed over every seed left out)."""
    errors = []
    for penalty in PENALTIES:
        error = 0.0
        for j in range(values.shape[1]):
            fitted = smooth_mean(x, np.delete(values, j, axis=1), penalty)
            held = values[:, j]
            finite = np.isfinite(held)
            error += float(((held[finite] - fitted[finite]) ** 2).sum())
        errors.append(error)
    return float(PENALTIES[int(np.argmin(errors))])


@dataclass(frozen=True)
class Noise:
    """A run's deviation from the mean at one LR: normal ``sd`` plus, at ``chance``, an
    exponential excess of mean ``size``, shifted by −chance·size so that it averages 0."""

    sd: float
    chance: float
    size: float

    def log_density(self, residual: np.ndarray) -> np.ndarray:
        shifted = residual + self.chance * self.size
        calm = stats.norm.pdf(shifted, scale=self.sd)
        spiked = stats.exponnorm.pdf(shifted, self.size / self.sd, scale=self.sd)
        return np.log((1 - self.chance) * calm + self.chance * spiked + 1e-300)


MAX_CHANCE = 0.5  # an excursion is the minority of a window's runs, or it is the mode
MIN_SIZE, MAX_SIZE = 2.0, 50.0  # an excursion's mean excess, in the window's normal sds
NO_CHANCE = 0.01  # below this chance a window has no excursions (their size is not identified)


def _noise_of(theta: np.ndarray) -> Noise:
    """The :class:`Noise` of unconstrained parameters: log sd, the logit of chance over
    :data:`MAX_CHANCE`, the log of the excess of size over :data:`MIN_SIZE` sds."""
    sd = math.exp(theta[0])
    return Noise(
        sd, MAX_CHANCE * float(special.expit(theta[1])), sd * (MIN_SIZE + math.exp(theta[2]))
    )


def fit_noise(residual: np.ndarray) -> Noise:
    """The :class:`Noise` of greatest likelihood for residuals from the mean (L-BFGS-B from
    rare large, frequent small and no excursions, the best), its excursions bounded (at most
    :data:`MAX_CHANCE` of the runs, each :data:`MIN_SIZE`–:data:`MAX_SIZE` normal sds) so that
    a window without them does not fit a chance of 0 with any size; a chance under
    :data:`NO_CHANCE` is none, of the smallest size."""

    def nll(theta: np.ndarray) -> float:
        return -float(_noise_of(theta).log_density(residual).sum())

    sd = max(float(stats.median_abs_deviation(residual, scale="normal")), 1e-4)
    bounds = [(math.log(1e-4), 0.0), (-12.0, 12.0), (-5.0, math.log(MAX_SIZE - MIN_SIZE))]
    starts = [(0.2, 8.0), (0.6, 1.0), (0.02, 1.0)]
    found = [
        optimize.minimize(
            nll,
            np.array([math.log(sd), special.logit(c / MAX_CHANCE), math.log(z)]),
            method="L-BFGS-B",
            bounds=bounds,
        )
        for c, z in starts
    ]
    noise = _noise_of(min(found, key=lambda f: f.fun).x)
    if noise.chance < NO_CHANCE:
        return Noise(noise.sd, 0.0, MIN_SIZE * noise.sd)
    return noise


@dataclass(frozen=True)
class VariantFit:
    """One norm's fitted mean curve (its LRs and the expected loss at each, with the penalty
    that smoothed it) and each LR's noise."""

    lrs: np.ndarray
    mean: np.ndarray
    penalty: float
    noise: list[Noise]

    @property
    def opt_lr(self) -> float:
        return float(self.lrs[int(np.argmin(self.mean))])


def fit_variant(curves: ref.Curves, effects: dict[int, float]) -> VariantFit:
    """A norm's mean curve and noise from its runs (seed effects removed; diverged runs are
    the divergence edge's, not the valley's): the per-LR means smoothed with the penalty
    that best predicts a left-out seed, and each LR's noise fitted to the residuals from that
    curve at it and :data:`WINDOW` lattice steps either side."""
    values = curves.select - np.array([effects[s] for s in curves.seeds])
    values = np.where(curves.diverged, np.nan, values)
    keep = np.isfinite(values).sum(axis=1) >= MIN_RUNS
    values, lrs = values[keep], curves.lrs[keep]
    x = np.log2(lrs)
    penalty = chosen_penalty(x, values)
    mean = smooth_mean(x, values, penalty)
    residual = values - mean[:, None]
    noise = []
    for i in range(len(lrs)):
        near = residual[max(i - WINDOW, 0) : i + WINDOW + 1]
        noise.append(fit_noise(near[np.isfinite(near)]))
    return VariantFit(lrs, mean, penalty, noise)


ISOLATED = 4.0  # a seed's divergence edge this far below the median is an isolated blow-up


def divergence_fit(curves: ref.Curves) -> tuple[float, float]:
    """(median over seeds of each seed's divergence bracket midpoint, SD of its log over the
    seeds within a factor :data:`ISOLATED` of that median). An isolated blow-up far below
    the edge (the reference has one: an RMSNorm run at LR 0.0078 whose seed trained at every
    LR from 0.0093 to 0.354) is not seed jitter of the edge, and the simulator does not draw
    such runs."""
    mids = []
    for j in range(len(curves.seeds)):
        last = ref.divergence_edge(curves.lrs, curves.diverged[:, j])
        if last is not None:
            first = float(curves.lrs[np.flatnonzero(curves.lrs > last)[0]])
            mids.append(math.sqrt(last * first))
    if not mids:
        return 1000.0, 0.0
    centre = float(np.median(mids))
    kept = np.log([m for m in mids if m >= centre / ISOLATED])
    return centre, float(np.std(kept, ddof=1)) if len(kept) > 1 else 0.0


def truth_of(fit: VariantFit, divergence: tuple[float, float]) -> dict[str, Any]:
    """A variant's ``TruthConfig`` keys from its fit: the valley is the mean curve less each
    LR's mean excursion, so that valley plus excursions averages to the mean curve."""
    excess = np.array([n.chance * n.size for n in fit.noise])
    valley = fit.mean - excess
    at = int(np.argmin(fit.mean))
    best = float(valley[at])
    offsets = np.log2(fit.lrs / fit.opt_lr)
    values = {
        "opt_lr": fit.opt_lr,
        "best_loss": best,
        "divergence_lr": divergence[0],
        "boundary_sd": divergence[1],
        "warmup_gain": 0.0,  # the reference has one warmup: no gain is measured
    }
    return {
        **{k: float(f"{float(v):.6g}") for k, v in values.items()},
        "shape": [[_r(o), _r(v - best)] for o, v in zip(offsets, valley, strict=True)],
        "noise": [
            [_r(o), _r(n.sd), _r(n.chance), _r(n.size)]
            for o, n in zip(offsets, fit.noise, strict=True)
        ],
    }


def _r(value: float) -> float:
    return round(float(value), 6)


def unigram_of(runs: ref.Runs) -> float:
    """The reference's unigram floor, as its runs recorded it."""
    return float(ref.read_runs(runs)[0]["unigram_loss"].dropna().iloc[0])


def fit_simulate(runs: ref.Runs = ref.REFERENCE_RUNS) -> dict[str, Any]:
    """The ``runtime.simulate`` section fitted to a reference's ``runs.csv`` tables."""
    return fit_with_penalties(runs)[0]


def fit_with_penalties(runs: ref.Runs) -> tuple[dict[str, Any], dict[str, float]]:
    """(:func:`fit_simulate`'s section, each variant's chosen smoothing penalty)."""
    curves = ref.load_reference(runs)
    effects = seed_effects(curves)
    fits = {v: fit_variant(c, effects) for v, c in curves.items()}
    truths = {v: truth_of(fits[v], divergence_fit(curves[v])) for v in curves}
    first = next(iter(curves))
    below = [
        n.sd for f in fits.values() for lr, n in zip(f.lrs, f.noise, strict=True) if lr < f.opt_lr
    ]
    section = {
        "seed_sd": round(float(np.std(list(effects.values()), ddof=1)), 6),
        "run_sd": round(float(np.median(below)), 6),  # below the optima; the tables rule
        "unigram_loss": round(unigram_of(runs), 6),
        "default": truths[first],
        "variants": {v: t for v, t in truths.items() if v != first},
    }
    SimulateConfig(**section)  # a valid section, or this raises
    return section, {v: f.penalty for v, f in fits.items()}


def simulated_curves(
    base: RunConfig,
    section: dict[str, Any],
    lrs: Sequence[float],
    seeds: Sequence[int],
    variants: Sequence[str],
    seed: int,
) -> dict[str, ref.Curves]:
    """A reference-shaped study drawn from the simulator at ``section`` (its ``seed``):
    every variant at every LR on every seed, as :class:`~research.reference.Curves` (the
    simulator has no test split: test is val)."""
    sim = SimulateConfig(**{**section, "seed": seed})
    runtime = base.runtime.model_copy(update={"backend": "simulate", "simulate": sim})
    cfg = base.model_copy(update={"runtime": runtime})
    initial = math.log(sim.vocab_size)
    out = {}
    for variant in variants:
        select = np.empty((len(lrs), len(seeds)))
        diverged = np.zeros_like(select, dtype=bool)
        for i, lr in enumerate(lrs):
            at = with_train(cfg, lr=lr)
            ids = seed_run_ids(RunSpec("ref", variant, 0, at), seeds)
            for j, (s, run_id) in enumerate(zip(seeds, ids, strict=True)):
                loss, blew = final_loss(at, variant, s, run_id)
                select[i, j] = initial if blew else min(loss, initial)
                diverged[i, j] = blew
        learned = ~diverged & (select < sim.unigram_loss - 0.1)
        out[variant] = ref.Curves(
            np.array(lrs), tuple(seeds), select, select.copy(), diverged, learned
        )
    return out


def shape_statistics(curves: dict[str, ref.Curves]) -> dict[str, float]:
    """What the estimators feel, per norm: the SD over seeds at the 4 lattice LRs below the
    optimum and the 4 above (mean of them), the seed-mean rise one √2 step past it, the share
    of lattice steps in the 3 octaves above it where a seed's loss falls by over
    :data:`FALL`; and the SD over seeds of the paired difference at the two optima."""
    found = {}
    optima = {}
    for variant, c in curves.items():
        i = c.row(ref.optimum(c))
        optima[variant] = i
        spread = c.select.std(axis=1, ddof=1)
        means = c.select.mean(axis=1)
        above = c.select[i : min(i + 13, len(c.lrs))]
        found[f"{variant} noise below"] = float(spread[max(i - 4, 0) : i].mean())
        found[f"{variant} noise above"] = float(spread[i + 1 : i + 5].mean())
        found[f"{variant} rise per √2 step"] = float(means[i + 2] - means[i])
        found[f"{variant} non-monotone steps"] = float((np.diff(above, axis=0) < -FALL).mean())
    first, second = list(curves)
    paired = curves[second].select[optima[second]] - curves[first].select[optima[first]]
    found["paired SD at the optima"] = float(np.std(paired, ddof=1))
    return found


def reference_intervals(
    curves: dict[str, ref.Curves], draws: int = 1000
) -> dict[str, tuple[float, float]]:
    """95% percentile bootstrap intervals of :func:`shape_statistics` over the reference's
    seeds (resampled together for every norm: the pairs stay pairs)."""
    rng = np.random.default_rng(0)
    seeds = next(iter(curves.values())).seeds
    samples = []
    for _ in range(draws):
        chosen = list(rng.choice(seeds, len(seeds)))
        samples.append(shape_statistics({v: c.subset(chosen) for v, c in curves.items()}))
    frame = pd.DataFrame(samples)
    return {k: (float(frame[k].quantile(0.025)), float(frame[k].quantile(0.975))) for k in frame}


def main(argv: list[str] | None = None) -> None:
    """Fit the simulator to a reference and print (or write) its ``runtime.simulate``."""
    parser = argparse.ArgumentParser(prog="python -m research.fit_reference")
    parser.add_argument(
        "runs", type=Path, nargs="*", default=list(ref.REFERENCE_RUNS), help="runs.csv tables"
    )
    parser.add_argument("--write", type=Path, default=None, help="a YAML file to write it to")
    args = parser.parse_args(argv)
    section, penalties = fit_with_penalties(args.runs)
    chosen = ", ".join(f"{v} {p:g}" for v, p in penalties.items())
    text = (
        f"# runtime.simulate fitted to {' '.join(map(str, args.runs))} by "
        "python -m research.fit_reference\n"
        f"# mean curves smoothed with the penalties a left-out seed chose: {chosen}\n"
        + yaml.safe_dump(section, sort_keys=False, width=100)
    )
    print(text)
    if args.write is not None:
        args.write.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
