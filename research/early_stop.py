"""The curve's early stop (:mod:`ablate.core.early_stop`) replayed on real runs: how often it
stops a point that would have ended the best or within ``min_effect`` of it (a miss), and how
often the best point at the stop step is not the best at the end (a ranking flip, which the
rule must survive: it stops on a gap, never on a rank), and what a second hold after it would
stop and spare (successive halving's second rung, :func:`second_hold`).

The curves are real runs whose every evaluation is committed: each report's ``curve_evals.csv``
with its ``runs.csv`` (the curve stage's 2^(1/2) lattice on 2–4 curve seeds; the default
experiment's as trained before its early stop, ``ln_vs_rms_retrained``, whose curve runs are
the earlier ``ln_vs_rms``'s to the bit; the LLaMA-style one's from
``reports/earlier_protocol``), and, where it is committed, the part of the dense reference
retrained with its evaluations (``reports/reference_curves``: both norms, seeds 0–3,
every 2^(1/4) of the basin), read as its full 2^(1/4) lattice and as each of its two 2^(1/2)
lattices, and the same slice at warmup 64 (``reports/warmup64/curves``, and on seeds 13–16
``reports/warmup64/curves_seeds_13_16``); the table is given per warmup the curves trained
at. A curve whose points the early stop stopped is left out.
A draw is one variant's curve on a subset of its seeds (every subset of two seeds or more): the
rule sees the values at the step, the verdict the final values (an unstable run counted as
min(ℓ, ℓ0), a diverged one as ℓ0, as every stage selects). Subsets of one curve share runs,
so draws are not independent: the table gives the curves they come from.

Run::

    python -m research.early_stop [--steps 64 128] [--margins 0.1 0.15 0.2 0.3] \\
        [--write docs/early-stop.md]
    python -m research.early_stop --second-hold 64 0.2 128 [--margins 0.1 0.15 0.2] \\
        [--write docs/early-stop.md]  # successive halving's second rung after the first
    python -m research.early_stop --extract STORE_EXPERIMENT_DIR OUT_CSV  # a store's evals
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from ablate.core.early_stop import points_to_stop
from ablate.core.experiment import MIN_EFFECT
from ablate.core.stability import clipped_loss
from research import REPO
from research.estimators import command_line, write_block

CURVE_REPORTS = {  # the committed curves trained whole: their report folders
    "ln_vs_rms": "reports/ln_vs_rms_retrained",  # the default experiment before its early stop
    "llama_style": "reports/earlier_protocol/llama_style",  # before its early stop
    "bias": "reports/bias",
    "layernorm_scaling": "reports/literature/layernorm_scaling",
    "reference 0-3": "reports/reference_curves",
    "reference 0-3, warmup 64": "reports/warmup64/curves",  # the same slice at warmup 64
    "reference 13-16, warmup 64": "reports/warmup64/curves_seeds_13_16",  # and on 4 more seeds
}


@dataclass(frozen=True)
class Curve:
    """One variant's curve: ``at`` (lr x seed) values at each evaluation step, ``final`` (lr x
    seed) final values, and the warmup its runs trained at (None: not known)."""

    source: str
    variant: str
    at: dict[int, pd.DataFrame]
    final: pd.DataFrame
    warmup: int | None = None


def clipped(frame: pd.DataFrame, values: pd.Series) -> pd.Series:
    """Each run's value as every stage selects (:func:`ablate.core.stability.clipped_loss`),
    a run that diverged counted as ℓ0."""
    found = [
        clipped_loss(None if pd.isna(value) or status == "diverged" else float(value), start)
        for value, status, start in zip(values, frame["status"], frame["initial_loss"], strict=True)
    ]
    return pd.Series(found, index=frame.index)


def load_curves(source: str, folder: Path) -> list[Curve]:
    """Each variant's curve from ``folder``'s ``curve_evals.csv`` and ``runs.csv``; none
    where the early stop stopped a point (what it would have ended at is not known)."""
    evals = pd.read_csv(folder / "curve_evals.csv")
    runs = pd.read_csv(folder / "runs.csv").set_index("run_id")
    runs = runs.loc[runs.index.intersection(evals["run_id"].unique())]
    steps = evals.pivot_table(index="run_id", columns="step", values="val_loss")
    steps = steps.loc[:, steps.notna().mean() >= 0.5]  # the eval steps, not a divergence's last
    curves = []
    for variant, mine in runs.groupby("variant"):
        if (mine["status"] == "pruned").any():  # stopped early: its whole curve is unknown
            continue
        at = {}
        for step in steps.columns:
            values = clipped(mine, steps.reindex(mine.index)[step])
            at[int(step)] = values.groupby([mine["lr"], mine["seed"]]).mean().unstack()
        final = clipped(mine, mine["final_val_loss"])
        curves.append(
            Curve(
                source,
                str(variant),
                at,
                final.groupby([mine["lr"], mine["seed"]]).mean().unstack(),
                int(mine["warmup_steps"].iloc[0]),
            )
        )
    return curves


def lattices(curve: Curve) -> Iterator[Curve]:
    """The curve, and where its lattice has 2^(1/4) steps (the reference) each 2^(1/2) half of
    it: the points of even and of odd quarter-octave index (a coarse tail of 2^(1/2) steps
    falls into one of them)."""
    lrs = np.sort(curve.final.index.to_numpy())
    quarters = np.round(np.log2(lrs) * 4).astype(int)
    yield curve
    if len(quarters) > 1 and (np.diff(quarters) == 1).any():
        for phase in (0, 1):
            keep = lrs[quarters % 2 == phase]
            at = {s: f.loc[keep] for s, f in curve.at.items()}
            yield Curve(
                f"{curve.source} (2^(1/2), {phase})",
                curve.variant,
                at,
                curve.final.loc[keep],
                curve.warmup,
            )


@dataclass(frozen=True)
class Draw:
    """One draw's replay: points, points stopped, whether one stopped was within ``min_effect``
    of the final best (a miss), the regret of the best point kept, whether the best at the step
    is not the best at the end (a flip), and the rank correlation of the two orders."""

    points: int
    stopped: int
    miss: bool
    regret: float
    flip: bool
    rho: float


def replay(curve: Curve, seeds: tuple[int, ...], step: int, margin: float) -> Draw:
    """The rule at ``step`` with ``margin`` on the curve's runs of ``seeds``."""
    at = curve.at[step][list(seeds)]
    final = curve.final[list(seeds)].mean(axis=1)
    stopped = stopped_at(at, margin)
    mean_at = at.mean(axis=1)
    rho = float(spearmanr(mean_at.to_numpy(), final.loc[mean_at.index].to_numpy()).statistic)
    return Draw(
        len(final),
        len(stopped),
        *miss_and_regret(final, stopped),
        bool(mean_at.idxmin() != final.idxmin()),
        rho,
    )


