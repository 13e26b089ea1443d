"""The analysis plan's estimands measured on the stored runs, each judged by the one rule.

:func:`findings` resolves the plan for what the store holds (:func:`ablate.report.plan.
analysis_plan`), computes every verdict-bearing estimand's per-seed values, its estimate and
interval at its level, and its verdict (:func:`ablate.report.verdict.judge`). The cross-over's
2×2 (:class:`TwoByTwo`) also gives the setting effect and the interaction, descriptive (95%).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.core.boundary import SeedBoundary, half_width, paired_log2_ratios
from ablate.core.folders import ExperimentFolder
from ablate.core.simulate import SIMULATED_IMPL
from ablate.core.usable import PER_OCTAVE
from ablate.report.analysis import CONFIDENCE, column, scored_split
from ablate.report.crossover import TwoByTwo, settings_of, two_by_two
from ablate.report.factorial import Design, factor_runs, level_contrast
from ablate.report.load import StoredExperiment, load_experiment_results
from ablate.report.margins import boundary_frame
from ablate.report.plan import (
    CONVERT,
    DIVERGENCE,
    FACTOR,
    FACTOR_DIVERGENCE,
    FACTOR_TUNED,
    MATCHED,
    SHARED_LR,
    SPEED,
    TUNED_GAIN,
    TWO_BY_TWO,
    USABLE,
    AnalysisPlan,
    Estimand,
    analysis_plan,
    primary_design,
)
from ablate.report.usable import seed_walks, usable_runs
from ablate.report.verdict import (
    Estimate,
    Verdict,
    difference_estimate,
    judge,
    rank_estimate,
    ratio_estimate,
)


@dataclass(frozen=True)
class Finding:
    """One estimand of the plan, its verdict, and the per-seed values it was measured on."""

    estimand: Estimand
    verdict: Verdict
    values: tuple[tuple[int, float], ...] = ()  # (seed, value): nats, or log2 of a ratio

    @property
    def estimate(self) -> Estimate:
        return self.verdict.estimate

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(seed for seed, _ in self.values)

    @property
    def diverged(self) -> int:
        """How many seeds' values are infinite: a run that diverged, counted the worst."""
        return sum(1 for _, value in self.values if math.isinf(value))


def per_seed(values: pd.Series) -> tuple[tuple[int, float], ...]:
    """A series of per-seed values as (seed, value) pairs."""
    return tuple((int(seed), float(value)) for seed, value in values.items())


@dataclass(frozen=True)
class Findings:
    """A report's plan and every verdict-bearing estimand measured by it."""

    plan: AnalysisPlan
    found: list[Finding]
    crossed: dict[str, TwoByTwo]  # variant -> its 2×2, where the primary is measured over it

    def of(self, key: str, variant: str) -> Finding | None:
        return next(
            (f for f in self.found if (f.estimand.key, f.estimand.variant) == (key, variant)),
            None,
        )


def unlearned(runs: pd.DataFrame, variants: list[str]) -> str:
    """The runs of ``variants`` in ``runs`` that diverged or finished without learning, in
    words ("rmsnorm: 1 of 7 runs did not learn"); "" where every one learned."""
    parts = []
    for variant in variants:
        mine = runs[runs["variant"] == variant]
        bad = int(((mine["status"] != "finished") | (column(mine, "stable") == 0)).sum())
        if bad:
            parts.append(f"{variant}: {bad} of {len(mine)} runs did not learn")
    return "; ".join(parts)


def crossing(stored: StoredExperiment) -> tuple[dict[str, TwoByTwo], bool, str]:
    """Each variant's 2×2; whether the tuned settings coincide for every variant; and the
    cross-over runs that did not learn ("" where all did)."""
    variants = stored.manifest.variants
    crossed = {v: c for v in variants[1:] if (c := two_by_two(stored, v)) is not None}
    settings = {settings_of(stored.tuned, v) for v in variants}
    same = len(stored.tuned) > 0 and len(settings) == 1 and None not in settings
    lost = unlearned(stored.crossover, variants) if len(stored.crossover) else ""
    return crossed, same, lost


