"""The residual stream over depth and gradient-norm spikes: what the claims about where the norm
goes are about (Peri-LN's variance growth and spikes, LayerNorm Scaling's "curse of depth",
Mix-LN's deep layers, outlier features).

- :func:`grad_spikes`: per run, the steps whose gradient norm (before clipping; every step's,
  from the metrics) exceeds ``factor`` times the median of the ``window`` steps before it
  (``analysis.spike_factor``, ``analysis.spike_window``).
- :func:`depth_profile`: per variant and block, the residual stream's RMS and feature kurtosis
  at each run's last probe step, mean and spread over seeds.
- :func:`depth_section`: their table, CSVs and figure. It appears where the runs recorded the
  kurtosis (runs of this version) or spikes are asked for, so the reports of older runs keep
  their bytes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ablate.report.analysis import block_rows, last_probe_step
from ablate.report.figures import Drawing, legend_outside, readable_log_ticks, variant_color
from ablate.report.section import Section
from ablate.report.text import sig

DEPTH_QUANTITIES = ("resid_rms", "resid_kurtosis")


def run_spikes(grad_norms: pd.Series, factor: float, window: int) -> tuple[int, int, float]:
    """Spikes in one run's gradient norms (in step order): how many steps exceed ``factor`` x
    the median of the ``window`` finite steps before them, how many steps had such a window,
    and the largest ratio seen (NaN when none had)."""
    norms = grad_norms[grad_norms.notna() & (grad_norms < float("inf"))].reset_index(drop=True)
    ratio = (norms / norms.rolling(window).median().shift(1)).dropna()
    largest = float(ratio.max()) if len(ratio) else float("nan")
    return int((ratio > factor).sum()), len(ratio), largest


def grad_spikes(metrics: pd.DataFrame, factor: float, window: int) -> pd.DataFrame:
    """Per run (run id, variant, seed): :func:`run_spikes` of its training steps (spikes NaN
    where no step had a full window before it)."""
    columns = ["run_id", "variant", "seed", "spikes", "steps_judged", "largest_ratio"]
    if metrics.empty or "grad_norm" not in metrics:
        return pd.DataFrame(columns=columns)
    rows = []
    for (run_id, variant, seed), run in metrics.groupby(["run_id", "variant", "seed"], sort=False):
        steps = run.dropna(subset=["train_loss"]).sort_values("step")
        rows.append((run_id, variant, seed, *run_spikes(steps["grad_norm"], factor, window)))
    frame = pd.DataFrame(rows, columns=columns)
    frame["spikes"] = frame["spikes"].where(frame["steps_judged"] > 0)  # none judged: unknown
    return frame


def depth_profile(probes: pd.DataFrame) -> pd.DataFrame:
    """Per variant and block: the residual stream's RMS and feature kurtosis at each run's last
    probe step, mean and min/max over seeds (``seeds``: how many)."""
    if probes.empty:
        return pd.DataFrame()
    last = last_probe_step(probes)
    rows = block_rows(last)
    rows = rows[rows["quantity"].isin(DEPTH_QUANTITIES)]
    if rows.empty:
        return pd.DataFrame()
    per_run = rows.pivot_table(
        index=["variant", "run_id", "layer"], columns="quantity", values="value"
    ).reset_index()
    stats = per_run.groupby(["variant", "layer"])[list(DEPTH_QUANTITIES)].agg(
        ["mean", "min", "max"]
    )
    stats.columns = [f"{q}_{how}" for q, how in stats.columns]
    stats["seeds"] = per_run.groupby(["variant", "layer"])["run_id"].nunique()
    return stats.reset_index()


def depth_markdown(profile: pd.DataFrame, spikes: pd.DataFrame | None, variants: list[str]) -> str:
    """One row per variant: the RMS growth from the first block to the last, the largest
    block's feature kurtosis, and the spikes per run."""
    rows = []
    for variant in variants:
        mine = profile[profile["variant"] == variant] if len(profile) else profile
        row: dict[str, str] = {"variant": variant}
        if len(mine):
            mine = mine.sort_values("layer")
            first, last = mine.iloc[0], mine.iloc[-1]
            row["residual RMS, first → last block"] = (
                f"{sig(first['resid_rms_mean'])} → {sig(last['resid_rms_mean'])} "
                f"(×{sig(last['resid_rms_mean'] / first['resid_rms_mean'])})"
            )
            peak = mine.loc[mine["resid_kurtosis_mean"].idxmax()]
            row["feature kurtosis, largest block"] = (
                f"{sig(peak['resid_kurtosis_mean'])} (block {int(peak['layer'])}; seeds "
                f"{sig(peak['resid_kurtosis_min'])}–{sig(peak['resid_kurtosis_max'])})"
            )
        if spikes is not None:
            counts = spikes.loc[spikes["variant"] == variant, "spikes"].dropna()
            row["grad-norm spikes per run"] = (
                f"{counts.mean():.1f} ({int(counts.min())}–{int(counts.max())}, {len(counts)} runs)"
                if len(counts)
                else "—"
            )
        rows.append(row)
    return pd.DataFrame(rows).fillna("—").to_markdown(index=False)


