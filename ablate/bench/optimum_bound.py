"""How close two choices of the LR optimum get on the simulator fitted to the dense reference:
the bar "within 2^(1/4) of the truth's optimum" against the number of curve seeds. Neither is a
bound on what any estimator could do.

The fitted simulator's truth is each norm's lowest *expected* loss on the reference's 2^(1/4)
lattice, excursions included (:func:`ablate.bench.held_to_runs.simulated_truth`). Two things
decide whether seeds can find it: how far the lattice points next to it lie above it, and how
much of that gap is carried by rare, large excursions, which a few seeds mostly miss (their
sample mean is typically below the expectation). :func:`truth_rows` tabulates both.
:func:`bound_rows` then draws large reference-shaped studies (:data:`SEEDS_PER_STUDY` seeds,
every lattice LR) and, for each number of curve seeds, random subsets of them, and scores two
choices against the truth, with the standard error of each share over the studies (the subsets
of one study share its seeds, so its draws are not independent):

- **every lattice point**: the plain argmin of the seed-mean loss over the whole 2^(1/4)
  lattice, as if every point were run on every curve seed (twice the curve stage's points, no
  smoothing);
- **the curve stage**: ``smoothed_argmin`` on the protocol's √2 grid
  (:func:`ablate.bench.held_to_runs.smoothed_argmin`), the estimator the reports use.

Run::

    python -m ablate.bench.optimum_bound [--studies 8] [--draws 100] \\
        [--seeds 4 8 16 32] [--out reports/reference/optimum_bound.md]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from ablate.bench import fit_reference as fit
from ablate.bench import held_to_runs as held
from ablate.bench import reference as ref
from ablate.core.experiment import Experiment
from ablate.core.load import load_experiment
from ablate.core.simulate import mean_loss, noise_row, valley_loss
from ablate.core.truth import SimulateConfig, TruthConfig

SEEDS_PER_STUDY = 64  # seeds of each simulated study that curve seeds are drawn from
NEAR = 1.0  # octaves either side of each optimum that the truth table shows
BAR = 0.9  # the share of draws within 2^(1/4) that the estimators are held to


def truth_rows(
    section: dict[str, Any], lattice: Sequence[float], optima: dict[str, float]
) -> pd.DataFrame:
    """Per norm, the lattice LRs within :data:`NEAR` octaves of its true optimum: the
    expected loss above the optimum's, split into the valley's part and the excursions', and
    the excursions' chance and mean size there."""
    sim = SimulateConfig(**section)
    rows = []
    for variant, best in optima.items():
        truth = sim.truth(variant)

        def excursions(lr: float, truth: TruthConfig = truth) -> float:
            return mean_loss(truth, lr) - valley_loss(truth, lr)

        for lr in lattice:
            offset = math.log2(lr / best)
            if abs(offset) > NEAR + 1e-9:
                continue
            _, chance, size = noise_row(truth, lr)
            rows.append(
                {
                    "variant": variant,
                    "log2(LR / optimum)": f"{offset:+.2f}",
                    "LR": lr,
                    "expected loss above the optimum's": mean_loss(truth, lr)
                    - mean_loss(truth, best),
                    "of it, the valley": valley_loss(truth, lr) - valley_loss(truth, best),
                    "of it, excursions": excursions(lr) - excursions(best),
                    "excursion chance": chance,
                    "excursion mean": size,
                }
            )
    return pd.DataFrame(rows)


def lattice_argmin(curves: ref.Curves, seeds: Sequence[int]) -> float:
    """The LR of the lowest seed-mean loss over every point of ``curves``' lattice."""
    return ref.mean_argmin(curves, seeds, [float(lr) for lr in curves.lrs])


def curve_stage(curves: ref.Curves, seeds: Sequence[int], design: Experiment) -> float:
    """The curve stage's choice: ``smoothed_argmin`` on the protocol's grid for these seeds."""
    grid = held.protocol_grid(curves, seeds, design)
    return held.smoothed_argmin(curves, seeds, grid).lr


def within_quarter(lr: float, optimum: float) -> bool:
    """Whether ``lr`` lies within 2^(1/4) of ``optimum``."""
    return abs(math.log2(lr / optimum)) <= held.QUARTER


