"""The simulator fitted to the dense reference, and the check that it looks like it.

:func:`fit_simulate` turns the reference's runs (:mod:`ablate.bench.reference`) into a
``runtime.simulate`` section (:mod:`ablate.core.simulate`) whose parts are fitted, not assumed:

- **seed effects**: each seed's median offset from the per-LR median below the optimum, over
  both norms (their SD is ``seed_sd``);
- **the valley** of each norm: a location per lattice LR, made unimodal (isotonic down to its
  lowest point, up after it) and stored as the measured ``shape`` around ``opt_lr``;
- **run noise and excursions**: each run's residual from its LR's location is a mixture, by
  maximum likelihood: normal noise (``run_sd`` below the optimum, ``run_sd_above`` above it)
  or, with a chance that rises logistically in log LR (``spike_rate``, ``spike_lr``,
  ``spike_width``), that noise plus an exponential excess of mean ``spike_size`` (an
  exponentially modified normal): the heavy upper tail and the non-monotone curves above the
  optimum. Locations and mixture are fitted in turn, a few rounds;
- **the divergence edge**: the median over seeds of each seed's bracket midpoint, with the
  seeds' SD of its log as ``boundary_sd``.

:func:`shape_statistics` measures what the estimators feel (noise below and above the optimum,
the rise one √2 step past it, the share of steps above it where a seed's loss falls, the paired
SD at the optima); tests/bench/test_fit_reference.py checks that simulated reference-shaped
studies land inside the reference's bootstrap intervals of each. Run::

    python -m ablate.bench.fit_reference [reports/reference/runs.csv] \\
        [--write reports/reference/fitted_simulate.yaml]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy import optimize, special, stats

from ablate.bench import reference as ref
from ablate.core.config import RunConfig
from ablate.core.plan import RunSpec, with_train
from ablate.core.simulate import final_loss
from ablate.core.truth import SimulateConfig

FITTED = Path("reports/reference/fitted_simulate.yaml")
ROUNDS = 4  # location / mixture fits in turn
MIN_RUNS = 4  # an LR needs this many finite, not-diverged runs to get a location
FALL = 0.02  # nats: a step above the optimum where a seed's loss falls more is non-monotone


def unimodal(values: np.ndarray) -> np.ndarray:
    """The least-squares fit to ``values`` that falls to one lowest point and rises after it."""
    best, best_sse = values, math.inf
    for k in range(len(values)):
        down = optimize.isotonic_regression(values[: k + 1], increasing=False).x
        up = optimize.isotonic_regression(values[k:], increasing=True).x
        fit = np.concatenate([down[:-1], [min(down[-1], up[0])], up[1:]])
        sse = float(((fit - values) ** 2).sum())
        if sse < best_sse:
            best, best_sse = fit, sse
    return best


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


@dataclass(frozen=True)
class Mixture:
    """Run noise and excursions: normal sd below / above the optimum, the logistic chance of an
    excursion (its top, the log2 LR where it is half that, its width in octaves) and the
    excursion's mean excess."""

    sd_below: float
    sd_above: float
    rate: float
    centre: float
    width: float
    size: float

    def chance(self, x: np.ndarray) -> np.ndarray:
        return self.rate * special.expit((x - self.centre) / self.width)

    def log_density(self, residual: np.ndarray, x: np.ndarray, optimum: float) -> np.ndarray:
        sd = np.where(x > optimum, self.sd_above, self.sd_below)
        p = self.chance(x)
        calm = stats.norm.pdf(residual, scale=sd)
        spiked = stats.exponnorm.pdf(residual, self.size / sd, scale=sd)
        return np.log((1 - p) * calm + p * spiked + 1e-300)


MIN_WIDTH = 0.02  # octaves: the excursion chance rises over at least this (a lattice step: 0.25)


def _mixture_of(theta: np.ndarray) -> Mixture:
    """The mixture of unconstrained parameters: logs of the scales, the logit of the rate, the
    excess of the width over :data:`MIN_WIDTH` as a log (a sharper rise than the lattice can
    resolve is not identified: the likelihood is flat there)."""
    sd_b, sd_a, rate, centre, width, size = theta
    return Mixture(
        math.exp(sd_b),
        math.exp(sd_a),
        1 / (1 + math.exp(-rate)),
        centre,
        MIN_WIDTH + math.exp(width),
        math.exp(size),
    )


def _theta_of(m: Mixture) -> np.ndarray:
    return np.array(
        [
            math.log(m.sd_below),
            math.log(m.sd_above),
            math.log(m.rate / (1 - m.rate)),
            m.centre,
            math.log(max(m.width - MIN_WIDTH, 1e-9)),
            math.log(m.size),
        ]
    )


def fit_mixture(residual: np.ndarray, x: np.ndarray, optimum: float, start: Mixture) -> Mixture:
    """The mixture of greatest likelihood for residuals at log2 LRs ``x``: Nelder–Mead from
    ``start`` and from two others (rarer, larger excursions; more, smaller ones), the best."""

    def nll(theta: np.ndarray) -> float:
        return -float(_mixture_of(theta).log_density(residual, x, optimum).sum())

    starts = [
        start,
        replace(start, rate=0.15, size=0.2),
        replace(start, rate=0.6, size=0.05),
    ]
    found = [
        optimize.minimize(nll, _theta_of(s), method="Nelder-Mead", options={"maxiter": 4000})
        for s in starts
    ]
    return _mixture_of(min(found, key=lambda f: f.fun).x)


