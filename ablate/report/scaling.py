"""The scaling report of an experiment with a ``scale:`` section, built from the sizes' stores.

Each size is an experiment of its own (``results/<name>/<name>.<label>/``); ``scale.json``
beside them lists the sizes. Per variant and size this module reads the final val loss at the
tuned settings (the shared-LR runs when the file has no search), the search's best LR, the
max stable LR (geometric mean of the max-LR seeds', with its interval) and the LR sensitivity of
the sweep, and the paired difference to the
baseline over matched seeds. Across sizes it fits a power law in the parameter count per variant
and quantity (:mod:`ablate.report.fits`), fits the difference against log10 parameters to say
whether the gap grows, shrinks or is flat, extrapolates the max stable LR one decade above
the largest size, labelled as an extrapolation, and says what the design cannot show
(:mod:`ablate.report.scaling_limits`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from ablate.core.folders import ExperimentFolder
from ablate.core.studies import Studies
from ablate.report.analysis import paired_difference, sensitivity_table, sweep_frame, sweep_table
from ablate.report.boundaries import boundary_table
from ablate.report.fits import LineFit, PowerLaw, power_law_fit, trend_fit
from ablate.report.load import StoredExperiment, load_experiment_results, unigram_floor
from ablate.report.scaling_answer import (
    gap_verdicts,
    scaling_answer_lines,
    scaling_plan_lines,
    size_answers,
)
from ablate.report.scaling_figures import gap_figure, scaling_figure
from ablate.report.scaling_limits import limits_lines
from ablate.report.section import Section

QUANTITIES = {
    "final_loss": "final val loss",
    "best_lr": "best LR (search)",
    "max_stable_lr": "max stable LR",
    "lr_sensitivity": "LR sensitivity",
}
EXTRAPOLATION_FACTOR = 10  # the max stable LR is extrapolated to 10x the largest size
EDGE_NOTE = " (every size's sweep is best at its grid's edge: no optimum)"


def _boundary(studies: Studies, variant: str) -> dict[str, float | int]:
    """The variant's max stable LR with its interval, its ratio to the baseline with its
    interval (:func:`ablate.report.boundaries.boundary_table`; NaN where absent), how many
    seeds it rests on, and how many stored runs contradict their brackets."""
    table = boundary_table(studies)
    mine = table[table["variant"] == variant] if len(table) else table
    keys = ("max_stable_lr", "max_stable_lr_low", "max_stable_lr_high")
    keys += ("ratio_to_baseline", "ratio_low", "ratio_high")
    found = {k: (mine[k].iloc[0] if len(mine) else None) for k in keys}
    values = {k: math.nan if v is None or pd.isna(v) else float(v) for k, v in found.items()}
    against = studies.max_lr.get(variant)
    seeds = int(mine["seeds_bracketed"].iloc[0]) if len(mine) else 0
    return values | {
        "boundary_seeds": seeds,
        "max_lr_contradictions": len(against.contradictions) if against else 0,
    }


def _best_lr(studies: Studies, variant: str) -> float:
    search = studies.search.get(variant)
    return float(search.best.lr) if search and search.best else math.nan


def _sensitivity(stored: StoredExperiment) -> dict[str, tuple[float, bool]]:
    """variant -> (LR sensitivity, whether the sweep's best LR is inside its grid)."""
    frame = sweep_frame(stored.manifest.runs, stored.runs)
    if frame.empty:
        return {}
    table = sensitivity_table(sweep_table(frame), frame)
    pairs = zip(table["lr_sensitivity"], table["best_inside"], strict=True)
    return dict(zip(table["variant"], pairs, strict=True))


def size_rows(size: dict[str, Any], stored: StoredExperiment, variants: list[str]) -> list[dict]:
    """One row per variant at one size: loss at the tuned settings, best and max stable LR, LR
    sensitivity, and the paired difference to the baseline (first variant)."""
    tuned = len(stored.tuned) > 0
    runs = stored.tuned if tuned else stored.main
    studies = stored.studies
    sensitivity = _sensitivity(stored)
    rows = []
    for variant in variants:
        every = runs[runs["variant"] == variant]
        mine = every[every["status"] == "finished"]
        diff = paired_difference(runs, variant, variants[0]) if variant != variants[0] else None
        rows.append(
            {
                "size": size["label"],
                "variant": variant,
                "n_params": int(every["n_params"].iloc[0]) if len(every) else size["n_params"],
                "tokens": size["tokens"],
                "loss_at": "tuned" if tuned else "shared LR",
                "seeds": len(mine),
                "final_loss": mine["final_val_loss"].mean() if len(mine) else math.nan,
                "final_loss_std": mine["final_val_loss"].std(ddof=1) if len(mine) else math.nan,
                "best_lr": _best_lr(studies, variant),
                **_boundary(studies, variant),
                "lr_sensitivity": sensitivity.get(variant, (math.nan, True))[0],
                "sweep_best_inside": sensitivity.get(variant, (math.nan, True))[1],
                "diff_vs_baseline": diff.mean if diff else math.nan,
                "diff_ci_low": diff.ci_low if diff else math.nan,
                "diff_ci_high": diff.ci_high if diff else math.nan,
                "n_pairs": diff.n_pairs if diff else 0,
                "unigram_loss": unigram_floor(stored.runs),
                "vocab_size": int(every["vocab_size"].iloc[0]) if len(every) else None,
            }
        )
    return rows


def scaling_table(manifest: dict, scaled: ExperimentFolder) -> tuple[pd.DataFrame, list[str]]:
    """Every size's rows (sizes in the file's order), and the sizes with nothing stored yet."""
    rows, missing = [], []
    for size in manifest["sizes"]:
        folder = ExperimentFolder.of(scaled.path, size["experiment"])
        if not folder.manifest.is_file():
            missing.append(size["label"])
            continue
        rows += size_rows(size, load_experiment_results(folder), manifest["variants"])
    return pd.DataFrame(rows), missing


def fit_quantities(table: pd.DataFrame, variants: list[str]) -> dict[tuple[str, str], PowerLaw]:
    """``{(variant, quantity): power law in n_params}`` where at least two sizes have a value
    (for the max stable LR: brackets no other stored run of its size contradicts)."""
    fits = {}
    for variant in variants:
        mine = table[table["variant"] == variant]
        for quantity in QUANTITIES:
            ok = mine[np.isfinite(mine[quantity].astype(float)) & (mine[quantity] > 0)]
            if quantity == "max_stable_lr":  # brackets other runs contradict: not fitted
                ok = ok[ok["max_lr_contradictions"] == 0]
            if ok["n_params"].nunique() >= 2:
                fits[(variant, quantity)] = power_law_fit(ok["n_params"], ok[quantity])
    return fits


def fits_frame(fits: dict[tuple[str, str], PowerLaw]) -> pd.DataFrame:
    """The fits as a table: exponent, its 95% interval, prefactor, points."""
    return pd.DataFrame(
        [
            {
                "variant": variant,
                "quantity": quantity,
                "exponent": fit.exponent,
                "exponent_low": fit.interval[0],
                "exponent_high": fit.interval[1],
                "prefactor": fit.prefactor,
                "sizes": fit.line.points,
                "decades": fit.line.u_span,
                "estimable": fit.estimable,
            }
            for (variant, quantity), fit in fits.items()
        ]
    )


def gap_trends(table: pd.DataFrame, variants: list[str]) -> dict[str, LineFit]:
    """Per non-baseline variant: its paired difference to the baseline against log10 params."""
    trends = {}
    for variant in variants[1:]:
        mine = table[(table["variant"] == variant) & np.isfinite(table["diff_vs_baseline"])]
        if mine["n_params"].nunique() >= 2:
            trends[variant] = trend_fit(mine["n_params"], mine["diff_vs_baseline"])
    return trends


def exponent_text(fit: PowerLaw, edge: bool = False) -> str:
    """An exponent with its 95% interval (descriptive), or why there is none; ``edge``: the
    quantity rests on a sweep whose best LR is at its grid's edge at every size."""
    if not fit.estimable:
        return fit.not_estimable_text()
    low, high = fit.interval
    return f"{fit.exponent:+.3f} [{low:+.3f}, {high:+.3f}]{EDGE_NOTE if edge else ''}"


def _interval(low: float, high: float, fmt: str = "+.3f") -> str:
    if not (math.isfinite(low) and math.isfinite(high)):
        return "no interval"
    return f"[{low:{fmt}}, {high:{fmt}}]"


def summary_lines(
    table: pd.DataFrame,
    fits: dict[tuple[str, str], PowerLaw],
    trends: dict[str, LineFit],
    variants: list[str],
) -> list[str]:
    """The written summary: the losses against trivial baselines, the gap against size, the
    max-stable-LR ratios, the exponents, the extrapolated max stable LR."""
    lines = baseline_lines(table)
    baseline = variants[0]
    for variant, trend in trends.items():
        mine = table[table["variant"] == variant]
        gaps = "; ".join(
            f"{r.size} {r.diff_vs_baseline:+.4f} {_interval(r.diff_ci_low, r.diff_ci_high, '+.4f')}"
            for r in mine.itertuples()
        )
        lines.append(
            f"**{variant} − {baseline}** (final val loss, paired over seeds, "
            f"{mine['loss_at'].iloc[0]}): {gaps}. Against log10 parameters this gap changes "
            f"by {trend.slope:+.4f} {_interval(trend.slope_low, trend.slope_high, '+.4f')} "
            "nats per decade (95%, descriptive; the Answer judges the matched-settings gap)."
        )
    lines += ratio_lines(table, variants)
    for quantity, label in QUANTITIES.items():
        parts = []
        for variant in variants:
            if (variant, quantity) in fits:
                mine = table[table["variant"] == variant]
                edge = quantity == "lr_sensitivity" and not mine["sweep_best_inside"].any()
                parts.append(f"{variant} {exponent_text(fits[(variant, quantity)], edge)}")
        if parts:
            lines.append(f"Exponent of {label} in parameters (95%): {'; '.join(parts)}.")
    target = EXTRAPOLATION_FACTOR * float(table["n_params"].max())
    predicted = extrapolations(fits, variants, target)
    for variant in variants:
        fit = fits.get((variant, "max_stable_lr"))
        if fit is not None and variant not in predicted:
            lines.append(
                f"No extrapolation of {variant}'s max stable LR: its exponent is "
                f"{fit.not_estimable_text()}."
            )
        elif fit is not None:
            value, low, high = predicted[variant]
            lines.append(
                f"**Extrapolation**, not a measurement: {variant}'s max stable LR at "
                f"{target:,.0f} parameters (10x the largest run) would be {value:.3g} "
                f"(95% interval of the fitted line {_interval(low, high, '.3g')})."
            )
    return [f"- {line}" for line in lines]


def extrapolations(
    fits: dict[tuple[str, str], PowerLaw], variants: list[str], target: float
) -> dict[str, tuple[float, float, float]]:
    """Per variant whose max-stable-LR exponent is estimable, its fitted line's value at
    ``target`` parameters and that value's 95% interval; a variant whose fit is not estimable
    (or that has none) is not extrapolated."""
    fitted = {variant: fits.get((variant, "max_stable_lr")) for variant in variants}
    return {
        variant: fit.predict(target)
        for variant, fit in fitted.items()
        if fit is not None and fit.estimable
    }


@dataclass(frozen=True)
class Baselines:
    """The trivial baselines every size's final loss is held against: a uniform guess over the
    vocabulary (``uniform``, nats) and the unigram frequencies (``unigram``); the range of the
    final losses and of their seed-to-seed std; ``all_below``: every final loss is below the
    unigram loss (else some size learned less than word frequencies)."""

    uniform: float
    unigram: float
    loss_min: float
    loss_max: float
    std_min: float
    std_max: float

    @property
    def all_below(self) -> bool:
        return not self.loss_max >= self.unigram  # no losses at all: none above it


def baselines(table: pd.DataFrame) -> Baselines | None:
    """The trivial baselines and the losses' range, or None where the table has no unigram
    loss or vocabulary size."""
    floor = table["unigram_loss"].dropna()
    vocab = table["vocab_size"].dropna()
    if floor.empty or vocab.empty:
        return None
    losses, std = table["final_loss"].dropna(), table["final_loss_std"]
    return Baselines(
        math.log(vocab.iloc[0]), floor.iloc[0], losses.min(), losses.max(), std.min(), std.max()
    )


def baseline_lines(table: pd.DataFrame) -> list[str]:
    """How far every size's loss is below the trivial baselines, and the seed-to-seed noise."""
    found = baselines(table)
    if found is None:
        return []
    where = "all below it" if found.all_below else "NOT all below it: some learned less"
    return [
        f"Trivial baselines: a uniform guess {found.uniform:.3f} nats, unigram "
        f"frequencies {found.unigram:.4f}; final losses {found.loss_min:.4f}–"
        f"{found.loss_max:.4f}, {where}. Seed-to-seed std of the final loss: "
        f"{found.std_min:.4f}–{found.std_max:.4f}."
    ]


class Contradicted(NamedTuple):
    """A size and variant whose max-stable-LR bracket ``runs`` other stored runs of that size
    contradict (stable above it, or unstable below): left out of the max-stable-LR fit."""

    size: str
    variant: str
    runs: int


def contradicted(table: pd.DataFrame) -> list[Contradicted]:
    """The table's contradicted brackets, in its row order."""
    rows = table[table["max_lr_contradictions"] > 0]
    return [
        Contradicted(r.size, r.variant, int(r.max_lr_contradictions)) for r in rows.itertuples()
    ]


def ratio_lines(table: pd.DataFrame, variants: list[str]) -> list[str]:
    """Each variant's max stable LR over the baseline's per size, paired by seed, with its
    95% interval."""
    lines = []
    for variant in variants[1:]:
        mine = table[(table["variant"] == variant) & table["ratio_to_baseline"].notna()]
        if len(mine):
            shown = "; ".join(
                f"{r.size} {r.ratio_to_baseline:.2f} [{r.ratio_low:.2f}, {r.ratio_high:.2f}]"
                for r in mine.itertuples()
            )
            lines.append(
                f"Max stable LR, {variant} / {variants[0]} (paired by seed, 95% interval; an "
                f"interval that holds 1 shows no difference): {shown}."
            )
    against = contradicted(table)
    if against:
        named = ", ".join(f"{c.size} {c.variant} ({c.runs} run(s))" for c in against)
        lines.append(
            f"Brackets contradicted by other stored runs of their size (stable above, or "
            f"unstable below; see each size's report), left out of the max-stable-LR fit: "
            f"{named}."
        )
    return lines


def _shown(table: pd.DataFrame) -> pd.DataFrame:
    shown = table[
        ["size", "variant", "n_params", "tokens", "seeds", "final_loss", "final_loss_std"]
    ].copy()
    shown["best LR"] = table["best_lr"].map(lambda v: f"{v:.3g}")
    shown["max stable LR"] = [
        f"[{lo:.3g}, {hi:.3g}]" + (f" ({n} against)" if n else "")
        for lo, hi, n in zip(
            table["max_stable_lr_low"],
            table["max_stable_lr_high"],
            table["max_lr_contradictions"],
            strict=True,
        )
    ]
    shown["LR sensitivity"] = [  # at the grid's edge the sweep's best is not an optimum
        f"{v:.4f}" + ("" if inside else " (best at the grid's edge)")
        for v, inside in zip(table["lr_sensitivity"], table["sweep_best_inside"], strict=True)
    ]
    shown["Δ vs baseline"] = [
        "" if not math.isfinite(d) else f"{d:+.4f} {_interval(lo, hi, '+.4f')}"
        for d, lo, hi in zip(
            table["diff_vs_baseline"], table["diff_ci_low"], table["diff_ci_high"], strict=True
        )
    ]
    return shown


def scaling_section(manifest: dict, scaled: ExperimentFolder) -> Section:
    """The whole scaling report: sizes, summary, table, fits, figures."""
    variants = manifest["variants"]
    table, missing = scaling_table(manifest, scaled)
    budget = manifest.get("tokens_per_parameter")
    rule = f"{budget:g} tokens per parameter" if budget else "the same token budget"
    section = Section(
        [
            f"# {manifest['name']}: scaling",
            "",
            manifest.get("description") or "",
            "",
            f"Variants: {', '.join(variants)} (baseline: {variants[0]}); seeds "
            f"{manifest['seeds']}; sizes {', '.join(s['label'] for s in manifest['sizes'])} "
            f"at {rule}. Each size is an experiment of its own with its own report "
            "(`<name>.<size>/report.md` beside this one).",
            "",
        ]
    )
    if missing:
        section.lines += [f"**Incomplete:** nothing stored yet for {', '.join(missing)}.", ""]
    if table.empty:
        return section
    fits = fit_quantities(table, variants)
    trends = gap_trends(table, variants)
    answers = size_answers(manifest, scaled)
    gaps = gap_verdicts(manifest, answers)
    decades = float(np.ptp(np.log10(table["n_params"].astype(float))))
    section.lines += scaling_answer_lines(manifest, answers, gaps, decades)
    section.lines += scaling_plan_lines(manifest, gaps)
    section.lines += ["## Evidence", "", *summary_lines(table, fits, trends, variants), ""]
    section.lines += limits_lines(table, manifest)
    section.lines += [
        "## Per size",
        "",
        "Final val loss: mean ± std over seeds at each variant's tuned LR and warmup (the "
        "shared LR where the file has no search); Δ: paired difference to the baseline over "
        "matched seeds with its 95% interval; max stable LR: the geometric mean of its seeds' "
        "boundaries with its 95% interval [low, high], fitted unless other stored runs of its "
        "size contradict a seed's bracket (n against).",
        "",
        _shown(table).to_markdown(index=False, floatfmt=".4f"),
        "",
        "## Power-law fits",
        "",
        "Least squares of log10 quantity on log10 parameters per variant; exponent with its "
        "95% interval (Student's t, sizes − 2 degrees of freedom; none for two sizes; "
        "descriptive).",
        "",
        fits_frame(fits).to_markdown(index=False, floatfmt=".4g") if fits else "(no fit)",
        "",
    ]
    section.tables.update({"scaling.csv": table, "scaling_fits.csv": fits_frame(fits)})
    section.figure(
        "scaling.png",
        scaling_figure(table, fits, variants, EXTRAPOLATION_FACTOR),
        "Against model size",
        "Each quantity per variant against parameters on log axes, with its power-law fit and "
        "the fitted line's 95% band; the max stable LR's line continues (dashed) to 10x the "
        "largest size: an extrapolation, whose band shows how little the fit pins it down.",
    )
    section.figure(
        "scaling_gap.png",
        gap_figure(table, trends, variants),
        "The gap against model size",
        "Paired difference in final val loss to the baseline per size (95% intervals over "
        "matched seeds) and its linear trend in log10 parameters.",
    )
    return section
