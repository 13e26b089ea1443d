"""The scaling report's Answer and analysis plan: does the answer change with model size?

Each size is an experiment with its own report, plan and family; the scaling report quotes each
size's primary estimand (quality at matched settings) with that size's verdict, and adds one
verdict-bearing estimand per variant in a family of its own: **the gap against size**, the
least-squares slope of the sizes' primary estimates on log10 parameters, in nats per decade,
its Student-t interval over the sizes (sizes − 2 degrees of freedom) at the family's level
(Bonferroni over the variants), judged against ``analysis.min_effect`` per decade by the one
rule (:func:`ablate.report.verdict.judge`). Two sizes leave no residual: not estimable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ablate.core.folders import ExperimentFolder
from ablate.report.answer import HEADING, said
from ablate.report.estimands import Finding, findings
from ablate.report.load import load_experiment_results
from ablate.report.plan import MATCHED, rules_of
from ablate.report.verdict import Estimate, Verdict, judge

TITLE = "the gap against size"


@dataclass(frozen=True)
class SizeAnswer:
    """One size's primary finding for one variant, and its parameter count."""

    size: str
    n_params: int
    finding: Finding


def size_answers(manifest: dict, scaled: ExperimentFolder) -> dict[str, list[SizeAnswer]]:
    """Per non-baseline variant, every stored size's primary finding, in the file's order."""
    found: dict[str, list[SizeAnswer]] = {v: [] for v in manifest["variants"][1:]}
    for size in manifest["sizes"]:
        folder = ExperimentFolder.of(scaled.path, size["experiment"])
        if not folder.manifest.is_file():
            continue
        stored = load_experiment_results(folder)
        for finding in findings(stored).found:
            if finding.estimand.key == MATCHED and finding.estimand.variant in found:
                runs = stored.main[stored.main["variant"] == finding.estimand.variant]
                params = int(runs["n_params"].iloc[0]) if len(runs) else int(size["n_params"])
                found[finding.estimand.variant].append(SizeAnswer(size["label"], params, finding))
    return found


def slope_estimate(sizes: list[SizeAnswer], level: float) -> Estimate:
    """The primary estimates' least-squares slope on log10 parameters (nats per decade) and its
    t interval at ``level`` over the sizes; no interval from under three sizes."""
    u = np.log10([s.n_params for s in sizes])
    y = np.array([s.finding.estimate.value for s in sizes])
    ok = np.isfinite(y)
    u, y = u[ok], y[ok]
    if len(u) < 2 or np.ptp(u) == 0:
        return Estimate(math.nan, math.nan, math.nan, level, len(u))
    fit = stats.linregress(u, y)
    if len(u) < 3:
        return Estimate(float(fit.slope), math.nan, math.nan, level, len(u))
    half = float(stats.t.ppf(0.5 + level / 2, len(u) - 2)) * float(fit.stderr)
    residual = float(np.std(y - (fit.intercept + fit.slope * u), ddof=2))
    return Estimate(
        float(fit.slope), fit.slope - half, fit.slope + half, level, len(u), "difference", residual
    )


def gap_verdicts(manifest: dict, answers: dict[str, list[SizeAnswer]]) -> dict[str, Verdict]:
    """Per variant, the gap's slope judged at the family's level (Bonferroni over variants)."""
    rules = rules_of(manifest.get("analysis"), manifest.get("min_effect"))
    level = 1 - rules.alpha / max(len(answers), 1)
    return {
        variant: judge(slope_estimate(sizes, level), rules.min_effect, rules.not_estimable)
        for variant, sizes in answers.items()
    }


def per_decade(verdict: Verdict) -> str:
    """``+0.0167 nats per decade [-0.1499, +0.1832] (95% interval, 4 sizes): **...**``."""
    e = verdict.estimate
    if verdict.why:
        return (
            f"**not estimable from {e.seeds} sizes** (no residual to size the slope's "
            "uncertainty: a third size measures it)"
        )
    return (
        f"{e.value:+.4f} nats per decade of parameters [{e.low:+.4f}, {e.high:+.4f}] "
        f"({100 * e.level:.4g}% interval, {e.seeds} sizes): **{verdict.text()} per decade**"
    )


def scaling_answer_lines(
    manifest: dict, answers: dict[str, list[SizeAnswer]], gaps: dict[str, Verdict], decades: float
) -> list[str]:
    """The Answer: each size's primary, the gap against size, what would change it."""
    baseline = manifest["variants"][0]
    sentences = []
    for variant, sizes in answers.items():
        by_size = "; ".join(f"{s.size} {said(s.finding)}" for s in sizes)
        sentences.append(
            f"**Quality at matched settings, by size** ({variant} − {baseline}, each size's "
            f"own report and family): {by_size}."
        )
        sentences.append(
            f"**The gap against size** ({variant} − {baseline}): {per_decade(gaps[variant])}."
        )
    sentences.append(
        f"**What would change it:** the sizes span {decades:.2f} decades of parameters at one "
        "token budget each (what this design cannot show is below); more sizes, or sizes "
        "further apart, narrow the slope."
    )
    return [HEADING, "", *[f"- {s}" for s in sentences], ""]


def scaling_plan_lines(manifest: dict, gaps: dict[str, Verdict]) -> list[str]:
    """The scaling report's analysis plan: its one estimand per variant and the family."""
    rules = rules_of(manifest.get("analysis"), manifest.get("min_effect"))
    baseline = manifest["variants"][0]
    share = 1 / max(len(gaps), 1)
    rows = [
        "| estimand | variant | scale, margin | role | share of α | looks | interval level |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *[
            f"| {TITLE} | {variant} − {baseline} | difference, ±{rules.min_effect:g} nats | "
            f"primary | {share:.4g} | 1 | {100 * (1 - rules.alpha * share):.4g}% |"
            for variant in gaps
        ],
    ]
    return [
        "## Analysis plan",
        "",
        "Declared before any result: each size's report judges its own estimands in its own "
        "family (quoted above with their levels); this report adds, per variant, the slope of "
        "the sizes' quality at matched settings on log10 parameters (nats per decade), its t "
        "interval over the sizes, judged by the one rule against ±min_effect per decade: "
        "*exceeds*, *equivalent within*, *differs from 0*, *inconclusive*; not estimable from "
        f"two sizes. **The family:** the {len(gaps)} slope(s) below, Bonferroni at α "
        f"{rules.alpha:g}. Everything else below is descriptive (95% intervals, no verdict).",
        "",
        *rows,
        "",
    ]