def depth_figure(profile: pd.DataFrame, variants: list[str]) -> Drawing | None:
    """Residual RMS and feature kurtosis against block, one line per variant (mean over seeds,
    the band their range)."""
    if profile.empty:
        return None

    def draw() -> Figure:
        fig = Figure(figsize=(11, 4.0))
        axes = fig.subplots(1, 2)
        titles = {"resid_rms": "residual stream RMS", "resid_kurtosis": "feature kurtosis"}
        units = {
            "resid_rms": "RMS (activation units)",
            "resid_kurtosis": "kurtosis (1: features alike)",
        }
        for ax, quantity in zip(axes, DEPTH_QUANTITIES, strict=True):
            for variant in variants:
                mine = profile[profile["variant"] == variant].sort_values("layer")
                if mine.empty:
                    continue
                line = ax.plot(
                    mine["layer"],
                    mine[f"{quantity}_mean"],
                    marker="o",
                    color=variant_color(variants.index(variant), len(variants)),
                    label=variant,
                )
                ax.fill_between(
                    mine["layer"],
                    mine[f"{quantity}_min"],
                    mine[f"{quantity}_max"],
                    color=line[0].get_color(),
                    alpha=0.15,
                )
            values = profile[[f"{quantity}_min", f"{quantity}_max"]].to_numpy(dtype=float)
            if np.nanmin(values) > 0 and np.nanmax(values) / np.nanmin(values) >= 10:
                ax.set_yscale("log")  # a range of a decade or more; else plain numbers
                readable_log_ticks(ax, "y")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # blocks are counted
            ax.set_title(f"{titles[quantity]} after each block, last probe step", fontsize=10)
            ax.set_xlabel("block")
            ax.set_ylabel(f"{units[quantity]}; band: the seeds' range", fontsize=9)
            ax.grid(alpha=0.3, which="both")
        legend_outside(axes[-1])  # one legend for both panels, off the lines
        return fig

    return draw


def depth_section(
    main: pd.DataFrame,
    probes: pd.DataFrame,
    metrics: pd.DataFrame,
    variants: list[str],
    spike_factor: float | None,
    spike_window: int,
) -> Section:
    """The residual stream over depth and the gradient-norm spikes of the ``main`` runs that
    finished (a diverged run's last probe is at another step), where the runs recorded the
    kurtosis or ``spike_factor`` is set; else nothing."""
    if len(main) and "status" in main:
        finished = set(main.loc[main["status"] == "finished", "run_id"])
        probes = probes[probes["run_id"].isin(finished)] if len(probes) else probes
        metrics = metrics[metrics["run_id"].isin(finished)] if len(metrics) else metrics
    has_kurtosis = not probes.empty and (probes["quantity"] == "resid_kurtosis").any()
    profile = depth_profile(probes) if has_kurtosis else pd.DataFrame()
    spikes = grad_spikes(metrics, spike_factor, spike_window) if spike_factor else None
    if profile.empty and spikes is None:
        return Section()
    section = Section(["## The residual stream over depth", ""])
    if len(profile):
        section.tables["depth.csv"] = profile
    if spikes is not None:
        section.tables["grad_spikes.csv"] = spikes
    section.lines += [depth_markdown(profile, spikes, variants), ""]
    if len(profile):
        section.lines += [
            "At each finished main run's last probe step, mean over seeds (the kurtosis's range "
            "over seeds in brackets). Feature kurtosis is mean(s⁴)/mean(s²)² over the features' "
            "RMS s: 1 when every feature carries alike, large when a few outlier features "
            "dominate.",
            "",
        ]
    if spikes is not None:
        section.lines += [
            f"A spike is a training step whose gradient norm (before clipping) exceeds "
            f"{spike_factor:g}× the median of the {spike_window} steps before it "
            f"(`analysis.spike_factor`, `analysis.spike_window`); the first {spike_window} "
            "steps are not judged. Every run's counts are in grad_spikes.csv.",
            "",
        ]
    section.figure(
        "depth.png",
        depth_figure(profile, variants),
        "The residual stream over depth",
        "Mean over seeds, the band their range; log scales.",
    )
    return section
