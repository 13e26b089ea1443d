"""The figures of the studies and the grid: the LR sweep with each variant's max stable LR, the
search's stability map, the factors' interactions, and the conversion's loss; drawn as
:mod:`ablate.report.figures` draws (a :data:`~ablate.report.figures.Drawing` each, the same
colours, tick labels and legends off the data).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory

from ablate.report.analysis import column, curve_band
from ablate.report.figures import (
    LOSS_UNIT,
    Drawing,
    band_line,
    legend_below,
    readable_log_ticks,
    reference_line,
    variant_color,
)

# a sweep point with an unstable seed: a collapsed seed is drawn at its own loss, not at ℓ0
UNSTABLE_POINT = "a seed unstable (collapsed; or diverged, counted at ℓ0)"


def sweep_figure(
    table: pd.DataFrame,
    variants: list[str],
    losses: tuple[float, float | None],
    boundaries: pd.DataFrame,
) -> Drawing:
    """Final val loss against LR per variant; points with an unstable seed marked x, those
    whose unstable seeds did not learn yet (below their stable LRs) hollow; the
    initial loss ℓ0 and the unigram floor (``losses``) as lines; each variant's max stable LR
    (a row of ``boundaries``) as a dotted line in its 95% interval's band."""

    def draw() -> Figure:
        initial_loss, floor = losses
        fig = Figure(figsize=(10, 6.0))
        ax = fig.subplots()
        for i, variant in enumerate(variants):
            mine = table[table["variant"] == variant]
            color = variant_color(i, len(variants))
            ax.plot(mine["lr"], mine["loss_mean"], color=color, marker="o", label=variant)
            bad = mine[mine["unstable"] > mine["unlearned"]]
            early = mine[(mine["unlearned"] > 0) & (mine["unstable"] == mine["unlearned"])]
            for rows, style, what in (
                (bad, {"color": color, "marker": "x"}, UNSTABLE_POINT),
                (early, {"facecolors": "white", "edgecolors": color}, "did not learn yet"),
            ):
                if len(rows):
                    ax.scatter(rows["lr"], rows["loss_mean"], s=90, zorder=3, **style,
                               label=f"{variant}: {what}")  # fmt: skip
            found = boundaries[boundaries["variant"] == variant] if len(boundaries) else boundaries
            if len(found) and pd.notna(found["max_stable_lr"].iloc[0]):
                row = found.iloc[0]
                top = blended_transform_factory(ax.transData, ax.transAxes)
                ax.plot(
                    [row["max_stable_lr_low"], row["max_stable_lr_high"]],
                    [0.97 - 0.035 * i] * 2,
                    color=color,
                    linewidth=5,
                    alpha=0.45,
                    solid_capstyle="butt",
                    transform=top,
                )
                ax.axvline(
                    row["max_stable_lr"],
                    color=color,
                    linestyle=":",
                    label=f"{variant}: max stable LR (seeds' geometric mean; bar: 95% interval)",
                )
        reference_line(ax, initial_loss, "ℓ0 = ln(vocab)")
        reference_line(ax, floor)
        ax.set_xscale("log")
        ax.set_xlabel("peak learning rate")
        ax.set_ylabel("final val loss, min(ℓ, ℓ0), mean over seeds (nats)")
        ax.set_title("learning-rate sweep")
        edges = boundaries["max_stable_lr"].dropna() if len(boundaries) else pd.Series(dtype=float)
        high = max([table["lr"].max(), *edges])
        ax.set_xlim(table["lr"].min() / 1.5, high * 1.5)  # an interval's bar may reach past
        ax.grid(alpha=0.3, which="both")
        legend_below(ax)
        return fig

    return draw


