"""The report's maximum stable learning rates (learned at all): each seed's bracket, each
variant's boundary (the geometric mean over seeds, 95% interval) and each variant's ratio to
the baseline, paired by seed (the geometric mean of the seeds' ratios; :mod:`ablate.core.
boundary`), read from ``stability.json``'s ``max_lr`` entries, recomputed from its seed
brackets.

All of it is descriptive: the analysis plan's verdict-bearing boundary is the divergence edge
(:mod:`ablate.report.estimands`); "learned at all" says how far above the optimum a run still
gets below the unigram floor. An interval wider than ``analysis.not_estimable`` (100×), or a
ratio whose every seed falls in one bracket, prints no number (:func:`ablate.report.text.
lr_interval_text`). With one seed the intervals hold only the lattice's resolution, not the
seed-to-seed spread, and the text says so. The quality boundary by collapse margin, the
divergence boundary and the grid factors' effects are :mod:`ablate.report.margins`'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ablate.core.boundary import Interval, boundary_ratio, paired_log2_ratios, variant_boundary
from ablate.core.stability import Observation
from ablate.core.studies import SEED_BOUNDARY_KEYS, BoundaryResult, Studies
from ablate.report.factorial import Design
from ablate.report.margins import (
    factor_effects,
    factor_lines,
    margin_lines,
    margin_shown,
    margin_table,
)
from ablate.report.section import Section
from ablate.report.text import Shown, lr_interval_text, lr_shown
from ablate.report.verdict import NOT_ESTIMABLE


def ratio_p(logs: list[float]) -> float:
    """The paired t-test's p of the seeds' log ratios against 0 (NaN under 2 seeds or with
    no spread: the test is undefined)."""
    if len(logs) < 2 or np.ptp(logs) == 0:
        return math.nan
    return float(stats.ttest_1samp(logs, 0.0).pvalue)


def one_bracket(found: BoundaryResult) -> bool:
    """Whether every bracketed seed of a variant has the same boundary (one lattice bracket)."""
    estimates = {b.estimate for b in found.seed_bounds if b.estimate is not None}
    return len(estimates) == 1


def ratio_to(baseline: BoundaryResult, found: BoundaryResult) -> Interval | None:
    """``found``'s boundary over ``baseline``'s, paired by seed (None: no seed pairs)."""
    return boundary_ratio(baseline.seed_bounds, found.seed_bounds)


def boundary_table(studies: Studies) -> pd.DataFrame:
    """Per variant: the boundary and its interval, the ratio to the first variant's with its
    interval and whether it is shown, the seeds bracketed, the runs, the check."""
    found = studies.max_lr
    rows = []
    baseline = next(iter(found.values()), None)
    for variant, r in found.items():
        own = variant_boundary(r.seed_bounds)
        ratio = ratio_to(baseline, r) if baseline is not None and r is not baseline else None
        logs = (
            paired_log2_ratios(baseline.seed_bounds, r.seed_bounds)
            if baseline is not None and ratio is not None
            else []
        )
        rows.append(
            {
                "variant": variant,
                "max_stable_lr": own and own.value,
                "max_stable_lr_low": own and own.low,
                "max_stable_lr_high": own and own.high,
                "seeds_bracketed": own.seeds if own else 0,
                "seeds": len(r.seeds),
                "ratio_to_baseline": ratio and ratio.value,
                "ratio_low": ratio and ratio.low,
                "ratio_high": ratio and ratio.high,
                "ratio_pairs": len(logs),
                "one_bracket": one_bracket(baseline) and one_bracket(r),
                "ratio_p": ratio_p(logs),
                "runs": r.runs_total,
                "monotone": monotone_text(r),
            }
        )
    return pd.DataFrame(rows)


def seed_table(studies: Studies, divergence: bool = False) -> pd.DataFrame:
    """Every seed's bracket: last stable and first unstable lattice LR and their midpoint; of
    the quality boundary (learned at all), or of the divergence boundary."""
    return pd.DataFrame(
        [
            {"variant": variant, **{key: getattr(b, key) for key in SEED_BOUNDARY_KEYS}}
            for variant, r in studies.max_lr.items()
            for b in (r.divergence_bounds if divergence else r.seed_bounds)
        ]
    )


def shown_table(table: pd.DataFrame, limit: float) -> pd.DataFrame:
    """The boundary table as the report prints it (descriptive)."""
    return pd.DataFrame(
        {
            "variant": table["variant"],
            "max stable LR [95% CI]": [
                lr_interval_text(
                    r.max_stable_lr,
                    r.max_stable_lr_low,
                    r.max_stable_lr_high,
                    r.seeds_bracketed,
                    limit,
                )
                for r in table.itertuples()
            ],
            "seeds bracketed": [f"{r.seeds_bracketed} of {r.seeds}" for r in table.itertuples()],
            "ratio to baseline [95% CI]": [ratio_cell(r, limit) for r in table.itertuples()],
            "runs": table["runs"],
            "monotone": table["monotone"],
        }
    )


def ratio_shown(row: Any, limit: float = NOT_ESTIMABLE) -> Shown:
    """What a :func:`boundary_table` row's ratio to the baseline prints as: no number where
    two or more seeds all fall in one bracket each (else :func:`ablate.report.text.lr_shown`)."""
    shown = lr_shown(row.ratio_to_baseline, row.ratio_low, row.ratio_high, limit)
    if shown is not Shown.MISSING and row.ratio_pairs >= 2 and row.one_bracket:
        return Shown.ONE_BRACKET
    return shown


def ratio_cell(row: Any, limit: float) -> str:
    """A boundary ratio and its 95% interval, or why it has no number."""
    if ratio_shown(row, limit) is Shown.ONE_BRACKET:
        return f"not estimable with {row.ratio_pairs} seeds: every seed in one bracket"
    return lr_interval_text(
        row.ratio_to_baseline, row.ratio_low, row.ratio_high, row.ratio_pairs, limit
    )


ONE_SEED_NOTE = "; with one seed the interval is the lattice's, not the seeds' spread"


def _ratio_lines(table: pd.DataFrame, limit: float) -> list[str]:
    lines = []
    for row in table.iloc[1:].itertuples():
        if row.ratio_to_baseline is None or pd.isna(row.ratio_to_baseline):
            continue
        lines.append(
            f"- Max stable LR (learned at all), {row.variant} / {table['variant'].iloc[0]}: "
            f"{ratio_cell(row, limit)}, paired over {row.seeds_bracketed} seed(s) (95%, "
            f"descriptive{ONE_SEED_NOTE if row.seeds_bracketed == 1 else ''})."
        )
    return lines


def summary_lines(
    studies: Studies, design: Design | None = None, limit: float = NOT_ESTIMABLE
) -> list[str]:
    """The written summary's max-LR lines: a variant with no bracket, non-monotone brackets,
    each variant's boundary and each ratio to the baseline with its verdict, and in a grid
    each factor's effect on the boundaries."""
    lines = []
    held = held_step(studies)
    if held is not None:
        lines.append(
            f"- Max stable LR (learned at all): not measured; the probes were held at step "
            f"{held} (`max_lr.stop_step`) and bracket only where runs blow up."
        )
    for variant, r in studies.max_lr.items():
        if r.boundary is None and r.held_at is None:
            lines.append(f"- {variant}: **no boundary found**: {_unbracketed_text(r)}")
        if r.monotone is False:
            lines.append(
                f"- {variant}: **non-monotone**: {len(r.contradictions)} of "
                f"{r.checked_runs} stored runs at the same budget contradict their seed's "
                f"bracket ({contradiction_text(r.contradictions)})."
            )
    table = boundary_table(studies)
    bracketed = table[table["seeds_bracketed"] > 0] if len(table) else table
    if len(bracketed):
        text = ", ".join(
            f"{row.variant} "
            + lr_interval_text(
                row.max_stable_lr,
                row.max_stable_lr_low,
                row.max_stable_lr_high,
                row.seeds_bracketed,
                limit,
            )
            for row in bracketed.itertuples()
        )
        lines.append(
            f"- Max stable LR (the largest that learned at all, not a usable LR: each seed "
            f"bracketed on the shared lattice; geometric mean over seeds, 95% interval): {text}."
        )
    if not len(table):
        return lines
    effects = factor_effects(studies, design) if design is not None else pd.DataFrame()
    margins = margin_lines(margin_table(studies), limit)
    return lines + _ratio_lines(table, limit) + margins + factor_lines(effects, limit)


