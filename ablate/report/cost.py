"""The report's Cost of the answer: what each stage trained (runs, run-steps, run-minutes) and
which verdicts of the Answer its runs feed, and the run-steps per decided verdict.

A stage feeds a verdict where it is run for it: the verdict is measured on its runs, or its
runs chose the settings the verdict is measured at (:func:`fed_by`, by the design the plan
measured the primary estimand with). A stage that feeds none (the shared-LR A/B where tuned
runs lead, the LR sweep) is secondary evidence: the Answer stands without it. The divergence
brackets also read the other stored runs of their family (a tuned run that diverged narrows a
bracket: :func:`ablate.report.load.stored_divergence`); those runs are counted where they were
run for. Run-steps are the steps each run trained (a run stopped early counts the steps it
took). A run counts in the row of the stage that stored it (a usable walk's point on the curve:
the curve's) and in a study's row where the study names it; once in the total. ``cost.csv``
holds the table.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ablate.core.experiment import Experiment
from ablate.core.manifest import Manifest, plan_manifest
from ablate.core.plan import plan_runs
from ablate.core.stages import RUN_GROUPS
from ablate.report.context import ReportContext
from ablate.report.estimands import Findings
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
    stages_of,
)
from ablate.report.section import Section
from ablate.report.setup import stage_runs

CHOOSERS = frozenset({"search", "curve", "warmup"})  # the stages that choose the tuned settings
TUNED = CHOOSERS | {"tuned", "decide"}  # decide: adds seeds of the tuned A/B


def fed_by(estimand: Estimand, design: str) -> frozenset[str]:
    """The run groups an estimand's verdict is measured on, or whose runs chose the settings it
    is measured at, under the plan's ``design`` (:data:`ablate.report.plan.SHARED_LR`, ...)."""
    key = estimand.key
    if key == MATCHED:
        if design == SHARED_LR:
            return frozenset({"main"})
        return TUNED | {"crossover"} if design == TWO_BY_TWO else TUNED
    if key == SPEED:
        return frozenset({"main"}) if design == SHARED_LR else frozenset({"tuned"})
    if key in (TUNED_GAIN, FACTOR_TUNED):
        return TUNED
    if key == USABLE:  # each seed walks up from the tuned optimum the search or curve found
        return frozenset({"usable", "search", "curve"})
    if key in (DIVERGENCE, FACTOR_DIVERGENCE):
        return frozenset({"max_lr"})
    if key == CONVERT:
        return frozenset({"convert"})
    if key == FACTOR:
        return frozenset({"main"})
    raise ValueError(f"unknown estimand {key}")


@dataclass(frozen=True)
class StageCost:
    """One stage's runs, the steps they trained, their own minutes, and the verdicts they
    feed (each estimand's title, once)."""

    group: str
    runs: int
    run_steps: int
    run_minutes: float
    feeds: tuple[str, ...]


@dataclass(frozen=True)
class Cost:
    """What the answer cost: each stage's :class:`StageCost` in pipeline order, the distinct
    runs, run-steps and run-minutes in all, and how many of the Answer's verdicts were
    decided."""

    stages: list[StageCost]
    runs: int
    run_steps: int
    run_minutes: float
    verdicts: int
    decided: int

    @property
    def steps_per_decided(self) -> float | None:
        """Run-steps per decided verdict; None where none was decided."""
        return self.run_steps / self.decided if self.decided else None


def _steps(runs: pd.DataFrame) -> int:
    return int(pd.to_numeric(runs.get("steps"), errors="coerce").fillna(0).sum())


def _minutes(runs: pd.DataFrame) -> float:
    return float(pd.to_numeric(runs.get("wall_time_s"), errors="coerce").fillna(0).sum() / 60)


def _feeds(group: str, estimands: list[Estimand], design: str) -> tuple[str, ...]:
    """The titles of the ``estimands`` a group's runs feed, each once."""
    fed = [e.title for e in estimands if group in fed_by(e, design)]
    return tuple(dict.fromkeys(fed))


def feeds(group: str, found: Findings) -> tuple[str, ...]:
    """The verdicts of a report's Answer a group's runs feed."""
    return _feeds(group, [f.estimand for f in found.found], found.plan.primary)


def designed_plan(manifest: Manifest) -> AnalysisPlan:
    """The analysis plan before any run: the primary over the cross-over's 2×2 where one is
    planned, every run assumed to learn."""
    crossed = "crossover" in stages_of(manifest)
    return analysis_plan(manifest, primary_design(manifest, crossed, False))