def fit_locations(
    values: np.ndarray, x: np.ndarray, mixture: Mixture, optimum: float
) -> np.ndarray:
    """Per LR (row), the location of greatest likelihood under ``mixture``."""
    found = []
    for row, at in zip(values, x, strict=True):
        finite = row[np.isfinite(row)]

        def nll(mu: float, finite: np.ndarray = finite, at: float = at) -> float:
            where = np.full(len(finite), at)
            return -float(mixture.log_density(finite - mu, where, optimum).sum())

        low, high = float(finite.min()) - 0.2, float(np.median(finite))
        found.append(optimize.minimize_scalar(nll, bounds=(low, high), method="bounded").x)
    return np.array(found)


@dataclass(frozen=True)
class VariantFit:
    """One norm's fitted valley (LRs, unimodal locations) and mixture."""

    lrs: np.ndarray
    locations: np.ndarray
    mixture: Mixture

    @property
    def opt_lr(self) -> float:
        return float(self.lrs[int(np.argmin(self.locations))])


def fit_variant(curves: ref.Curves, effects: dict[int, float]) -> VariantFit:
    """A norm's valley and mixture from its runs (seed effects removed; diverged runs are the
    divergence edge's, not the valley's)."""
    values = curves.select - np.array([effects[s] for s in curves.seeds])
    values = np.where(curves.diverged, np.nan, values)
    keep = np.isfinite(values).sum(axis=1) >= MIN_RUNS
    values, lrs = values[keep], curves.lrs[keep]
    x = np.log2(lrs)
    locations = np.nanpercentile(values, 25, axis=1)
    optimum = float(x[int(np.argmin(locations))])
    below = values[x < optimum] - locations[x < optimum, None]
    sd = float(stats.median_abs_deviation(below[np.isfinite(below)], scale="normal"))
    mixture = Mixture(sd, 2 * sd, 0.3, optimum + 0.5, 0.5, 0.1)
    for _ in range(ROUNDS):
        residual = values - locations[:, None]
        finite = np.isfinite(residual)
        at = np.broadcast_to(x[:, None], values.shape)
        mixture = fit_mixture(residual[finite], at[finite], optimum, mixture)
        locations = unimodal(fit_locations(values, x, mixture, optimum))
        optimum = float(x[int(np.argmin(locations))])
    return VariantFit(lrs, locations, mixture)


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
    """A variant's ``TruthConfig`` keys from its fit."""
    best = float(fit.locations.min())
    offsets = np.log2(fit.lrs / fit.opt_lr)
    m = fit.mixture
    shape = [
        [round(float(o), 6), round(float(v) - best, 6)]
        for o, v in zip(offsets, fit.locations, strict=True)
    ]
    values = {
        "opt_lr": fit.opt_lr,
        "best_loss": best,
        "run_sd_above": m.sd_above,
        "spike_rate": m.rate,
        "spike_lr": 2.0**m.centre,
        "spike_width": m.width,
        "spike_size": m.size,
        "divergence_lr": divergence[0],
        "boundary_sd": divergence[1],
        "warmup_gain": 0.0,  # the reference has one warmup: no gain is measured
    }
    return {**{k: float(f"{float(v):.6g}") for k, v in values.items()}, "shape": shape}


def unigram_of(runs: Path) -> float:
    """The reference's unigram floor, as its runs recorded it."""
    return float(pd.read_csv(runs)["unigram_loss"].dropna().iloc[0])


def fit_simulate(runs: Path = ref.REFERENCE_RUNS) -> dict[str, Any]:
    """The ``runtime.simulate`` section fitted to a reference's ``runs.csv``."""
    curves = ref.load_reference(runs)
    effects = seed_effects(curves)
    fits = {v: fit_variant(c, effects) for v, c in curves.items()}
    truths = {v: truth_of(fits[v], divergence_fit(curves[v])) for v in curves}
    first = next(iter(curves))
    sd_below = float(np.mean([f.mixture.sd_below for f in fits.values()]))
    section = {
        "seed_sd": round(float(np.std(list(effects.values()), ddof=1)), 6),
        "run_sd": round(sd_below, 6),
        "unigram_loss": round(unigram_of(runs), 6),
        "default": truths[first],
        "variants": {v: t for v, t in truths.items() if v != first},
    }
    SimulateConfig(**section)  # a valid section, or this raises
    return section


def simulated_curves(
    base: RunConfig,
    section: dict[str, Any],
    lrs: Sequence[float],
    seeds: Sequence[int],
    variants: Sequence[str],
    seed: int,
) -> dict[str, ref.Curves]:
    """A reference-shaped study drawn from the simulator at ``section`` (its ``seed``):
    every variant at every LR on every seed, as :class:`~ablate.bench.reference.Curves` (the
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
            for j, s in enumerate(seeds):
                loss, blew = final_loss(at, variant, s, RunSpec("ref", variant, s, at).run_id)
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
    parser = argparse.ArgumentParser(prog="python -m ablate.bench.fit_reference")
    parser.add_argument("runs", type=Path, nargs="?", default=ref.REFERENCE_RUNS)
    parser.add_argument("--write", type=Path, default=None, help="a YAML file to write it to")
    args = parser.parse_args(argv)
    section = fit_simulate(args.runs)
    text = (
        f"# runtime.simulate fitted to {args.runs} by python -m ablate.bench.fit_reference\n"
        + yaml.safe_dump(section, sort_keys=False, width=100)
    )
    print(text)
    if args.write is not None:
        args.write.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