def miss_and_regret(final: pd.Series, stopped: set[float]) -> tuple[bool, float]:
    """Whether a point ``stopped`` ended within ``min_effect`` of the best of ``final`` (the
    seed-mean final values by LR), and how far the best point kept ended above the best."""
    near = set(final[final <= final.min() + MIN_EFFECT].index)
    return bool(stopped & near), float(final.drop(list(stopped)).min() - final.min())


def stopped_at(at: pd.DataFrame, margin: float) -> set[float]:
    """The LRs the rule stops among ``at``'s points (lr x seed values at its step)."""
    return {p.lr for p in points_to_stop({lr: r.to_dict() for lr, r in at.iterrows()}, margin)}


def replay_twice(
    curve: Curve, seeds: tuple[int, ...], first: tuple[int, float], step: int, margin: float
) -> Draw:
    """The rule held twice, successive halving's second rung: at ``first`` (step, margin), then
    at ``step`` with ``margin`` on the points the first kept. ``stopped`` counts the second's
    alone; a miss is a point either stopped within ``min_effect`` of the final best."""
    early = stopped_at(curve.at[first[0]][list(seeds)], first[1])
    later = stopped_at(curve.at[step][list(seeds)].drop(list(early)), margin)
    final = curve.final[list(seeds)].mean(axis=1)
    return Draw(len(final), len(later), *miss_and_regret(final, early | later), False, math.nan)


def second_hold(
    curves: list[Curve], first: tuple[int, float], step: int, margins: list[float]
) -> pd.DataFrame:
    """Per warmup and margin of a second hold at ``step`` after ``first`` (step, margin), on
    every curve's subsets of two seeds or more: the miss rate of both holds together, the
    share of points the second stops beyond the first, the worst regret, and the share of a
    curve's run-steps the second spares beyond the first (a point it stops trains ``step`` of
    ``total``, not the whole)."""
    total = max(max(c.at) for c in curves)
    rows = []
    for curve, margin in itertools.product(curves, margins):
        if step not in curve.at or first[0] not in curve.at:
            continue
        seeds = list(curve.final.columns)
        for k in range(2, len(seeds) + 1):
            for subset in itertools.combinations(seeds, k):
                found = replay_twice(curve, subset, first, step, margin)
                rows.append({"warmup": curve.warmup, "margin": margin, **found.__dict__})
    found = pd.DataFrame(rows).groupby(["warmup", "margin"])
    stopped = found["stopped"].sum() / found["points"].sum()
    return pd.DataFrame(
        {
            "draws": found.size(),
            "miss_rate": found["miss"].mean(),
            "points_stopped": stopped,
            "worst_regret": found["regret"].max(),
            "run_steps_spared": stopped * (1 - step / total),
        }
    ).reset_index()


