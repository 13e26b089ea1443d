"""The report's two boundaries beyond the probed one and the factors that move them: the
quality boundary at every collapse margin, the divergence boundary, and in a grid each factor's
main effect on both (:mod:`ablate.report.boundaries` prints them with the rest)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ablate.core.boundary import SeedBoundary, boundary_ratio, half_width, variant_boundary
from ablate.core.studies import BoundaryResult, Studies
from ablate.report.factorial import METRIC, Design, main_effects
from ablate.report.text import lr_interval_text, ratio_text
from ablate.report.verdict import NOT_ESTIMABLE, wide


def _bounds_of(found: BoundaryResult, kind: float | str) -> list[SeedBoundary]:
    """A variant's seed brackets of ``kind``: "divergence", or a margin's."""
    if kind == "divergence":
        return found.divergence_bounds
    margin = next((m for m in found.margins if m.margin == kind), None)
    return margin.seed_bounds if margin else []


def margin_table(studies: Studies) -> pd.DataFrame:
    """Per boundary (the quality boundary at every collapse margin, then the divergence
    boundary) and variant: its geometric mean over seeds with its interval, and its ratio to
    the baseline's."""
    found = studies.max_lr
    if not found:
        return pd.DataFrame()
    baseline = next(iter(found.values()))
    margins = sorted({m.margin for r in found.values() for m in r.margins})
    rows = []
    for kind in [*margins, "divergence"]:
        base_bounds = _bounds_of(baseline, kind)
        for variant, r in found.items():
            bounds = _bounds_of(r, kind)
            own = variant_boundary(bounds)
            ratio = boundary_ratio(base_bounds, bounds) if r is not baseline else None
            rows.append(
                {
                    "boundary": "divergence"
                    if kind == "divergence"
                    else f"quality, margin {kind:g}",
                    "variant": variant,
                    "max_stable_lr": own and own.value,
                    "low": own and own.low,
                    "high": own and own.high,
                    "widest_bracket": 2 ** (2 * half_width(bounds)) if own else None,
                    "ratio_to_baseline": ratio and ratio.value,
                    "ratio_low": ratio and ratio.low,
                    "ratio_high": ratio and ratio.high,
                    "seeds": own.seeds if own else 0,
                }
            )
    return pd.DataFrame(rows)


def margin_lines(table: pd.DataFrame, limit: float = NOT_ESTIMABLE) -> list[str]:
    """In words, descriptive: each quality ratio at every collapse margin, and the divergence
    boundary's ratio (the plan's divergence edge is judged in the Answer)."""
    if table.empty:
        return []
    lines = []
    quality = table[table["boundary"].str.startswith("quality")]
    for variant, rows in quality[quality["ratio_to_baseline"].notna()].groupby(
        "variant", sort=False
    ):
        said = "; ".join(
            f"{r.boundary.removeprefix('quality, ')}: {ratio_interval(r, limit)}"
            for r in rows.itertuples()
        )
        lines.append(
            f"- Quality boundary (learned at all) by collapse margin, {variant} / "
            f"{table['variant'].iloc[0]}: {said} (95%, descriptive)."
        )
    divergence = table[(table["boundary"] == "divergence") & table["ratio_to_baseline"].notna()]
    for r in divergence.itertuples():
        lines.append(
            f"- Divergence boundary (non-finite or blown-up runs), {r.variant} / "
            f"{table['variant'].iloc[0]}: {ratio_interval(r, limit)} (95%; the Answer judges "
            "it at the plan's level)."
        )
    return lines


def ratio_interval(row: Any, limit: float) -> str:
    """A margin row's ratio and 95% interval, or ``not estimable``."""
    return lr_interval_text(row.ratio_to_baseline, row.ratio_low, row.ratio_high, row.seeds, limit)


def margin_shown(table: pd.DataFrame, limit: float = NOT_ESTIMABLE) -> pd.DataFrame:
    """The margin table as the report prints it."""
    return pd.DataFrame(
        {
            "boundary": table["boundary"],
            "variant": table["variant"],
            "max stable LR [95% CI]": [
                lr_interval_text(r.max_stable_lr, r.low, r.high, r.seeds, limit)
                for r in table.itertuples()
            ],
            "widest seed bracket": [
                "–" if pd.isna(w) else f"{w:.2f}×" for w in table["widest_bracket"]
            ],
            "ratio to baseline [95% CI]": [
                "–" if pd.isna(r.ratio_to_baseline) else ratio_interval(r, limit)
                for r in table.itertuples()
            ],
        }
    )


def boundary_frame(studies: Studies, kind: str) -> pd.DataFrame:
    """One row per (variant, seed) bracketed: log2 of its ``kind`` boundary ("quality" or
    "divergence") in the metric column the factorial statistics read."""
    rows = [
        {
            "variant": variant,
            "seed": b.seed,
            "status": "finished",
            METRIC: math.log2(b.estimate),
        }
        for variant, r in studies.max_lr.items()
        for b in (r.seed_bounds if kind == "quality" else r.divergence_bounds)
        if b.estimate
    ]
    return pd.DataFrame(rows, columns=["variant", "seed", "status", METRIC])


def factor_effects(studies: Studies, design: Design) -> pd.DataFrame:
    """Each factor level's main effect on each boundary, as a ratio to the factor's first
    level: per seed the mean over the other factors' cells of the log2 boundaries'
    difference, then a t interval over seeds, widened by both levels' bracket half widths."""
    widest = max((half_width(r.seed_bounds) for r in studies.max_lr.values()), default=0.0)
    rows = []
    for kind in ("quality", "divergence"):
        frame = boundary_frame(studies, kind)
        if frame.empty:
            continue
        effects = main_effects(frame, design)
        for r in effects[effects["effect"].notna()].itertuples():
            interval = pd.notna(r.effect_ci_low)
            low = 2 ** (r.effect_ci_low - 2 * widest) if interval else math.nan
            high = 2 ** (r.effect_ci_high + 2 * widest) if interval else math.nan
            rows.append(
                {
                    "boundary": kind,
                    "factor": r.factor,
                    "level": r.level,
                    "base": design.levels[r.factor][0],
                    "ratio": 2**r.effect,
                    "low": low,
                    "high": high,
                    "seeds": r.seeds,
                    "shown": (not low <= 1 <= high) if interval else None,
                }
            )
    return pd.DataFrame(rows)


def factor_lines(table: pd.DataFrame, limit: float = NOT_ESTIMABLE) -> list[str]:
    """Each factor's effect on each boundary, descriptive (95%); no number where its interval
    spans more than ``limit``×."""
    lines = []
    for r in table.itertuples():
        if r.shown is None:
            said = f"×{ratio_text(r.ratio)} ({r.seeds} seed(s): no interval)"
        elif wide(r.low, r.high, limit):
            said = f"not estimable with {r.seeds} seed(s): wider than {limit:g}×"
        else:
            said = f"×{ratio_text(r.ratio, r.low, r.high)} (95%, descriptive)"
        lines.append(
            f"- Max stable LR ({r.boundary} boundary), {r.factor} {r.level} vs {r.base} "
            f"(main effect over seeds): {said}."
        )
    return lines
