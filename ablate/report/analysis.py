"""Statistics over stored runs: per-variant summaries, paired differences, the LR sweep.

Everything takes the frame :func:`ablate.core.store.load_summaries` returns (one row per run). Loss
statistics use runs that finished; diverged runs are counted, not averaged in, since their
final loss measures the blow-up, not the norm. Paired differences match a variant's seed with
the baseline's same seed, and use scipy's paired t-test (``scipy.stats.ttest_rel``) and its 95%
confidence interval. The *noise floor* is the seed-to-seed standard deviation of the final val
loss pooled over variants (the root mean of the per-variant variances): a difference between
variants smaller than it is not distinguishable from a change of seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from ablate.core.manifest import PlannedRun
from ablate.core.stability import (
    Observation,
    below_window,
    clipped_loss,
    lr_sensitivity,
    not_learned_yet,
)

CONFIDENCE = 0.95


@dataclass(frozen=True)
class PairedDifference:
    """Mean of (variant - baseline) over matched seeds, its 95% interval and the test's p-value."""

    n_pairs: int
    mean: float
    ci_low: float
    ci_high: float
    p_value: float


DIFF_COLUMNS = ("diff_vs_baseline", "diff_ci_low", "diff_ci_high", "paired_t_p", "n_pairs")


def difference_columns(
    diff: PairedDifference | None, names: tuple[str, str, str, str, str] = DIFF_COLUMNS
) -> dict[str, float | int]:
    """``diff`` as table columns (mean, interval, p, pairs) under ``names``; NaN/0 for None."""
    if diff is None:
        return dict(zip(names, (float("nan"),) * 4 + (0,), strict=True))
    values = (diff.mean, diff.ci_low, diff.ci_high, diff.p_value, diff.n_pairs)
    return dict(zip(names, values, strict=True))


def matched_differences(
    runs: pd.DataFrame, variant: str, baseline: str, metric: str = "final_val_loss"
) -> pd.Series:
    """``metric`` of ``variant`` − ``baseline`` over the seeds both finished, by seed."""
    finished = runs[runs["status"] == "finished"]
    a = finished[finished["variant"] == variant].set_index("seed")[metric]
    b = finished[finished["variant"] == baseline].set_index("seed")[metric]
    seeds = a.index.intersection(b.index)
    return a[seeds] - b[seeds]


def paired_difference(
    runs: pd.DataFrame, variant: str, baseline: str, metric: str = "final_val_loss"
) -> PairedDifference:
    """Paired t-test of ``metric`` between two variants' finished runs that share a seed."""
    return mean_difference(matched_differences(runs, variant, baseline, metric))


def mean_difference(diff: pd.Series) -> PairedDifference:
    """Mean of matched differences (one per seed), its 95% t interval and the p-value of
    H0: mean 0 (``ttest_1samp`` on the differences, the same test as ``ttest_rel``)."""
    values = diff.dropna().astype(float).to_numpy()
    n = len(values)
    if n < 2:
        mean = float(values.mean()) if n else float("nan")
        return PairedDifference(n, mean, float("nan"), float("nan"), float("nan"))
    if np.allclose(values, values[0]):  # zero variance: the t-test is undefined
        value = float(values[0])
        return PairedDifference(n, value, value, value, float("nan"))
    result = stats.ttest_1samp(values, 0.0)
    interval = result.confidence_interval(CONFIDENCE)
    return PairedDifference(
        n, float(values.mean()), float(interval.low), float(interval.high), float(result.pvalue)
    )


def t_interval(values: np.ndarray, level: float) -> tuple[float, float]:
    """The t interval of the mean of ``values`` at ``level`` (NaN under 2 values)."""
    values = values[np.isfinite(values)]
    if len(values) < 2:
        return float("nan"), float("nan")
    interval = stats.ttest_1samp(values, 0.0).confidence_interval(level)
    return float(interval.low), float(interval.high)


