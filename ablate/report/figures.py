"""The report's figures, drawn with matplotlib's object API (no pyplot state, no GUI backend).

Each function takes frames from :mod:`ablate.report.analysis` / :mod:`ablate.core.store` and
returns one figure still to draw (a :data:`Drawing`), or None when the data for it are absent (a
partial experiment, runs stored by an older version): whether a figure exists is known at once,
and it is drawn only when the report builder writes it (:func:`save_figure`; tests of
orchestration put a writer there that draws nothing). Colours follow the experiment's variant
order (``C0`` is the baseline), so a variant has the same colour in every figure; every axis
names its quantity and unit.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from ablate.report.analysis import block_rows, column, curve_band, probe_band

TRAIN_SMOOTHING = 10  # steps in the rolling mean of the train-loss curve
DPI = 120
LOSS_UNIT = "cross-entropy (nats / token)"

Drawing = Callable[[], Figure]  # a figure whose data are there, drawn when it is called


def save_figure(draw: Drawing, path: Path) -> None:
    """Draw the figure, lay it out and write it as a PNG."""
    fig = draw()
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)


def plain(value: float, _: object = None) -> str:
    """A tick label as a plain number (``0.002``, ``1.15``, ``200k``, ``2M``), never
    ``2×10⁻³`` or ``2e+05``."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e4, "k")):
        if abs(value) >= scale:
            shown = value / (scale if suffix != "k" else 1e3)
            return f"{shown:.3g}{suffix}"
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def readable_log_ticks(ax: Axes, which: str) -> None:
    """Label a log axis (``x`` or ``y``) a reader can read: where its view spans under two
    decades, at 1, 2 and 5 of each decade, and under a factor of 3 at four evenly spaced
    values, as plain numbers (a narrow range otherwise shows one power-of-ten label, or
    none)."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    low, high = ax.get_xlim() if which == "x" else ax.get_ylim()
    if low <= 0 or high / low >= 100:
        return
    narrow = high / low < 3
    axis.set_major_locator(MaxNLocator(4) if narrow else LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(plain))
    axis.set_minor_formatter(NullFormatter())


def variant_color(index: int, variants: int) -> str | tuple[float, ...]:
    """The colour of the ``index``-th of ``variants`` variants: ``C0``.. as everywhere, and
    for more than ten (the cycle would repeat) tab20's twenty."""
    if variants <= 10:
        return f"C{index}"
    return tuple(mpl.colormaps["tab20"](index % 20))


def legend_outside(ax: Axes) -> None:
    """The axes' legend to their right, outside the data (a long legend covers curves)."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def legend_below(ax: Axes, columns: int = 2) -> None:
    """The axes' legend under them in ``columns`` columns: long entries that would squeeze the
    axes beside them, outside the data."""
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=columns)


def _variant_bands(ax: Axes, band: pd.DataFrame, x: str, variants: list[str]) -> None:
    """One :func:`band_line` per variant with rows in ``band``, coloured by the variant's place."""
    for i, variant in enumerate(variants):
        mine = band[band["variant"] == variant]
        if len(mine):
            band_line(ax, mine, x, variant_color(i, len(variants)), variant)


def band_line(
    ax: Axes, band: pd.DataFrame, x: str, color: str | tuple[float, ...], label: str
) -> None:
    """Mean line and ± std band (std 0 where one seed) of a :func:`curve_band` frame."""
    low, high = int(band["count"].min()), int(band["count"].max())
    n = f"{low}–{high}" if low < high else str(high)  # seeds that stopped early leave fewer
    ax.plot(band[x], band["mean"], color=color, label=f"{label} (n={n})")
    std = band["std"].fillna(0.0)
    ax.fill_between(band[x], band["mean"] - std, band["mean"] + std, color=color, alpha=0.2)


def _corner(side: str, second: bool) -> float:
    """Where a reference line's note goes, in axes fraction: the top or bottom corner, the
    second note one line further in."""
    shift = 0.06 if second else 0.0
    return 0.98 - shift if side == "above" else 0.02 + shift


def reference_line(ax: Axes, floor: float | None, name: str = "unigram floor") -> None:
    """The unigram floor (a loss no better than predicting token frequencies), or another
    reference loss ``name``, drawn where it lies within the curves' range; beyond it, named in
    a corner, so that it never stretches the axis away from where the variants differ. Call
    it after the curves are drawn."""
    if floor is None or not np.isfinite(floor):
        return
    low, high = ax.get_ylim()
    if low <= floor <= high:
        style = (
            {"color": "black", "linestyle": ":"}
            if name == "unigram floor"
            else {
                "color": "grey",
                "linestyle": "--",
            }
        )
        ax.axhline(floor, linewidth=1, label=name, **style)
        ax.set_ylim(low, high)
        return
    side = "above" if floor > high else "below"
    ax.text(
        0.99,
        _corner(side, second=name != "unigram floor"),
        f"{name} {floor:.3f}: {side} the curves",
        transform=ax.transAxes,
        ha="right",
        va="top" if side == "above" else "bottom",
        fontsize=8,
    )