def findings(stored: StoredExperiment) -> Findings:
    """The plan for this store and every estimand of it measured and judged."""
    crossed, same, lost = crossing(stored)
    variants = stored.manifest.variants
    complete = len(crossed) == len(variants) - 1 and not lost
    design = primary_design(stored.manifest, complete, same)
    plan = analysis_plan(stored.manifest, design, simulated(stored))
    found = [measure(stored, plan, e, crossed) for e in plan.estimands]
    return Findings(plan, [f for f in found if f is not None], crossed if complete else {})


def primary_verdicts(stored: StoredExperiment) -> dict[str, Verdict]:
    """Each variant's verdict on the plan's primary estimand (quality at matched settings,
    over the 2×2 where the cross-over's runs exist): what ``decide:`` spends seeds on."""
    return {f.estimand.variant: f.verdict for f in findings(stored).found if f.estimand.primary}


def simulated(stored: StoredExperiment) -> bool:
    """Whether the runs came from the simulator (their speed is its setting)."""
    impl = stored.main.get("norm_impl", pd.Series(dtype=str))
    return bool(len(impl)) and bool((impl == SIMULATED_IMPL).all())


def measure(
    stored: StoredExperiment, plan: AnalysisPlan, estimand: Estimand, crossed: dict[str, TwoByTwo]
) -> Finding | None:
    """One estimand's per-seed values, estimate at its level and verdict."""
    rules = plan.rules
    if estimand.key == MATCHED:
        return matched(stored, plan, estimand, crossed.get(estimand.variant))
    if estimand.key == TUNED_GAIN:
        return loss_finding(stored.tuned, estimand, rules.not_estimable)
    if estimand.key == USABLE:
        logs, widen = usable_logs(stored, estimand)
        return ratio_finding(estimand, logs, widen, True, rules.not_estimable)
    if estimand.key == DIVERGENCE:
        return divergence(stored, estimand, rules.not_estimable)
    if estimand.key == SPEED:
        lead = stored.tuned if len(stored.tuned) else stored.main
        return ratio_finding(estimand, speed_logs(lead, estimand), 0.0, True, rules.not_estimable)
    if estimand.key == CONVERT:
        return loss_finding(stored.convert, estimand, rules.not_estimable)
    if estimand.key in (FACTOR, FACTOR_TUNED):
        runs = stored.main if estimand.key == FACTOR else stored.tuned
        return factor_finding(stored, runs, estimand, rules.not_estimable)
    if estimand.key == FACTOR_DIVERGENCE:
        return factor_divergence(stored, estimand, rules.not_estimable)
    raise ValueError(f"unknown estimand {estimand.key}")


def factor_finding(
    stored: StoredExperiment, runs: pd.DataFrame, estimand: Estimand, limit: float
) -> Finding:
    """A grid factor level's main effect on the final loss of ``runs`` (its scored split):
    per seed, the mean over the other factors' cells of level − first level; by ranks where a
    run of the grid diverged (the worst: +inf)."""
    design = Design.from_manifest(stored.manifest)
    assert design is not None and estimand.contrast is not None
    key, level, base = estimand.contrast
    metric = f"final_{scored_split(runs)}_loss"
    done = runs[runs["status"].isin(["finished", "diverged"])]
    worst = done.assign(
        **{metric: column(done, metric).where(done["status"] == "finished", np.inf).fillna(np.inf)},
        status="finished",  # every outcome a value: the contrast reads finished runs
    )
    grid = factor_runs(worst, design, metric)
    with np.errstate(invalid="ignore"):
        values = level_contrast(grid, design.keys, key, level, base).fillna(0.0)
    return judged_losses(values, estimand, limit)


