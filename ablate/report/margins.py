"""The report's two boundaries beyond the probed one and the factors that move them: the
quality boundary at every collapse margin, the divergence boundary, and in a grid each factor's
main effect on both (:mod:`ablate.report.boundaries` prints them with the rest)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ablate.core.boundary import Interval, SeedBoundary, boundary_ratio, half_width
from ablate.core.studies import BoundaryResult, Studies
from ablate.report.factorial import METRIC, Design, main_effects
from ablate.report.text import SHOWN_WORDS, interval_text, ratio_text

NOT_ESTIMABLE = 100.0  # a ratio's interval wider than this factor is no finding


def _bounds_of(
    found: BoundaryResult, kind: float | str
) -> tuple[list[SeedBoundary], Interval | None]:
    """A variant's seed brackets and boundary of ``kind``: "divergence", or a margin's."""
    if kind == "divergence":
        return found.divergence_bounds, found.divergence
    margin = next((m for m in found.margins if m.margin == kind), None)
    return (margin.seed_bounds, margin.boundary) if margin else ([], None)


def margin_table(studies: Studies) -> pd.DataFrame:
    """Per boundary (the quality boundary at every collapse margin, then the divergence
    boundary) and variant: its median with interval and its ratio to the baseline's."""
    found = studies.max_lr
    if not found:
        return pd.DataFrame()
    baseline = next(iter(found.values()))
    margins = sorted({m.margin for r in found.values() for m in r.margins})
    rows = []
    for kind in [*margins, "divergence"]:
        base_bounds, _ = _bounds_of(baseline, kind)
        for variant, r in found.items():
            bounds, own = _bounds_of(r, kind)
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
                    "ratio_shown": ratio.shown if ratio else None,
                }
            )
    return pd.DataFrame(rows)


def margin_lines(table: pd.DataFrame) -> list[str]:
    """In words: whether each ratio's verdict depends on the collapse margin, and the
    divergence boundary's ratio."""
    if table.empty:
        return []
    lines = []
    quality = table[table["boundary"].str.startswith("quality")]
    for variant, rows in quality[quality["ratio_shown"].notna()].groupby("variant", sort=False):
        said = "; ".join(
            f"{r.boundary.removeprefix('quality, ')}: "
            + (
                ratio_text(r.ratio_to_baseline, r.ratio_low, r.ratio_high)
                if estimable(r)
                else f"not estimable with these seeds (interval wider than {NOT_ESTIMABLE:g}×)"
            )
            for r in rows.itertuples()
        )
        verdicts = set(rows["ratio_shown"])
        if len(verdicts) > 1:
            depends = "**depends on the margin** (shown at some, not at others)"
        else:
            shown = "shown" if verdicts.pop() else "not shown"
            depends = f"does not depend on the margin ({shown} at every one)"
        lines.append(
            f"- Quality boundary by collapse margin, {variant} / {table['variant'].iloc[0]}: "
            f"{said}: the finding {depends}."
        )
    divergence = table[(table["boundary"] == "divergence") & table["ratio_shown"].notna()]
    for r in divergence.itertuples():
        verdict = "shown" if r.ratio_shown else "**not shown**"
        lines.append(
            f"- Divergence boundary (non-finite or blown-up runs), {r.variant} / "
            f"{table['variant'].iloc[0]}: "
            f"{ratio_text(r.ratio_to_baseline, r.ratio_low, r.ratio_high)}: a difference is "
            f"{verdict}."
        )
    return lines


def margin_shown(table: pd.DataFrame) -> pd.DataFrame:
    """The margin table as the report prints it."""
    return pd.DataFrame(
        {
            "boundary": table["boundary"],
            "variant": table["variant"],
            "max stable LR [95% CI]": [
                interval_text(r.max_stable_lr, r.low, r.high) for r in table.itertuples()
            ],
            "widest seed bracket": [
                "–" if pd.isna(w) else f"{w:.2f}×" for w in table["widest_bracket"]
            ],
            "ratio to baseline [95% CI]": [
                interval_text(r.ratio_to_baseline, r.ratio_low, r.ratio_high)
                for r in table.itertuples()
            ],
            "difference": [difference_word(r) for r in table.itertuples()],
        }
    )


def estimable(row: Any) -> bool:
    """Whether a ratio's interval is narrow enough to be a finding (:data:`NOT_ESTIMABLE`)."""
    return not row.ratio_high / row.ratio_low > NOT_ESTIMABLE


def difference_word(row: Any) -> str:
    """shown / not shown, or not estimable where the interval is wider than the limit."""
    if row.ratio_shown is None or pd.isna(row.ratio_shown):
        return "–"
    return SHOWN_WORDS[bool(row.ratio_shown)] if estimable(row) else "not estimable"


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


def factor_lines(table: pd.DataFrame) -> list[str]:
    """Which factor moves each boundary, in words."""
    lines = []
    for r in table.itertuples():
        if r.shown is None:
            verdict = f"{r.seeds} seed(s): no interval"
            said = ratio_text(r.ratio)
        else:
            verdict = "**moves it**" if r.shown else "a move is **not shown**"
            said = ratio_text(r.ratio, r.low, r.high)
        lines.append(
            f"- Max stable LR ({r.boundary} boundary), {r.factor} {r.level} vs {r.base} "
            f"(main effect over seeds): ×{said}: {verdict}."
        )
    return lines
