"""The report's LR optima from the sweep: each variant's optimum from its own loss curves with an
interval, whether two variants' optima differ, and Δ along the whole curve
(:mod:`ablate.core.optimum`, held to real runs by ``python -m research.held_to_runs``).

A seed's curve is its stable sweep runs' final val losses (an unstable run is not a point of
the valley). The sweep runs on the experiment's seeds, so the optimum here describes the
curves the comparison was run on; it is not selected on other seeds.
"""

from __future__ import annotations

import pandas as pd

from ablate.core.optimum import RESAMPLES, Curve, Optimum, optimum_ratio, variant_optimum
from ablate.report.analysis import mean_difference
from ablate.report.section import Section
from ablate.report.text import ratio_text, signed


def sweep_curves(frame: pd.DataFrame, variant: str) -> dict[int, Curve]:
    """``{seed: [(lr, final val loss)]}`` of the variant's stable runs in ``frame``."""
    mine = frame[(frame["variant"] == variant) & frame["stable"]]
    return {
        int(seed): [(float(r.lr), float(r.final_val_loss)) for r in rows.itertuples()]
        for seed, rows in mine.groupby("seed")
    }


def _interval_text(found: Optimum | None) -> str:
    if found is None:
        return "–"
    if found.seeds < 2:
        return f"{found.value:.3g} (1 seed: no interval)"
    return f"{found.value:.3g} [{found.low:.3g}, {found.high:.3g}]"


def optimum_table(frame: pd.DataFrame, variants: list[str]) -> pd.DataFrame:
    """Per variant: its optimum with the bootstrap interval over seeds, whether it is inside
    the grid, and its ratio to the baseline's, the same seeds drawn for both."""
    baseline = sweep_curves(frame, variants[0])
    rows = []
    for variant in variants:
        curves = sweep_curves(frame, variant)
        own = variant_optimum(curves)
        ratio = optimum_ratio(baseline, curves) if variant != variants[0] else None
        rows.append(
            {
                "variant": variant,
                "optimum_lr": own and own.value,
                "optimum_low": own and own.low,
                "optimum_high": own and own.high,
                "inside": own.inside if own else None,
                "seeds": own.seeds if own else 0,
                "ratio_to_baseline": ratio and ratio.value,
                "ratio_low": ratio and ratio.low,
                "ratio_high": ratio and ratio.high,
                "ratio_shown": ratio.shown if ratio and ratio.seeds > 1 else None,
                "ratio_resolved": ratio.resolved if ratio else None,
            }
        )
    return pd.DataFrame(rows)


def curve_differences(frame: pd.DataFrame, variants: list[str]) -> pd.DataFrame:
    """Δ (variant − baseline) at every sweep LR where both ran stably on a seed, over those
    seeds, with its 95% t interval: the comparison along the whole curve, not at one argmin (an
    LR with no such seed has no row)."""
    rows = []
    base = frame[(frame["variant"] == variants[0]) & frame["stable"]]
    for variant in variants[1:]:
        mine = frame[(frame["variant"] == variant) & frame["stable"]]
        for lr, here in mine.groupby("lr"):
            a = here.set_index("seed")["final_val_loss"]
            b = base[base["lr"] == lr].set_index("seed")["final_val_loss"]
            seeds = a.index.intersection(b.index)
            if seeds.empty:
                continue
            diff = mean_difference(a[seeds] - b[seeds])
            rows.append(
                {
                    "variant": variant,
                    "lr": float(lr),
                    "pairs": diff.n_pairs,
                    "diff": diff.mean,
                    "ci_low": diff.ci_low,
                    "ci_high": diff.ci_high,
                }
            )
    return pd.DataFrame(rows, columns=["variant", "lr", "pairs", "diff", "ci_low", "ci_high"])


def optimum_lines(table: pd.DataFrame, source: str = "sweep") -> list[str]:
    """Each variant's optimum in words, and whether it differs from the baseline's."""
    lines = []
    for row in table.itertuples():
        if row.optimum_lr is None or pd.isna(row.optimum_lr):
            continue
        where = (
            ""
            if row.inside
            else f" (**at the edge** of its stable {source} points: not an interior optimum)"
        )
        lines.append(
            f"- {row.variant}'s LR optimum ({source} runs): "
            f"{_interval_text(_row_optimum(row))}{where}."
        )
        if pd.notna(row.ratio_to_baseline) and row.ratio_shown is not None:
            note = ""
            if row.ratio_resolved is False and row.ratio_to_baseline == 1.0:
                note = (
                    "; every resample gave the same grid points, so a difference finer than the "
                    "grid's step is below its resolution (a finer `per_octave` resolves it)"
                )
            lines.append(
                f"  {row.variant} / {table['variant'].iloc[0]}: "
                f"{ratio_text(row.ratio_to_baseline, row.ratio_low, row.ratio_high)}, the same "
                f"seeds drawn for both (95%, descriptive{note})."
            )
    return lines


def _row_optimum(row: object) -> Optimum:
    return Optimum(row.optimum_lr, row.optimum_low, row.optimum_high, row.seeds, row.inside)


def optimum_section(frame: pd.DataFrame, variants: list[str], source: str = "sweep") -> Section:
    """Markdown and CSVs of the optima and of Δ along the curve (``source``: the sweep's runs,
    or the curve's)."""
    if frame.empty:
        return Section()
    table = optimum_table(frame, variants)
    diffs = curve_differences(frame, variants)
    shown = diffs.assign(
        lr=diffs["lr"].map(lambda v: f"{v:.3g}"),
        **{
            "Δ [95% CI]": [
                f"{signed(r.diff)} [{signed(r.ci_low)}, {signed(r.ci_high)}]"
                for r in diffs.itertuples()
            ]
        },
    )[["variant", "lr", "pairs", "Δ [95% CI]"]]
    lines = [
        "### LR optimum from each variant's curve, and Δ along it",
        "",
        f"A variant's optimum is the {source} LR of the lowest point of its seed-mean curve "
        f"of stable runs, bagged: that argmin's log2 LR averaged over {RESAMPLES} bootstrap "
        "resamples of the seeds, an LR between grid points where they disagree (the estimator "
        "held to the dense reference, docs/stability-and-search.md)"
        + ("; the tuned runs train at its nearest 2^(1/4)" if source == "curve" else "")
        + ". Its 95% interval is the resamples' percentile interval widened by half a grid "
        "step each side (a grid point stands for the optimum to within it), and its ratio to "
        "the baseline's draws the same seeds for both, widened by a step. Δ is the paired "
        "difference (variant − baseline) at every LR where both ran stably.",
        "",
        *optimum_lines(table, source),
        "",
        shown.to_markdown(index=False),
        "",
    ]
    return Section(lines, {f"{source}_optimum.csv": table, f"{source}_differences.csv": diffs})