def factor_divergence(stored: StoredExperiment, estimand: Estimand, limit: float) -> Finding:
    """A grid factor level's main effect on the divergence edge: per seed, the mean over the
    other factors' cells of log2(edge at the level / at the first level), as a ratio widened by
    twice the widest bracket's half width (each edge is known to within its bracket)."""
    design = Design.from_manifest(stored.manifest)
    assert design is not None and estimand.contrast is not None
    key, level, base = estimand.contrast
    frame = boundary_frame(stored.studies, "divergence")
    logs = level_contrast(factor_runs(frame, design), design.keys, key, level, base)
    widest = max(
        (half_width(r.divergence_bounds) for r in stored.studies.max_lr.values()), default=0.0
    )
    return ratio_finding(estimand, logs, 2 * widest, True, limit)


def matched(
    stored: StoredExperiment, plan: AnalysisPlan, estimand: Estimand, crossed: TwoByTwo | None
) -> Finding:
    """Quality at matched settings, as the plan measures it."""
    limit = plan.rules.not_estimable
    if plan.primary == TWO_BY_TWO and crossed is not None:
        values = crossed.main
        found = judge(
            difference_estimate(values.to_numpy(), estimand.level), estimand.margin, limit
        )
        return Finding(estimand, found, per_seed(values))
    runs = stored.main if plan.primary == SHARED_LR else stored.tuned
    return loss_finding(runs, estimand, limit)


def loss_finding(runs: pd.DataFrame, estimand: Estimand, limit: float) -> Finding:
    """The final-loss Δ (variant − baseline) on ``runs``' scored split, paired by seed; where
    a compared run diverged, by ranks (:func:`outcome_differences`)."""
    metric = f"final_{scored_split(runs)}_loss"
    diffs = outcome_differences(runs, estimand.variant, estimand.baseline, metric)
    return judged_losses(diffs, estimand, limit)


def judged_losses(diffs: pd.Series, estimand: Estimand, limit: float) -> Finding:
    """Per-seed loss differences judged: by a t interval, or by ranks where a run that
    diverged is among them (+inf: the worst; a run that finished without learning counts at
    its own loss)."""
    values = diffs.to_numpy(dtype=float)
    estimate = (
        rank_estimate(values, estimand.level)
        if np.isinf(values).any()
        else difference_estimate(values, estimand.level)
    )
    return Finding(estimand, judge(estimate, estimand.margin, limit), per_seed(diffs))


def outcome_differences(runs: pd.DataFrame, variant: str, baseline: str, metric: str) -> pd.Series:
    """``metric`` of ``variant`` − ``baseline`` over the seeds both ran, a run that diverged
    (or has no loss) counted as +inf, the worst outcome: both diverged, a tie (0)."""
    a, b = (worst_losses(runs, name, metric) for name in (variant, baseline))
    seeds = a.index.intersection(b.index)
    with np.errstate(invalid="ignore"):
        diffs = a[seeds] - b[seeds]
    return diffs.fillna(0.0)


def worst_losses(runs: pd.DataFrame, variant: str, metric: str) -> pd.Series:
    """``{seed: metric}`` of the variant's runs that finished or diverged, a diverged one (or
    one without a loss) as +inf."""
    mine = runs[(runs["variant"] == variant) & runs["status"].isin(["finished", "diverged"])]
    losses = column(mine, metric).where(mine["status"] == "finished", np.inf)
    return pd.Series(losses.fillna(np.inf).to_numpy(), index=mine["seed"].to_numpy())


def ratio_finding(
    estimand: Estimand, logs: pd.Series, widen: float, resolved: bool, limit: float
) -> Finding:
    """A ratio estimand from its per-seed log2 ratios."""
    estimate = ratio_estimate(logs.to_numpy(dtype=float), estimand.level, widen, resolved)
    return Finding(estimand, judge(estimate, estimand.margin, limit), per_seed(logs))