def draws(curves: list[Curve], step: int, margin: float) -> pd.DataFrame:
    """Every curve on every subset of two seeds or more, replayed."""
    rows = []
    for curve in curves:
        if step not in curve.at:
            continue
        seeds = list(curve.final.columns)
        for k in range(2, len(seeds) + 1):
            for subset in itertools.combinations(seeds, k):
                found = replay(curve, subset, step, margin)
                rows.append(
                    {"source": curve.source, "variant": curve.variant, "seeds": k, **found.__dict__}
                )
    return pd.DataFrame(rows)


def table(curves: list[Curve], steps: list[int], margins: list[float]) -> pd.DataFrame:
    """Per warmup the curves trained at, step and margin: draws, curves, miss rate, share of
    points stopped, worst regret, and the share of run-steps a curve spares (a stopped run
    trains ``step`` of ``total``)."""
    total = max(max(c.at) for c in curves)
    warmups = sorted({c.warmup for c in curves}, key=lambda w: (w is None, w or 0))
    rows = []
    for warmup, step, margin in itertools.product(warmups, steps, margins):
        found = draws([c for c in curves if c.warmup == warmup], step, margin)
        stopped = found["stopped"].sum() / found["points"].sum()
        rows.append(
            {
                "warmup": warmup,
                "step": step,
                "margin": margin,
                "draws": len(found),
                "curves": found.groupby(["source", "variant"]).ngroups,
                "miss_rate": found["miss"].mean(),
                "points_stopped": stopped,
                "worst_regret": found["regret"].max(),
                "run_steps_spared": stopped * (1 - step / total),
            }
        )
    return pd.DataFrame(rows)


def flips(curves: list[Curve], step: int) -> pd.DataFrame:
    """Each curve on all its seeds: does the best point at ``step`` end the best, and the
    Spearman correlation of the two orders."""
    rows = []
    for curve in curves:
        found = replay(curve, tuple(curve.final.columns), step, math.inf)
        rows.append(
            {"source": curve.source, "variant": curve.variant, "flip": found.flip, "rho": found.rho}
        )
    return pd.DataFrame(rows)


def every_curve() -> list[Curve]:
    """Every committed curve, and each 2^(1/2) half of the reference's."""
    found = []
    for source, folder in CURVE_REPORTS.items():
        if (REPO / folder / "curve_evals.csv").exists():
            for curve in load_curves(source, REPO / folder):
                found.extend(lattices(curve))
    return found


def extract(experiment_dir: Path, out: Path) -> None:
    """Every evaluation of a store's sweep and curve runs, as ``curve_evals.csv`` holds them."""
    from ablate.core import store
    from ablate.core.folders import ExperimentFolder
    from ablate.report.load import evaluations

    folder = ExperimentFolder.of(experiment_dir.parent, experiment_dir.name)
    runs = store.load_summaries(folder)
    evaluations(folder, runs[runs["group"].isin(["sweep", "curve"])]).to_csv(out, index=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--margins", type=float, nargs="+", default=[0.1, 0.15, 0.2, 0.3])
    parser.add_argument("--write", type=Path, help="a doc whose early-stop-replay block to rewrite")
    parser.add_argument("--extract", type=Path, nargs=2, metavar=("EXPERIMENT_DIR", "OUT_CSV"))
    parser.add_argument(
        "--second-hold",
        type=float,
        nargs=3,
        metavar=("FIRST_STEP", "FIRST_MARGIN", "STEP"),
        help="replay a second hold at STEP after the first, with each of --margins",
    )
    args = parser.parse_args()
    if args.extract:
        extract(*args.extract)
        return
    curves = every_curve()
    if args.second_hold:
        first_step, first_margin, step = args.second_hold
        found = second_hold(curves, (int(first_step), first_margin), int(step), args.margins)
        text = found.to_markdown(index=False, floatfmt=".3g")
        if args.write:
            command = command_line("research.early_stop", None)
            write_block(args.write, "early-stop-second-hold", text, command)
        print(text)
        return
    text = "\n\n".join(
        [
            table(curves, args.steps, args.margins).to_markdown(index=False, floatfmt=".3g"),
            flips(curves, min(args.steps)).to_markdown(index=False, floatfmt=".3g"),
        ]
    )
    if args.write:
        command = "python -m research.early_stop --write " + args.write.as_posix()
        write_block(args.write, "early-stop-replay", text, command)
    print(text)


if __name__ == "__main__":
    main()