def bound_rows(
    studies: Sequence[dict[str, ref.Curves]],
    optima: dict[str, float],
    design: Experiment,
    seed_counts: Sequence[int],
    draws: int,
) -> pd.DataFrame:
    """Per norm and number of curve seeds, the share of ``draws`` random seed subsets per
    study whose choice lies within 2^(1/4) of ``optima`` (the lattice-wide argmin and the
    curve stage's), averaged over ``studies``, with its standard error over them."""
    rng = np.random.default_rng(0)
    rows = []
    for variant, optimum in optima.items():
        for n in seed_counts:
            shares = np.zeros((len(studies), 2))
            for k, study in enumerate(studies):
                curves = study[variant]
                for _ in range(draws):
                    seeds = [int(s) for s in rng.choice(curves.seeds, n, replace=False)]
                    shares[k, 0] += within_quarter(lattice_argmin(curves, seeds), optimum)
                    shares[k, 1] += within_quarter(curve_stage(curves, seeds, design), optimum)
            shares /= draws
            spread = (
                shares.std(axis=0, ddof=1) / math.sqrt(len(studies))
                if len(studies) > 1
                else (math.nan, math.nan)
            )
            rows.append(
                {
                    "variant": variant,
                    "curve seeds": n,
                    "every lattice point": float(shares[:, 0].mean()),
                    "its SE": float(spread[0]),
                    "the curve stage": float(shares[:, 1].mean()),
                    "the stage's SE": float(spread[1]),
                    "draws": len(studies) * draws,
                }
            )
    return pd.DataFrame(rows)


def markdown(truth: pd.DataFrame, bound: pd.DataFrame) -> tuple[str, str]:
    """The two tables as markdown: LRs to 3 significant digits, nats and shares fixed."""
    shown = truth.copy()
    shown["LR"] = shown["LR"].map(lambda x: f"{x:.3g}")
    nats = ("expected loss above the optimum's", "of it, the valley", "of it, excursions")
    for column in (*nats, "excursion mean"):
        shown[column] = shown[column].map(lambda x: f"{x:.4f}")
    shown["excursion chance"] = shown["excursion chance"].map(lambda x: f"{x:.1%}")
    scored = bound.copy()
    for column in ("every lattice point", "its SE", "the curve stage", "the stage's SE"):
        scored[column] = scored[column].map(lambda x: f"{x:.1%}")
    return (
        shown.to_markdown(index=False, disable_numparse=True),
        scored.to_markdown(index=False, disable_numparse=True),
    )


def main(argv: list[str] | None = None) -> None:
    """Draw the studies, score both choices per number of curve seeds, print (or write) the
    tables."""
    parser = argparse.ArgumentParser(prog="python -m ablate.bench.optimum_bound")
    parser.add_argument("--fitted", type=Path, default=fit.FITTED, help="its runtime.simulate")
    parser.add_argument("--protocol", type=Path, default=held.PROTOCOL, help="its curve:")
    parser.add_argument("--studies", type=int, default=8, help="simulated studies")
    parser.add_argument("--draws", type=int, default=100, help="seed subsets per study")
    parser.add_argument("--seeds", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--out", type=Path, default=None, help="a markdown file for the tables")
    args = parser.parse_args(argv)
    if max(args.seeds) > SEEDS_PER_STUDY or min(args.seeds) < 1:
        parser.error(f"--seeds: each between 1 and {SEEDS_PER_STUDY}")
    section = yaml.safe_load(args.fitted.read_text(encoding="utf-8"))
    design = load_experiment(args.protocol)
    base = load_experiment(held.REFERENCE_DESIGN).base
    lattice = [float(lr) for lr in next(iter(ref.load_reference().values())).lrs]
    variants = list(design.variants)
    truth = held.simulated_truth(section, base, lattice, variants, ref.BAND)
    studies = [
        fit.simulated_curves(base, section, lattice, range(SEEDS_PER_STUDY), variants, 1000 + k)
        for k in range(args.studies)
    ]
    near, scored = markdown(
        truth_rows(section, lattice, truth.optima),
        bound_rows(studies, truth.optima, design, args.seeds, args.draws),
    )
    command = (
        f"python -m ablate.bench.optimum_bound --studies {args.studies} --draws {args.draws} "
        f"--seeds {' '.join(map(str, args.seeds))}"
    )
    text = (
        f"# Locating the fitted simulator's optimum: a plain argmin and the curve stage\n\n"
        f"`{command}`\n\n"
        f"## The truth around each optimum\n\n{near}\n\n"
        f"## Within 2^(1/4) of the truth, by curve seeds\n\n"
        f"Curve seeds drawn from studies of {SEEDS_PER_STUDY} seeds. The bar the estimators "
        f"are held to: within 2^(1/4) in at least {BAR:.0%} of draws.\n\n{scored}\n"
    )
    print(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