@dataclass(frozen=True)
class NoBoundary:
    """Why a variant has no boundary: ``stable``, every seed was stable up to the range's
    end, else every probe was unstable; ``lowest`` and ``highest``: the LRs probed (None where
    none was)."""

    stable: bool
    lowest: float | None
    highest: float | None


def no_boundary(found: BoundaryResult) -> NoBoundary:
    """:class:`NoBoundary` of a variant whose seeds bracketed no boundary."""
    lrs = [p.lr for p in found.probes]
    stable = any(p.stable for p in found.probes)
    return NoBoundary(stable, min(lrs), max(lrs)) if lrs else NoBoundary(stable, None, None)


def _unbracketed_text(found: BoundaryResult) -> str:
    """Why a variant has no boundary, in words (:func:`no_boundary`)."""
    why = no_boundary(found)
    span = "none" if why.lowest is None else f"{why.lowest:.3g} to {why.highest:.3g}"
    if why.stable:
        return f"every seed was stable up to the range's end ({span} probed)."
    return (
        f"every probe ({span}) was unstable, on every seed; if none diverged, the budget may "
        "be too small to learn."
    )


def held_step(studies: Studies) -> int | None:
    """The step the max-LR probes were held at (``max_lr.stop_step``); None: trained whole."""
    return next((r.held_at for r in studies.max_lr.values() if r.held_at is not None), None)