def holm(p_values: list[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the given order (NaN stays NaN): the i-th
    smallest of m is multiplied by m − i + 1, made monotone and capped at 1. Rejecting where
    the adjusted p < α keeps the family-wise error rate of all m comparisons at α."""
    p = np.asarray(p_values, dtype=float)
    adjusted = np.full(len(p), np.nan)
    known = ~np.isnan(p)
    adjusted[known] = holm_rows(p[known])
    return [float(x) for x in adjusted]


def holm_rows(p: np.ndarray) -> np.ndarray:
    """:func:`holm` along the last axis of an array of p-values without NaN (one family per
    row: the sequential design's replications)."""
    m = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1) * np.arange(m, 0, -1)
    ranked = np.minimum(1.0, np.maximum.accumulate(ranked, axis=-1))
    adjusted = np.empty_like(ranked)
    np.put_along_axis(adjusted, order, ranked, axis=-1)
    return adjusted


def selection_values(runs: pd.DataFrame) -> list[float]:
    """Each run's final val loss as every stage selects on it: min(ℓ, ℓ0), a missing loss
    counted as ℓ0 (:func:`ablate.core.stability.clipped_loss`)."""
    return [
        clipped_loss(None if pd.isna(loss) else float(loss), first)
        for loss, first in zip(runs["final_val_loss"], runs["initial_loss"], strict=True)
    ]


def column(frame: pd.DataFrame, name: str) -> pd.Series:
    """``frame[name]`` as floats; all NaN when the column is missing (runs stored by older
    versions lack the newer summary keys)."""
    if name not in frame:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[name], errors="coerce").astype(float)


def scored_split(runs: pd.DataFrame) -> str:
    """The split comparisons are scored on: ``test`` where every finished run has a final
    test loss (``data.test_fraction``: a split no selection saw), else ``val``."""
    finished = runs[runs["status"] == "finished"]
    test = column(finished, "final_test_loss")
    return "test" if len(finished) and test.notna().all() else "val"


def variant_row(
    runs: pd.DataFrame, variant: str, baseline: str, split: str = "val"
) -> dict[str, object]:
    """Runs, outcomes, loss and speed over seeds, and the paired difference to ``baseline``
    in the final loss on ``split`` (:func:`scored_split`).

    Loss and speed use finished runs; ``nonfinite_values`` sums the non-finite activations and
    gradients the probes counted in every run of the variant, diverged ones included.
    """
    mine = runs[runs["variant"] == variant]
    finished = mine[mine["status"] == "finished"]
    val, best = column(finished, "final_val_loss"), column(finished, "best_val_loss")
    tokens_per_s = column(finished, "tokens_per_s")
    row: dict[str, object] = {
        "variant": variant,
        "runs": len(mine),
        "finished": len(finished),
        "diverged": int((mine["status"] == "diverged").sum()),
        "collapsed": int((column(finished, "stable") == 0).sum()),  # finished, not learned
        "not_learned_yet": sum(map(not_learned_yet, finished.get("unstable_reason", []))),
        "final_val_loss_mean": val.mean(),
        "final_val_loss_std": val.std(ddof=1),
        "best_val_loss_mean": best.mean(),
        "best_val_loss_std": best.std(ddof=1),
        "scored_on": split,
        "final_test_loss_mean": column(finished, "final_test_loss").mean(),
        "final_test_loss_std": column(finished, "final_test_loss").std(ddof=1),
        **difference_columns(None),
        "n_params": int(mine["n_params"].iloc[0]) if len(mine) else None,
        "tokens_per_s_mean": tokens_per_s.mean(),
        "tokens_per_s_std": tokens_per_s.std(ddof=1),
        "step_time_ms_mean": 1000 * column(finished, "step_time_median_s").mean(),
        "peak_memory_mb_mean": column(finished, "peak_memory_mb").mean(),
        "nonfinite_values": int(
            column(mine, "nonfinite_activations").fillna(0).sum()
            + column(mine, "nonfinite_grads").fillna(0).sum()
        ),
    }
    if variant != baseline:
        metric = f"final_{split}_loss"
        row.update(difference_columns(paired_difference(runs, variant, baseline, metric)))
    return row


def variant_table(
    runs: pd.DataFrame, variants: list[str], baseline: str, split: str = "val"
) -> pd.DataFrame:
    """One :func:`variant_row` per variant, in the experiment's order."""
    return pd.DataFrame([variant_row(runs, v, baseline, split) for v in variants])


def noise_floor(runs: pd.DataFrame, metric: str = "final_val_loss") -> float:
    """Seed-to-seed std of ``metric`` over finished runs, pooled over variants (NaN if no
    variant has two finished seeds)."""
    finished = runs[runs["status"] == "finished"]
    grouped = column(finished, metric).groupby(finished["variant"])
    variances = grouped.var(ddof=1).dropna()
    return float(np.sqrt(variances.mean())) if len(variances) else float("nan")


def curve_band(metrics: pd.DataFrame, value: str, by: str = "step") -> pd.DataFrame:
    """Per variant and ``by`` (step): mean, std and count of ``value`` over seeds (none when no
    run recorded it: every run failed)."""
    if value not in metrics:
        return pd.DataFrame(columns=["variant", by, "mean", "std", "count"])
    present = metrics.dropna(subset=[value])
    grouped = present.groupby(["variant", by])[value]
    return grouped.agg(["mean", "std", "count"]).reset_index()


def curve_difference(
    metrics: pd.DataFrame, variants: list[str], baseline: str, value: str = "val_loss"
) -> pd.DataFrame:
    """Per non-baseline variant and step: mean of (variant − baseline) ``value`` over matched
    seeds with its 95% t interval (:func:`mean_difference`), where both evaluated the step.
    Columns: variant, step, mean, ci_low, ci_high, n_pairs (no rows when no run recorded
    ``value``)."""
    if value not in metrics:
        return pd.DataFrame(columns=["variant", "step", "mean", "ci_low", "ci_high", "n_pairs"])
    present = metrics.dropna(subset=[value])
    wide = present.pivot_table(index=["seed", "step"], columns="variant", values=value)
    rows = []
    for variant in variants:
        if variant == baseline or variant not in wide or baseline not in wide:
            continue
        diff = (wide[variant] - wide[baseline]).dropna()
        for step, per_seed in diff.groupby(level="step"):
            d = mean_difference(per_seed)
            rows.append(
                {
                    "variant": variant,
                    "step": int(step),
                    "mean": d.mean,
                    "ci_low": d.ci_low,
                    "ci_high": d.ci_high,
                    "n_pairs": d.n_pairs,
                }
            )
    return pd.DataFrame(rows, columns=["variant", "step", "mean", "ci_low", "ci_high", "n_pairs"])


def probe_band(probes: pd.DataFrame, quantity: str) -> pd.DataFrame:
    """Per variant, site, layer and step: mean and count over seeds of one probe quantity."""
    mine = probes[probes["quantity"] == quantity]
    grouped = mine.groupby(["variant", "site", "layer", "step"])["value"]
    return grouped.agg(["mean", "count"]).reset_index()


def sweep_frame(
    planned: list[PlannedRun], runs: pd.DataFrame, group: str = "sweep"
) -> pd.DataFrame:
    """One row per stored run of ``group`` (the sweep's, or the curve's) but the points the
    curve's early stop stopped (any of their runs pruned: a run another stage trained whole
    later stays out with them): variant, seed, lr, status, stable, final and clipped loss.

    The clipped loss is min(final val loss, ℓ0) as Wortsman et al. (2023) define it: a run that
    diverged (stopped by the divergence rule) or has no finite loss counts as ℓ0; a run judged
    unstable for its final quality alone (collapsed) counts at its own loss, capped at ℓ0.
    """
    by_id = runs.set_index("run_id") if len(runs) else None
    mine = [
        e for e in planned if e.group == group and by_id is not None and e.run_id in by_id.index
    ]
    stopped = {(e.variant, e.lr) for e in mine if by_id.loc[e.run_id, "status"] == "pruned"}
    rows = []
    for entry in (e for e in mine if (e.variant, e.lr) not in stopped):
        summary = by_id.loc[entry.run_id]
        initial = float(summary["initial_loss"])
        stable = bool(summary["stable"]) if pd.notna(summary["stable"]) else False
        loss = summary["final_val_loss"]
        rows.append(
            {
                "variant": entry.variant,
                "seed": entry.seed,
                "lr": entry.lr,
                "run_id": entry.run_id,
                "status": summary["status"],
                "stable": stable,
                "final_val_loss": loss,
                "initial_loss": initial,
                "clipped_loss": clipped_loss(
                    None if pd.isna(loss) or summary["status"] == "diverged" else float(loss),
                    initial,
                ),
            }
        )
    columns = [
        "variant",
        "seed",
        "lr",
        "run_id",
        "status",
        "stable",
        "final_val_loss",
        "initial_loss",
        "clipped_loss",
    ]
    return pd.DataFrame(rows, columns=columns)


def sweep_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per variant and LR: mean clipped final loss over seeds, seeds run, seeds unstable, and
    of those the seeds that did not learn yet (below their stable window:
    :func:`ablate.core.stability.below_window`)."""
    unlearned = set()
    for _, mine in frame.groupby("variant"):
        seen = [
            Observation(
                r.run_id, float(r.lr), bool(r.stable), "sweep", int(r.seed), r.status == "diverged"
            )
            for r in mine.itertuples()
        ]
        unlearned |= {o.run_id for o in below_window(seen)}
    marked = frame.assign(unlearned=frame["run_id"].isin(unlearned))
    grouped = marked.groupby(["variant", "lr"])
    return grouped.agg(
        loss_mean=("clipped_loss", "mean"),
        seeds=("seed", "count"),
        unstable=("stable", lambda s: int((~s.astype(bool)).sum())),
        unlearned=("unlearned", "sum"),
    ).reset_index()


def sensitivity_table(table: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """Per variant: Wortsman et al.'s LR sensitivity, the mean over the sweep's LRs of
    min(ℓ(η), ℓ0) − ℓ* with ℓ* the sweep's best (:func:`lr_sensitivity` on the seed means of
    :func:`sweep_frame`'s clipped losses); the best LR and its loss; ``best_inside``: whether
    that LR is an interior point of the grid (at an edge ℓ* is not an optimum, and the
    sensitivity is flagged)."""
    rows = []
    for variant, mine in table.groupby("variant", sort=False):
        initial = float(frame.loc[frame["variant"] == variant, "initial_loss"].iloc[0])
        best = mine.loc[mine["loss_mean"].idxmin()]
        rows.append(
            {
                "variant": variant,
                "lr_sensitivity": lr_sensitivity(list(mine["loss_mean"]), initial),
                "best_lr": float(best["lr"]),
                "best_loss": float(best["loss_mean"]),
                "best_inside": bool(mine["lr"].min() < best["lr"] < mine["lr"].max()),
                "grid_points": len(mine),
                "unstable_points": int((mine["unstable"] > 0).sum()),
            }
        )
    return pd.DataFrame(rows)


def seed_sensitivities(frame: pd.DataFrame) -> pd.DataFrame:
    """Per variant and seed of a :func:`sweep_frame`: Wortsman et al.'s LR sensitivity over
    the seed's own grid, against its own best (:func:`lr_sensitivity`; a diverged point counts
    as ℓ0)."""
    rows = [
        {
            "variant": variant,
            "seed": int(seed),
            "lr_sensitivity": lr_sensitivity(
                list(mine["clipped_loss"]), float(mine["initial_loss"].iloc[0])
            ),
        }
        for (variant, seed), mine in frame.groupby(["variant", "seed"])
    ]
    return pd.DataFrame(rows, columns=["variant", "seed", "lr_sensitivity"])


def block_rows(probes: pd.DataFrame) -> pd.DataFrame:
    """The probe rows recorded at whole blocks (``blocks.2``, litgpt's ``transformer.h.2``):
    the sites where the residual stream is measured."""
    sites = set(probes.loc[probes["quantity"] == "resid_rms", "site"])
    return probes[probes["site"].isin(sites)]


def last_probe_step(probes: pd.DataFrame) -> pd.DataFrame:
    """Each run's probe rows at its last probe step."""
    return probes[probes["step"] == probes.groupby("run_id")["step"].transform("max")]


def per_run(frame: pd.DataFrame, quantity: str, how: str) -> pd.Series:
    """``quantity``'s values of each run in probe rows, aggregated by ``how`` (max, ...)."""
    return frame[frame["quantity"] == quantity].groupby("run_id")["value"].agg(how)


def last_probes(probes: pd.DataFrame) -> pd.DataFrame:
    """Per run: the probes at its last probe step, one column per headline quantity."""
    if probes.empty:
        return pd.DataFrame()
    last = last_probe_step(probes)
    blocks = block_rows(last)
    top = blocks[blocks["layer"] == blocks.groupby("run_id")["layer"].transform("max")]
    frame = pd.DataFrame(
        {
            "resid_rms_last_block": per_run(top, "resid_rms", "max"),
            "grad_norm_max_block": per_run(blocks, "grad_norm", "max"),
            "attn_logit_max": per_run(last, "attn_logit_max", "max"),
            "logit_max_abs": per_run(last, "logit_max_abs", "max"),
        }
    )
    keys = last.groupby("run_id")[["variant", "seed", "step"]].first()
    return keys.join(frame).reset_index()


LARGE = 1e300  # stands in for a diverged run's +inf in a rank test: worse than any value


def signed_rank(diffs: np.ndarray, level: float = CONFIDENCE) -> PairedDifference:
    """Paired differences that may hold ±inf (a run that diverged: the worst outcome), by
    ranks: the Hodges–Lehmann estimate (the median of the Walsh averages), its interval from
    the exact signed-rank distribution (the order statistics of the Walsh averages that the
    test's critical value picks), and the Wilcoxon signed-rank test's p (scipy; zero
    differences, both diverged or equal, dropped). An infinite end prints as such."""
    d = np.nan_to_num(np.asarray(diffs, dtype=float), nan=0.0, posinf=LARGE, neginf=-LARGE)
    n = len(d)
    if n < 2 or not np.any(d):
        return PairedDifference(n, float(np.median(d)) if n else np.nan, np.nan, np.nan, np.nan)
    pairs = np.add.outer(d, d)[np.triu_indices(n)] / 2
    walsh = np.sort(pairs)
    k = _signed_rank_critical(n, (1 - level) / 2)
    low, high = (walsh[k], walsh[len(walsh) - 1 - k]) if k >= 0 else (-np.inf, np.inf)
    p = float(stats.wilcoxon(d[d != 0], method="exact").pvalue) if np.count_nonzero(d) else 1.0

    def back(x: float) -> float:
        return float(np.sign(x) * np.inf) if abs(x) >= LARGE / 4 else float(x)

    return PairedDifference(n, back(float(np.median(walsh))), back(low), back(high), p)


def _signed_rank_critical(n: int, tail: float) -> int:
    """The largest k with P(W+ ≤ k) ≤ ``tail`` under the null (W+ the signed-rank sum of n
    untied pairs, its exact distribution by counting subsets of the ranks), −1 where none is;
    the interval's ends are then the Walsh averages ranked k + 1 and N − k (0-based: k and
    N − 1 − k), at least the level's coverage."""
    total = n * (n + 1) // 2
    counts = np.zeros(total + 1)
    counts[0] = 1
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    cdf = np.cumsum(counts) / 2.0**n
    below = np.flatnonzero(cdf <= tail)
    return int(below[-1]) if len(below) else -1
