"""Statistics over stored runs: per-variant summaries and paired differences over matched seeds.

Everything takes the frame :func:`ablate.store.load_summaries` returns (one row per run). Loss
statistics use runs that finished; diverged runs are counted, not averaged in, since their
final loss measures the blow-up, not the norm. Paired differences match a variant's seed with
the baseline's same seed, and use scipy's paired t-test (``scipy.stats.ttest_rel``) and its 95%
confidence interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

CONFIDENCE = 0.95


@dataclass(frozen=True)
class PairedDifference:
    """Mean of (variant - baseline) over matched seeds, its 95% interval and the test's p-value."""

    n_pairs: int
    mean: float
    ci_low: float
    ci_high: float
    p_value: float


def paired_difference(
    runs: pd.DataFrame, variant: str, baseline: str, metric: str = "final_val_loss"
) -> PairedDifference:
    """Paired t-test of ``metric`` between two variants' finished runs that share a seed."""
    finished = runs[runs["status"] == "finished"]
    a = finished[finished["variant"] == variant].set_index("seed")[metric]
    b = finished[finished["variant"] == baseline].set_index("seed")[metric]
    seeds = a.index.intersection(b.index)
    diff = (a[seeds] - b[seeds]).astype(float)
    n = len(seeds)
    if n < 2:
        mean = float(diff.mean()) if n else float("nan")
        return PairedDifference(n, mean, float("nan"), float("nan"), float("nan"))
    if np.allclose(diff.to_numpy(), diff.iloc[0]):  # zero variance: the t-test is undefined
        value = float(diff.iloc[0])
        return PairedDifference(n, value, value, value, float("nan"))
    result = stats.ttest_rel(a[seeds].astype(float), b[seeds].astype(float))
    interval = result.confidence_interval(CONFIDENCE)
    return PairedDifference(
        n, float(diff.mean()), float(interval.low), float(interval.high), float(result.pvalue)
    )


def variant_row(runs: pd.DataFrame, variant: str, baseline: str) -> dict[str, object]:
    """Runs, outcomes, loss mean/std over seeds, and the paired difference against ``baseline``."""
    mine = runs[runs["variant"] == variant]
    finished = mine[mine["status"] == "finished"]
    val = finished["final_val_loss"].astype(float)
    row: dict[str, object] = {
        "variant": variant,
        "runs": len(mine),
        "finished": len(finished),
        "diverged": int((mine["status"] == "diverged").sum()),
        "final_val_loss_mean": val.mean(),
        "final_val_loss_std": val.std(ddof=1),
        "best_val_loss_mean": finished["best_val_loss"].astype(float).mean(),
        "diff_vs_baseline": float("nan"),
        "diff_ci_low": float("nan"),
        "diff_ci_high": float("nan"),
        "paired_t_p": float("nan"),
        "n_pairs": 0,
        "n_params": int(mine["n_params"].iloc[0]) if len(mine) else None,
        "tokens_per_s_mean": finished["tokens_per_s"].astype(float).mean(),
    }
    if variant != baseline:
        diff = paired_difference(runs, variant, baseline)
        row.update(
            diff_vs_baseline=diff.mean,
            diff_ci_low=diff.ci_low,
            diff_ci_high=diff.ci_high,
            paired_t_p=diff.p_value,
            n_pairs=diff.n_pairs,
        )
    return row


def variant_table(runs: pd.DataFrame, variants: list[str], baseline: str) -> pd.DataFrame:
    """One :func:`variant_row` per variant, in the experiment's order."""
    return pd.DataFrame([variant_row(runs, v, baseline) for v in variants])


def curve_band(metrics: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per variant and step: mean, std and count of ``column`` over seeds (rows with a value)."""
    present = metrics.dropna(subset=[column])
    grouped = present.groupby(["variant", "step"])[column]
    return grouped.agg(["mean", "std", "count"]).reset_index()