def held_section(studies: Studies, step: int, limit: float) -> Section:
    """The max-LR section of probes held at ``step``: the divergence brackets alone."""
    margins = margin_table(studies)  # no margin was derived: its divergence rows alone
    seeds = seed_table(studies, divergence=True)
    per_octave = next(iter(studies.max_lr.values())).per_octave
    lines = [
        "## Maximum stable learning rate",
        "",
        f"Every probe was held at step {step} of its budget (`max_lr.stop_step`), so the "
        "probes bracket only the divergence boundary: where runs blow up (a non-finite loss, "
        f"or the train loss above the divergence threshold), a probe that had not by step "
        f"{step} counting as not diverged (real runs blow up right after their warmup: "
        "docs/early-stop.md). "
        "Where runs stop learning at all needs the whole budget and is not measured. Each "
        "seed is bracketed on its own, on one lattice of LRs every variant shares "
        f"(2^(k/{per_octave}): brackets {2 ** (1 / per_octave):.3f}× wide), its boundary its "
        "bracket's geometric midpoint, widened by every stored run of its probes' family; a "
        "variant's boundary is the geometric mean over seeds with a 95% t interval, the ratio "
        "to the baseline paired by seed.",
        "",
        margin_shown(margins, limit).to_markdown(index=False),
        "",
        "Each seed's divergence bracket (last not diverged, first diverged lattice LR) and its "
        "boundary:",
        "",
        seeds.to_markdown(index=False, floatfmt=".4g"),
        "",
    ]
    return Section(lines, {"max_lr_margins.csv": margins, "max_lr_divergence_seeds.csv": seeds})