def loss_figure(
    metrics: pd.DataFrame, variants: list[str], floor: float | None = None, title: str = ""
) -> Drawing | None:
    """Val loss (mean ± std band over seeds) and smoothed train loss against step, with the
    unigram floor; ``title`` names the runs (their group)."""
    if metrics.empty:
        return None

    def draw() -> Figure:
        fig = Figure(figsize=(11, 4.2))
        ax_val, ax_train = fig.subplots(1, 2)
        smoothed = metrics.sort_values("step").assign(
            train_smooth=lambda f: f.groupby("run_id")["train_loss"].transform(
                lambda s: s.rolling(TRAIN_SMOOTHING, min_periods=1).mean()
            )
        )
        val, train = curve_band(metrics, "val_loss"), curve_band(smoothed, "train_smooth")
        for ax, band in ((ax_val, val), (ax_train, train)):
            _variant_bands(ax, band, "step", variants)
        ax_val.set_title("validation loss (mean ± std over seeds)")
        ax_train.set_title(f"train loss ({TRAIN_SMOOTHING}-step mean, ± std over seeds)")
        for ax in (ax_val, ax_train):
            reference_line(ax, floor)
            ax.set_xlabel("optimizer step")
            ax.set_ylabel(LOSS_UNIT)
            ax.grid(alpha=0.3)
        legend_outside(ax_train)  # one legend for both panels, off the bands
        if title:
            fig.suptitle(title)
            fig.tight_layout()
        return fig

    return draw


def loss_time_figure(metrics: pd.DataFrame, variants: list[str]) -> Drawing | None:
    """Val loss against wall-clock time since the start of training (evaluations included).

    Each evaluation step is placed at the mean elapsed time of the seeds; the band is ± std of
    the loss over seeds. A faster variant's curve ends further left.
    """
    if metrics.empty or "elapsed_s" not in metrics or metrics["val_loss"].isna().all():
        return None

    def draw() -> Figure:
        evals = metrics.dropna(subset=["val_loss", "elapsed_s"])
        band = curve_band(evals, "val_loss").merge(
            evals.groupby(["variant", "step"])["elapsed_s"].mean().reset_index(),
            on=["variant", "step"],
        )
        fig = Figure(figsize=(9, 4.2))
        ax = fig.subplots()
        _variant_bands(ax, band, "elapsed_s", variants)
        ax.set_title("validation loss against wall-clock time")
        ax.set_xlabel("time since the start of training (s)")
        ax.set_ylabel(LOSS_UNIT)
        ax.grid(alpha=0.3)
        legend_outside(ax)
        return fig

    return draw


def difference_figure(diff: pd.DataFrame, variants: list[str]) -> Drawing | None:
    """Each variant's val loss minus the baseline's over steps, mean over matched seeds with its
    95% interval (a band only where there are 2+ pairs): near-identical loss curves hide what
    this shows. Below zero, the variant is ahead."""
    if diff.empty:
        return None

    def draw() -> Figure:
        fig = Figure(figsize=(9, 4.2))
        ax = fig.subplots()
        for i, variant in enumerate(variants):
            mine = diff[diff["variant"] == variant]
            if mine.empty:
                continue
            n, color = int(mine["n_pairs"].max()), variant_color(i, len(variants))
            ax.plot(mine["step"], mine["mean"], color=color, label=f"{variant} (n={n})")
            ax.fill_between(mine["step"], mine["ci_low"], mine["ci_high"], color=color, alpha=0.2)
        ax.axhline(0.0, color="black", linewidth=1, label=f"{variants[0]} (baseline)")
        ax.set_title("val loss − baseline's, same seed (mean, 95% CI)")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("Δ cross-entropy (nats / token)")
        ax.grid(alpha=0.3)
        legend_outside(ax)
        return fig

    return draw


PROBE_ROWS = (
    ("resid_rms", "residual RMS after each block"),
    ("grad_norm", "block gradient L2 norm (before clipping)"),
)
PROBE_COLUMNS = 4  # variants per row of panels; more wrap onto further rows