def planned_feeds(manifest: Manifest) -> dict[str, tuple[str, ...]]:
    """Before any run, the verdicts each run group would feed (:data:`RUN_GROUPS`' order), by
    the :func:`designed_plan`."""
    plan = designed_plan(manifest)
    return {g.name: _feeds(g.name, plan.estimands, plan.primary) for g in RUN_GROUPS}


def secondary_sections(experiment: Experiment) -> list[str]:
    """The file's sections whose stages feed no primary verdict of the plan as designed
    (:func:`designed_plan`): what ``--primary-only`` leaves out (the max-LR brackets and the
    usable walks where tuned runs lead, an LR sweep). A section that plans one group feeding a
    primary verdict (a curve's warmup study, ``decide:``) stays."""
    plan = designed_plan(plan_manifest(experiment, plan_runs(experiment)))
    primary = {g for e in plan.estimands if e.primary for g in fed_by(e, plan.primary)}
    planned = [g for g in RUN_GROUPS if g.section is not None and g.planned(experiment)]
    needed = {g.section for g in planned if g.name in primary}
    return [s for s in dict.fromkeys(g.section for g in planned) if s not in needed]


def cost_of(ctx: ReportContext) -> Cost:
    """The :class:`Cost` of a report's stored experiment."""
    by_group: dict[str, list[pd.DataFrame]] = {}
    for part in stage_runs(ctx.stored):
        by_group.setdefault(part.group, []).append(part.runs)
    stages = []
    for group, parts in by_group.items():
        runs = pd.concat(parts).drop_duplicates("run_id")
        stages.append(
            StageCost(group, len(runs), _steps(runs), _minutes(runs), feeds(group, ctx.found))
        )
    every = pd.concat([r for parts in by_group.values() for r in parts] or [ctx.stored.runs])
    distinct = every.drop_duplicates("run_id") if len(every) else every
    decided = sum(1 for f in ctx.found.found if f.verdict.decided)
    return Cost(
        stages, len(distinct), _steps(distinct), _minutes(distinct), len(ctx.found.found), decided
    )


ALL = "all"  # cost.csv's last row: the distinct runs of every stage


def cost_table(cost: Cost) -> pd.DataFrame:
    """``cost.csv``: a row per stage (its share of the distinct run-steps, what it feeds), then
    the :data:`ALL` row of the distinct runs."""
    rows = [(s.group, s.runs, s.run_steps, s.run_minutes, "; ".join(s.feeds)) for s in cost.stages]
    rows.append((ALL, cost.runs, cost.run_steps, cost.run_minutes, ""))
    return pd.DataFrame(
        [
            {
                "stage": stage,
                "runs": runs,
                "run_steps": steps,
                "run_minutes": round(minutes, 2),
                "share_of_run_steps": round(steps / cost.run_steps, 4) if cost.run_steps else None,
                "feeds": feeds,
            }
            for stage, runs, steps, minutes, feeds in rows
        ]
    )


def _row(stage: StageCost, total: int) -> str:
    share = f"{stage.run_steps / total:.0%}" if total else "–"
    feeds = ", ".join(stage.feeds) or "no verdict (evidence only)"
    return (
        f"| {stage.group} | {stage.runs} | {stage.run_steps:,} | {share} | "
        f"{stage.run_minutes:.1f} | {feeds} |"
    )


def cost_lines(cost: Cost) -> list[str]:
    """The section's lines: the per-stage table, then the totals and the run-steps per decided
    verdict."""
    per = cost.steps_per_decided
    each = f"{per:,.0f} run-steps per decided verdict" if per else "no verdict decided"
    return [
        "## Cost of the answer",
        "",
        "What each stage trained and which verdicts of the Answer its runs feed (measured on "
        "them, or at the settings they chose); a run counts in the row of the stage that "
        "stored it and of a study that names it, and once in the total (`cost.csv`).",
        "",
        "| stage | runs | run-steps | share | run-minutes | feeds |",
        "| --- | --- | --- | --- | --- | --- |",
        *(_row(stage, cost.run_steps) for stage in cost.stages),
        "",
        f"In all: {cost.runs} distinct runs, {cost.run_steps:,} run-steps, "
        f"{cost.run_minutes:.1f} run-minutes; {cost.decided} of the Answer's {cost.verdicts} "
        f"verdicts decided: {each}.",
        "",
    ]


def section(ctx: ReportContext) -> Section:
    """The Cost of the answer, where the store holds runs of its stages."""
    cost = cost_of(ctx)
    if not cost.stages:
        return Section()
    return Section(cost_lines(cost), {"cost.csv": cost_table(cost)})