def max_lr_section(
    studies: Studies, design: Design | None = None, limit: float = NOT_ESTIMABLE
) -> Section:
    """Markdown and CSVs of the boundaries, the ratios, every seed's bracket and, in a grid,
    each factor's effect on them; of the divergence brackets alone where the probes were held
    short (:func:`held_section`)."""
    table = boundary_table(studies)
    if table.empty:
        return Section()
    held = held_step(studies)
    if held is not None:
        return held_section(studies, held, limit)
    seeds = seed_table(studies)
    per_octave = next(iter(studies.max_lr.values())).per_octave
    lines = [
        "## Maximum stable learning rate",
        "",
        "Stable here means the run learned at all (the criterion at the end of the report: "
        "below the unigram floor, not blown up), not that its loss was near the best: the "
        "usable LR (`max_lr.within`, walked from a tuned optimum) answers that.",
        "",
        "Each seed is bracketed on its own, on one lattice of LRs every variant shares "
        f"(2^(k/{per_octave}): brackets {2 ** (1 / per_octave):.3f}× wide), at the `max_lr` "
        "budget; a seed's boundary is its bracket's geometric midpoint. A variant's max "
        "stable LR is the geometric mean over seeds, with a 95% t interval over seeds on log "
        "LR widened by half a lattice step; the ratio to the baseline (the first variant) is "
        "paired by seed, the geometric mean of the seeds' ratios, its interval widened by one"
        " step. Each probe is a trial of the variant's `max_lr` Optuna study. Every seed's "
        "bracket is then checked against every stored run of the variant at the same budget "
        "(sweep points, search trials, probes, main runs): *monotone* when none is stable "
        "above an LR where the same seed failed, nor unstable below its seed's last stable "
        "LR.",
        "",
        shown_table(table, limit).to_markdown(index=False),
        "",
        "Each seed's bracket (last stable, first unstable lattice LR) and its boundary:",
        "",
        seeds.to_markdown(index=False, floatfmt=".4g"),
        "",
    ]
    for variant, r in studies.max_lr.items():
        if r.contradictions:
            lines += [
                f"Runs that contradict {variant}'s brackets: "
                f"{contradiction_text(r.contradictions)}.",
                "",
            ]
    margins = margin_table(studies)
    tables = {
        "max_lr.csv": table,
        "max_lr_seeds.csv": seeds,
        "max_lr_divergence_seeds.csv": seed_table(studies, divergence=True),
    }
    if len(margins) and margins["max_stable_lr"].notna().any():
        tables["max_lr_margins.csv"] = margins
        lines += [
            "### Two boundaries: quality by collapse margin, and divergence",
            "",
            "The quality boundary (the run learned: its final val loss below the floor by the "
            "margin) re-derived at each margin from every stored run of the variant at the "
            "probes' budget and a max-LR seed: each seed's first unstable LR above its lowest "
            "stable one, and its largest stable LR below that (brackets away from the probed "
            "margin are as wide as the stored runs leave them: `widest_bracket`); the "
            "divergence boundary (the run blew up or went non-finite) bracketed by the probes "
            "on the lattice.",
            "",
            margin_shown(margins, limit).to_markdown(index=False),
            "",
        ]
    effects = factor_effects(studies, design) if design is not None else pd.DataFrame()
    if len(effects):
        tables["max_lr_factors.csv"] = effects
        lines += [
            "### Max stable LR by factor",
            "",
            "Each factor level's main effect on each boundary as a ratio to its first level: "
            "per seed, the mean over the other factors' cells of the log2 boundaries' "
            "difference; a 95% t interval over seeds, widened by the brackets' resolution.",
            "",
            *factor_lines(effects, limit),
            "",
        ]
    return Section(lines, tables)


def monotone_text(found: BoundaryResult) -> str:
    """The check against the store in words."""
    if found.monotone is None:
        return "not checked"
    below = len(found.below_window)
    unlearned = f"; {below} below the window did not learn yet" if below else ""
    if found.monotone:
        return f"yes ({found.checked_runs} runs{unlearned})"
    return f"NO: {len(found.contradictions)} of {found.checked_runs} runs contradict{unlearned}"


def contradiction_text(found: list[Observation]) -> str:
    """The runs that contradict a bracket, in words."""
    return "; ".join(
        f"{'stable' if c.stable else 'unstable'} {c.group} run {c.run_id} "
        f"seed {c.seed} at lr {c.lr:.3g}"
        for c in found
    )
