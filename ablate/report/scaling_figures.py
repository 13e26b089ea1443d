"""The scaling report's figures: each quantity against parameters, and the gap against size.

Colours follow the variant order (``C0`` is the baseline), and each is a :data:`Drawing` drawn
when it is written, as in :mod:`ablate.report.figures`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ablate.report.figures import LOSS_UNIT, Drawing, readable_log_ticks
from ablate.report.fits import LineFit, PowerLaw

PANELS = (
    ("final_loss", f"final val loss, {LOSS_UNIT}"),
    ("best_lr", "best LR of the search"),
    ("max_stable_lr", "max stable LR (geometric mean of seeds, 95% interval)"),
    ("lr_sensitivity", "LR sensitivity (nats)"),
)


def scaling_figure(
    table: pd.DataFrame,
    fits: dict[tuple[str, str], PowerLaw],
    variants: list[str],
    extrapolate: float,
) -> Drawing | None:
    """Four log–log panels, one per quantity: each variant's sizes and its power-law line with
    the line's 95% band; the max stable LR's interval as an error bar and its line extended
    (dashed) to ``extrapolate`` times the largest size."""
    if table.empty:
        return None

    def draw() -> Figure:
        fig = Figure(figsize=(11, 8))
        axes = fig.subplots(2, 2).ravel()
        largest = float(table["n_params"].max())
        for ax, (quantity, label) in zip(axes, PANELS, strict=True):
            for i, variant in enumerate(variants):
                mine = table[table["variant"] == variant].sort_values("n_params")
                if quantity == "max_stable_lr":
                    _boundaries(ax, mine, f"C{i}", variant)
                else:
                    ax.plot(mine["n_params"], mine[quantity], "o", color=f"C{i}", label=variant)
                fit = fits.get((variant, quantity))
                if fit is not None and fit.estimable:  # a fit that cannot say draws no line
                    _fit_line(ax, fit, mine["n_params"].min(), largest, f"C{i}")
                    if quantity == "max_stable_lr":
                        _fit_line(ax, fit, largest, largest * extrapolate, f"C{i}", dashed=True)
            _log_axes(ax, table, quantity)
            ax.set_xlabel("parameters")
            ax.set_ylabel(label)
            ax.legend(fontsize=8)
        return fig

    return draw


def _boundaries(ax: Axes, mine: pd.DataFrame, color: str, variant: str) -> None:
    """Each size's max stable LR (geometric mean of seeds) with its 95% interval as an error bar;
    hollow where other stored runs contradict a seed's bracket (it is not fitted)."""
    for contradicted, rows in mine.groupby(mine["max_lr_contradictions"] > 0):
        mid = rows["max_stable_lr"]
        ax.errorbar(
            rows["n_params"],
            mid,
            yerr=[mid - rows["max_stable_lr_low"], rows["max_stable_lr_high"] - mid],
            fmt="o",
            color=color,
            mfc="white" if contradicted else color,
            capsize=3,
            label=f"{variant} (contradicted: not fitted)" if contradicted else variant,
        )


def _log_axes(ax: Axes, table: pd.DataFrame, quantity: str) -> None:
    """Log axes, plain tick labels, and y limits around the data (a wide band is clipped)."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    columns = (
        ["max_stable_lr_low", "max_stable_lr_high"] if quantity == "max_stable_lr" else [quantity]
    )
    values = table[columns].to_numpy(dtype=float).ravel()
    values = values[np.isfinite(values) & (values > 0)]
    if not len(values):
        return
    margin = 1.05 if quantity == "final_loss" else 1.5
    ax.set_ylim(values.min() / margin, values.max() * margin)
    readable_log_ticks(ax, "x")
    readable_log_ticks(ax, "y")


def _fit_line(
    ax: Axes, fit: PowerLaw, start: float, stop: float, color: str, dashed: bool = False
) -> None:
    """The fitted power law from ``start`` to ``stop`` with its 95% confidence band."""
    x = np.geomspace(start, stop, 20)
    y, low, high = np.array([fit.predict(v) for v in x]).T
    ax.plot(x, y, color=color, linestyle="--" if dashed else "-", linewidth=1)
    if np.isfinite(low).all():
        ax.fill_between(x, low, high, color=color, alpha=0.1 if dashed else 0.15, linewidth=0)


def gap_figure(
    table: pd.DataFrame, trends: dict[str, LineFit], variants: list[str]
) -> Drawing | None:
    """Each non-baseline variant's paired loss difference per size, 95% intervals, trend."""
    rows = table[table["variant"].isin(variants[1:]) & np.isfinite(table["diff_vs_baseline"])]
    if rows.empty:
        return None

    def draw() -> Figure:
        fig = Figure(figsize=(7, 4.5))
        ax = fig.subplots()
        ax.axhline(0.0, color="black", linewidth=0.8)
        for i, variant in enumerate(variants):
            mine = rows[rows["variant"] == variant].sort_values("n_params")
            if mine.empty:
                continue
            diff = mine["diff_vs_baseline"]
            yerr = [diff - mine["diff_ci_low"], mine["diff_ci_high"] - diff]
            ax.errorbar(
                mine["n_params"],
                diff,
                yerr=yerr,
                fmt="o",
                color=f"C{i}",
                capsize=3,
                label=f"{variant} − {variants[0]}",
            )
            trend = trends.get(variant)
            if trend is not None:
                x = np.geomspace(mine["n_params"].min(), mine["n_params"].max(), 20)
                ax.plot(x, [trend.at(np.log10(v))[0] for v in x], color=f"C{i}", linewidth=1)
        ax.set_xscale("log")
        readable_log_ticks(ax, "x")
        ax.set_xlabel("parameters")
        ax.set_ylabel("Δ final val loss (nats / token)")
        ax.legend(fontsize=8)
        return fig

    return draw