def probe_figure(probes: pd.DataFrame, variants: list[str]) -> Drawing | None:
    """Per layer, residual-stream RMS and gradient norm over training; one column per variant.

    Lines are means over seeds, coloured by depth (dark: first block); rows share a log y axis
    so the variants compare at a glance.
    """
    if probes.empty:
        return None

    def draw() -> Figure:
        present = [v for v in variants if v in set(probes["variant"])]
        columns = min(len(present), PROBE_COLUMNS)
        wraps = -(-len(present) // columns)  # rows of variants
        fig = Figure(figsize=(4.2 * columns + 1.6, 3.2 * len(PROBE_ROWS) * wraps))
        axes = fig.subplots(len(PROBE_ROWS) * wraps, columns, squeeze=False)
        n_layers = int(block_rows(probes)["layer"].max()) + 1
        colors = mpl.colormaps["viridis"](np.linspace(0.0, 0.85, max(n_layers, 1)))
        sites = set(block_rows(probes)["site"])
        for r, (quantity, label) in enumerate(PROBE_ROWS):
            band = probe_band(probes, quantity)
            band = band[band["site"].isin(sites)]
            row_axes = [
                axes[w * len(PROBE_ROWS) + r][c] for w in range(wraps) for c in range(columns)
            ]
            for ax, variant in zip(row_axes, present, strict=False):
                for layer, mine in band[band["variant"] == variant].groupby("layer"):
                    ax.plot(
                        mine["step"], mine["mean"], color=colors[int(layer)], label=f"block {layer}"
                    )
                ax.set_yscale("log")
                readable_log_ticks(ax, "y")  # a narrow range: plain numbers, not 1.05×10⁰
                ax.set_title(variant, fontsize=9)
                ax.set_xlabel("optimizer step")
                ax.set_ylabel(label, fontsize=8)
                ax.grid(alpha=0.3, which="both")
            for ax in row_axes[len(present) :]:
                ax.set_visible(False)
            legend_outside(row_axes[columns - 1])  # the blocks, once per quantity
        return fig

    return draw


LOGIT_PANELS = (
    ("attn_logit_max", "largest attention logit (max over layers)", "q·k / √d_head"),
    ("logit_max_abs", "largest |output logit|", "logit"),
    ("logsumexp_mean", "mean log-sum-exp of output logits", "nats"),
)


def logit_figure(probes: pd.DataFrame, variants: list[str]) -> Drawing | None:
    """Attention and output-logit statistics over training, mean over seeds, per variant."""
    if probes.empty:
        return None

    def draw() -> Figure:
        fig = Figure(figsize=(16, 4.0))
        axes = fig.subplots(1, len(LOGIT_PANELS))
        for ax, (quantity, title, unit) in zip(axes, LOGIT_PANELS, strict=True):
            mine = probes[probes["quantity"] == quantity]
            per_run = mine.groupby(["variant", "run_id", "step"])["value"].max().reset_index()
            band = curve_band(per_run, "value")
            _variant_bands(ax, band, "step", variants)
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("optimizer step")
            ax.set_ylabel(unit)
            ax.grid(alpha=0.3)
        if len(probes[probes["quantity"].isin([q for q, _, _ in LOGIT_PANELS])]):
            legend_outside(axes[-1])  # one legend for the three panels, off the bands
        return fig

    return draw


SPEED_PANELS = (
    ("tokens_per_s", "training throughput", "tokens / s"),
    ("step_time_median_s", "median step time", "ms"),
    ("peak_memory_mb", "peak memory of training", "MiB"),
)


def throughput_figure(runs: pd.DataFrame, variants: list[str]) -> Drawing | None:
    """Tokens/s, median step time and peak memory per variant: bar = mean, dots = seeds."""
    finished = runs[runs["status"] == "finished"]
    if finished.empty or column(finished, "tokens_per_s").isna().all():
        return None

    def draw() -> Figure:
        fig = Figure(figsize=(13, max(3.0, 0.32 * len(variants) + 1.4)))
        axes = fig.subplots(1, len(SPEED_PANELS), sharey=True)
        for ax, (key, title, unit) in zip(axes, SPEED_PANELS, strict=True):
            scale = 1000.0 if key == "step_time_median_s" else 1.0
            for i, variant in enumerate(variants):
                values = scale * column(finished[finished["variant"] == variant], key).dropna()
                if values.empty:
                    continue
                ax.barh(i, values.mean(), color=variant_color(i, len(variants)), alpha=0.6)
                ax.scatter(values, np.full(len(values), i), color="black", s=12, zorder=3)
            ax.xaxis.set_major_locator(MaxNLocator(4))  # five-digit tokens/s labels fit
            ax.set_title(title, fontsize=10)
            ax.set_xlabel(unit)
            ax.grid(alpha=0.3, axis="x")
        axes[0].set_yticks(range(len(variants)), variants, fontsize=8)
        axes[0].invert_yaxis()  # the baseline on top, as in the tables
        kinds = set(finished.get("memory_kind", pd.Series(dtype=str)).dropna())
        if kinds:
            axes[-1].set_xlabel("MiB, measured as: " + ", ".join(sorted(kinds)))
        return fig

    return draw
