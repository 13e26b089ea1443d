"""What a committed report's runs say the simulator's truth should be: each run's own loss noise,
the LR valley's curvature and the seeds' boundary jitter, each with the interval its few
degrees of freedom allow, so that the estimator table (:mod:`research.estimators`) is scored
at noise levels the real runs show rather than at guesses:

    python -m research.calibration reports/ln_vs_rms

- **run noise** (nats): the sd of the paired differences between the two variants at the same
  seed and LR, over √2 (matched seeds share their init and batches, so what differs within a
  pair is each run's own noise plus the true Δ), pooled over the shared-LR A/B, the tuned A/B
  and the curve points at or below both variants' lowest point of that seed (the valley's
  floor and low wall, where Δ changes little with the LR);
- **curvature** (nats per squared decade of LR): each curve's rise from its lowest point to its
  lowest LR over the squared distance in log10 (the low wall: above the optimum real curves
  fall off a cliff, which a quadratic does not describe);
- **boundary jitter** (sd of ln LR): the sd over seeds of each variant's per-seed boundary
  estimate (``max_lr_seeds.csv``; the divergence brackets, ``max_lr_divergence_seeds.csv``,
  where the probes were held short and bracketed only them), pooled over variants; and the sd
  over seeds of the two variants' paired ln ratio over √2, each variant's own part of that
  jitter (the part a seed shares with every variant cancels in the ratio): below the first
  when a seed moves both edges together (the simulator's ``boundary_sd`` and
  ``seed_edge_sd``).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

PAIRED_GROUPS = ("main", "tuned")


@dataclass(frozen=True)
class Spread:
    """A pooled standard deviation, its degrees of freedom and its 95% chi-square interval."""

    sd: float
    df: int
    low: float
    high: float


def pooled(parts: list[tuple[float, int]]) -> Spread:
    """Pool (sd, df) parts: the df-weighted mean variance, with its chi-square interval."""
    df = sum(d for _, d in parts if d > 0)
    if df == 0:
        return Spread(math.nan, 0, math.nan, math.nan)
    var = sum(d * sd**2 for sd, d in parts if d > 0) / df
    low = math.sqrt(df * var / stats.chi2.ppf(0.975, df))
    high = math.sqrt(df * var / stats.chi2.ppf(0.025, df))
    return Spread(math.sqrt(var), df, low, high)


def paired_differences(runs: pd.DataFrame, index: list[str], first: str, second: str) -> pd.Series:
    """second − first final val loss, matched on ``index``, where both finished stably."""
    ok = runs[runs["stable"].fillna(False).astype(bool)]
    table = ok.pivot_table(index=index, columns="variant", values="final_val_loss")
    if first not in table or second not in table:
        return pd.Series(dtype=float)
    return (table[second] - table[first]).dropna()


def _low_wall(curve: pd.DataFrame, first: str, second: str) -> pd.Series:
    """The curve's paired differences at LRs at or below both variants' lowest point of the
    seed."""
    diffs = paired_differences(curve, ["seed", "lr"], first, second)
    kept = []
    for seed, group in curve[curve["stable"].fillna(False).astype(bool)].groupby("seed"):
        lowest = group.loc[group.groupby("variant")["final_val_loss"].idxmin(), "lr"].min()
        kept += [(seed, lr) for s, lr in diffs.index if s == seed and lr <= lowest]
    return diffs.loc[kept] if kept else pd.Series(dtype=float)


def run_noise(runs: pd.DataFrame, first: str, second: str) -> Spread:
    """Each run's own noise (nats) from the paired differences, pooled over the A/B groups and
    the curve's low wall (sd of the differences / √2)."""
    parts = []
    for group in PAIRED_GROUPS:
        diffs = paired_differences(runs[runs["group"] == group], ["seed"], first, second)
        parts.append((float(diffs.std(ddof=1)) / math.sqrt(2), len(diffs) - 1))
    wall = _low_wall(runs[runs["group"] == "curve"], first, second)
    parts.append((float(wall.std(ddof=1)) / math.sqrt(2), len(wall) - 1))
    return pooled([(sd, df) for sd, df in parts if df > 0])


def curvatures(runs: pd.DataFrame) -> list[float]:
    """Each (variant, seed) curve's low-wall curvature, nats per squared decade of LR."""
    found = []
    curve = runs[(runs["group"] == "curve") & runs["stable"].fillna(False).astype(bool)]
    for _, group in curve.groupby(["variant", "seed"]):
        best = group.loc[group["final_val_loss"].idxmin()]
        lowest = group.loc[group["lr"].idxmin()]
        if lowest["lr"] < best["lr"]:
            rise = lowest["final_val_loss"] - best["final_val_loss"]
            found.append(float(rise / math.log10(best["lr"] / lowest["lr"]) ** 2))
    return found


def boundary_jitter(seeds: pd.DataFrame) -> Spread:
    """The sd over seeds of ln(per-seed boundary), pooled over variants."""
    parts = [
        (float(np.log(group["estimate"]).std(ddof=1)), len(group) - 1)
        for _, group in seeds.dropna(subset=["estimate"]).groupby("variant")
    ]
    return pooled([(sd, df) for sd, df in parts if df > 0])


def ratio_jitter(seeds: pd.DataFrame, first: str, second: str) -> Spread:
    """The sd over seeds of ln(second's boundary / first's) over √2."""
    table = seeds.pivot_table(index="seed", columns="variant", values="estimate")
    if first not in table or second not in table:
        return Spread(math.nan, 0, math.nan, math.nan)
    logs = np.log(table[second] / table[first]).dropna()
    return pooled([(float(logs.std(ddof=1)) / math.sqrt(2), len(logs) - 1)])


# the per-seed brackets the max-LR stage probed: learned at all, else (probes held short)
# the divergence edge's
BRACKETS = ("max_lr_seeds.csv", "max_lr_divergence_seeds.csv")


def calibration_text(report: Path) -> str:
    """The three calibrations of a report folder, one line each."""
    runs = pd.read_csv(report / "runs.csv")
    first, second = list(dict.fromkeys(runs["variant"]))[:2]
    noise = run_noise(runs, first, second)
    walls = curvatures(runs)
    lines = [
        f"run noise: {noise.sd:.4f} nats [{noise.low:.4f}, {noise.high:.4f}] ({noise.df} df, "
        f"{second} − {first} pairs)",
        "curvature of the low wall: "
        + (
            f"median {np.median(walls):.2f}, range {min(walls):.2f}–{max(walls):.2f} nats per "
            f"squared decade ({len(walls)} curves)"
            if walls
            else "no curve"
        ),
    ]
    probed = [report / name for name in BRACKETS if (report / name).exists()]
    if probed:
        seeds = pd.read_csv(probed[0])
        jitter, paired = boundary_jitter(seeds), ratio_jitter(seeds, first, second)
        lines += [
            f"boundary jitter: {jitter.sd:.3f} in ln [{jitter.low:.3f}, {jitter.high:.3f}] "
            f"({jitter.df} df{'' if probed[0].name == BRACKETS[0] else ', divergence edges'})",
            f"paired ratio's jitter / √2: {paired.sd:.3f} in ln [{paired.low:.3f}, "
            f"{paired.high:.3f}] ({paired.df} df, {second} / {first})",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m research.calibration")
    parser.add_argument("report", type=Path, help="a report folder (its runs.csv)")
    args = parser.parse_args(argv)
    if not (args.report / "runs.csv").exists():
        parser.error(f"{args.report}: no runs.csv (a report folder is needed)")
    print(calibration_text(args.report))


if __name__ == "__main__":
    main()