def usable_logs(stored: StoredExperiment, estimand: Estimand) -> tuple[pd.Series, float]:
    """Per seed, log2 of the variant's usable edge over the baseline's; the resolution to
    widen by: each edge lies within one walk step above it, so their ratio within one step."""
    within = stored.manifest.usable_within
    runs = usable_runs(stored)
    if within is None or runs.empty:
        return pd.Series(dtype=float), 0.0
    mine = {w.seed: w.edge for w in seed_walks(runs, estimand.variant, within)}
    base = {w.seed: w.edge for w in seed_walks(runs, estimand.baseline, within)}
    seeds = sorted(set(mine) & set(base))
    logs = pd.Series({s: math.log2(mine[s] / base[s]) for s in seeds}, dtype=float)
    return logs, 1.0 / PER_OCTAVE


def divergence(stored: StoredExperiment, estimand: Estimand, limit: float) -> Finding | None:
    """The divergence edge's ratio from the max-LR study's per-seed brackets."""
    found = stored.studies.max_lr
    if estimand.variant not in found or estimand.baseline not in found:
        return None
    base = found[estimand.baseline].divergence_bounds
    mine = found[estimand.variant].divergence_bounds
    seeds = [b.seed for b in mine if b.estimate is not None]
    logs = pd.Series(paired_log2_ratios(base, mine), dtype=float)
    logs.index = [s for s in seeds if s in {b.seed for b in base if b.estimate is not None}]
    widen = half_width(base) + half_width(mine)
    resolved = not (one_bracket(base) and one_bracket(mine))
    return ratio_finding(estimand, logs, widen, resolved, limit)


def one_bracket(bounds: list[SeedBoundary]) -> bool:
    """Whether every bracketed seed lies in one bracket (no spread between seeds measured)."""
    return len({b.estimate for b in bounds if b.estimate is not None}) == 1


def speed_logs(runs: pd.DataFrame, estimand: Estimand) -> pd.Series:
    """Per seed, log2 of the variant's training tokens/s over the baseline's (finished runs)."""
    finished = runs[runs["status"] == "finished"]
    speeds = finished.pivot_table(index="seed", columns="variant", values="tokens_per_s")
    if estimand.variant not in speeds or estimand.baseline not in speeds:
        return pd.Series(dtype=float)
    return np.log2(speeds[estimand.variant] / speeds[estimand.baseline]).dropna()


def load_answer(exp_dir: str | Path) -> Findings:
    """An experiment's analysis plan and every verdict-bearing estimand of it, measured and
    judged from its results folder as its report's Answer is (``ablate.load_answer``)::

        >>> found = ablate.load_answer("results/ln_vs_rms")  # doctest: +SKIP
        >>> [(f.estimand.title, f.verdict.text()) for f in found.found]  # doctest: +SKIP
    """
    return findings(load_experiment_results(ExperimentFolder(exp_dir)))


def answer_table(found: Findings) -> pd.DataFrame:
    """Every verdict-bearing estimand: its estimate, interval, level, margin and verdict
    (``answer.csv``)."""
    rows = []
    for f in found.found:
        e, v = f.estimand, f.verdict
        rows.append(
            {
                "estimand": e.title,
                "variant": e.variant,
                "baseline": e.baseline,
                "scale": e.scale,
                "margin": e.margin,
                "share": e.share,
                "looks": e.looks,
                "level": e.level,
                "estimate": v.estimate.value,
                "low": v.estimate.low,
                "high": v.estimate.high,
                "seeds": v.estimate.seeds,
                "verdict": v.word.value,
                "differs": v.differs,
                "more_seeds": v.more_seeds,
                "why": v.why,
            }
        )
    return pd.DataFrame(rows)


def seed_values(found: Findings) -> pd.DataFrame:
    """Every verdict-bearing estimand's per-seed values (nats, or log2 of a ratio), from which
    its interval recomputes (``answer_seeds.csv``)."""
    rows = [
        {"estimand": f.estimand.title, "variant": f.estimand.variant, "seed": seed, "value": value}
        for f in found.found
        for seed, value in f.values
    ]
    return pd.DataFrame(rows, columns=["estimand", "variant", "seed", "value"])


def described(values: pd.Series) -> Estimate:
    """A descriptive estimate: the mean and its 95% t interval (no verdict)."""
    return difference_estimate(values.to_numpy(dtype=float), CONFIDENCE)