def stability_map_figure(trials: pd.DataFrame, variants: list[str]) -> Drawing:
    """Search trials in the LR x warmup plane: colour = objective, x = unstable, + = pruned."""

    def draw() -> Figure:
        fig = Figure(figsize=(5.5 * len(variants), 4.3))
        axes = fig.subplots(1, len(variants), squeeze=False)[0]
        low, high = trials["value"].min(), trials["value"].max()
        for ax, variant in zip(axes, variants, strict=True):
            mine = trials[trials["variant"] == variant]
            done = mine[mine["state"] == "COMPLETE"]
            stable = done[done["stable"].eq(True)]  # None means unjudged
            points = ax.scatter(
                stable["lr"],
                stable["warmup_steps"],
                c=stable["value"],
                cmap="viridis_r",
                vmin=low,
                vmax=high,
                s=45,
                label="stable",
            )
            unstable = done[~done["stable"].eq(True)]
            ax.scatter(
                unstable["lr"],
                unstable["warmup_steps"],
                color="red",
                marker="x",
                s=60,
                label="unstable" if len(unstable) else "_none",
            )
            pruned = mine[mine["state"] == "PRUNED"]
            ax.scatter(
                pruned["lr"],
                pruned["warmup_steps"],
                color="grey",
                marker="+",
                s=60,
                label="pruned" if len(pruned) else "_none",
            )
            ax.set_xscale("log")
            readable_log_ticks(ax, "x")
            ax.set_title(f"{variant}: search trials")
            ax.set_xlabel("peak learning rate")
            ax.set_ylabel("warmup steps")
            ax.grid(alpha=0.3)
            legend = ax.legend(fontsize=8)
            for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True):
                if text.get_text() == "stable" and handle is not None:
                    handle.set_color("grey")  # its colour is the loss's, not the kind's
            fig.colorbar(points, ax=ax, label="final val loss (unstable: min(ℓ, ℓ0))")
        return fig

    return draw


def interaction_figure(pairs: list[tuple[str, str, pd.DataFrame]]) -> Drawing | None:
    """One panel per factor pair: mean final val loss against ``a``'s levels, a line per ``b``.

    Each frame is :func:`ablate.report.factorial.two_way`'s; bars are ± std. Parallel lines mean no
    interaction.
    """
    if not pairs:
        return None

    def draw() -> Figure:
        fig = Figure(figsize=(4.6 * len(pairs), 3.8))
        axes = np.atleast_1d(fig.subplots(1, len(pairs)))
        for ax, (a, b, cells) in zip(axes, pairs, strict=True):
            levels_a = list(dict.fromkeys(cells[a]))
            for i, level_b in enumerate(dict.fromkeys(cells[b])):
                mine = cells[cells[b] == level_b].set_index(a).reindex(levels_a)
                ax.errorbar(
                    range(len(levels_a)),
                    mine["mean"],
                    yerr=mine["std"].fillna(0.0),
                    color=f"C{i}",
                    marker="o",
                    capsize=3,
                    label=f"{b.rsplit('.', 1)[-1]} = {level_b}",
                )
            ax.set_xticks(range(len(levels_a)), levels_a)
            ax.set_xlabel(a)
            ax.set_ylabel("final val loss (mean ± std)")
            ax.grid(alpha=0.3)
            legend_below(ax)
        return fig

    return draw


def convert_figure(
    metrics: pd.DataFrame, starts: pd.DataFrame, variants: list[str]
) -> Drawing | None:
    """Val loss of the continued and converted runs against continued tokens, from the swap.

    ``starts`` has one row per run (variant, seed, loss_after_swap): the point at 0 tokens.
    """
    if metrics.empty:
        return None

    def draw() -> Figure:
        at_swap = starts[["run_id", "variant", "seed", "loss_after_swap"]].rename(
            columns={"loss_after_swap": "val_loss"}
        )
        curves = pd.concat([at_swap.assign(tokens=0), metrics], ignore_index=True)
        band = curve_band(curves, "val_loss", by="tokens")
        fig = Figure(figsize=(6.5, 4.2))
        ax = fig.subplots()
        for i, variant in enumerate(variants):
            mine = band[band["variant"] == variant]
            if len(mine):
                band_line(ax, mine, "tokens", f"C{i}", variant)
                ax.scatter([0], mine["mean"].iloc[:1], color=f"C{i}", zorder=3)
        before = column(starts, "loss_before_swap").mean()
        ax.axhline(
            before, color="gray", linestyle=":", label=f"source before the swap ({before:.3f})"
        )
        ax.set_xlabel("continued-training tokens")
        ax.set_ylabel(LOSS_UNIT)
        ax.set_title("validation loss after the swap (mean ± std over seeds)")
        ax.grid(alpha=0.3)
        ax.legend()
        return fig

    return draw
