"""The max-LR stage: every variant's largest stable LR bracketed seed by seed
(:mod:`ablate.launch.max_lr`, an Optuna study per variant), then the brackets held against
the store: every other stored run of a variant at the probes' budget (sweep points, search
trials, curve and main runs, probes) is a judged observation; one on the wrong side of its
seed's bracket is a contradiction, and the same runs give the quality boundary at each of
``max_lr.margins``. The brackets start at the largest stable LR the other stages' planned runs
stored (a rerun's where the first run's did, whatever the workers trained ahead).
With ``max_lr.stop_step`` the probes were held short and bracket only the divergence boundary:
each is then stored as stopped for good (its checkpoint gone), and nothing is held against the
learned-at-all criterion, which they were not trained to measure.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from ablate.core import store
from ablate.core.boundary import edge_of_points, variant_boundary
from ablate.core.experiment import Experiment
from ablate.core.folders import ExperimentFolder
from ablate.core.plan import max_lr_family
from ablate.core.stability import (
    Observation,
    Stop,
    StopKind,
    below_window,
    contradictions,
    verdict_at_margin,
)
from ablate.core.studies import BoundaryResult, MarginBoundary
from ablate.launch.context import Context, Stage, configured


def max_lr_stage(ctx: Context, best: dict[str, float]) -> dict[str, BoundaryResult]:
    """Bracket every variant's max stable LR seed by seed and check the brackets against the
    store; each starts at the largest stable LR the plan's runs stored at the probes' budget
    (inside the stable window, however narrow), else at its search's ``best`` LR."""
    from ablate.launch.studies import stage_studies  # Optuna: only for a file with studies

    runs = store.load_summaries(ctx.folder)
    planned = {spec.run_id for spec in ctx.plan.specs}
    starts = {**best, **stored_stable_starts(ctx.experiment, runs, planned)}
    found = stage_studies(ctx, "max_lr", starts)
    stop_held_probes(ctx.folder, [run_id for result in found.values() for run_id in result.run_ids])
    return check_boundaries(ctx.experiment, found, store.load_summaries(ctx.folder))


def stop_held_probes(folder: ExperimentFolder, run_ids: list[str]) -> None:
    """Every probe run still paused at ``max_lr.stop_step`` stored as stopped there for good
    (pruned, its checkpoint gone: :meth:`ablate.core.folders.RunFolder.stop_paused`); a
    rerun's held probes read it back as their result (:func:`ablate.core.early_stop.result_of`)."""
    for run_id in run_ids:
        run = folder.run(run_id)
        record = run.read_record()
        if record is not None and record.status == "paused":
            reason = Stop(record.steps, StopKind.HELD).reason
            run.stop_paused(replace(record, status="pruned", stopped_reason=reason))


def run(ctx: Context) -> None:
    """The stage: every variant's brackets, started where the search found its best."""
    studies = ctx.plan.studies
    studies.max_lr = max_lr_stage(ctx, studies.best_lrs())


def stored_stable_starts(
    experiment: Experiment, runs: pd.DataFrame, planned: set[str]
) -> dict[str, float]:
    """Per variant, the largest stable LR among its stored runs in the probes' family that the
    other stages planned (``planned``: run ids). Not the probes themselves, so a rerun starts
    where the first run did; not a run the plan does not hold (a walk's point trained ahead on
    a free worker, an earlier plan's run), whose presence depends on the workers and the
    store's history, not on the design."""
    starts = {}
    for variant in experiment.variants:
        stable = [
            o.lr
            for o in observations(runs, variant, max_lr_family(experiment, variant))
            if o.stable and o.group != "max_lr" and o.run_id in planned
        ]
        if stable:
            starts[variant] = max(stable)
    return starts


def observations(runs: pd.DataFrame, variant: str, family: str) -> list[Observation]:
    """Every judged run of the variant in ``family`` (its configuration at the probes' budget,
    any LR and warmup) in the store, as (run id, lr, stable, group, seed)."""
    if runs.empty or "family" not in runs:
        return []
    mine = runs[(runs["variant"] == variant) & (runs["family"] == family) & runs["stable"].notna()]
    return [
        Observation(
            r.run_id, float(r.lr), bool(r.stable), str(r.group), int(r.seed), r.status == "diverged"
        )
        for r in mine.itertuples()
    ]


def check_boundaries(
    experiment: Experiment, found: dict[str, BoundaryResult], runs: pd.DataFrame
) -> dict[str, BoundaryResult]:
    """Each variant's seed brackets held against the store: stored runs of the same variant
    and budget, at any warmup (sweep points, search trials, probes, main runs), on the wrong
    side of their seed's bracket are its contradictions (runs below the stable window did not
    learn yet and are listed apart); the same runs give the quality
    boundary at every ``max_lr.margins`` collapse margin."""
    checked = {}
    for variant, result in found.items():
        if result.held_at is not None:  # divergence brackets alone: the report holds them
            checked[variant] = result  # against the stored runs (ablate.report.load)
            continue
        family = max_lr_family(experiment, variant)
        seen = observations(runs, variant, family)
        against = contradictions(result.seed_bounds, seen)
        margins = margin_boundaries(experiment, variant, result.seeds, family_runs(runs, family))
        checked[variant] = result.checked(len(seen), (against, below_window(seen)), margins)
    return checked


def family_runs(runs: pd.DataFrame, family: str) -> pd.DataFrame:
    """The finished or diverged runs of ``family`` in the store."""
    if runs.empty or "family" not in runs:
        return runs
    return runs[(runs["family"] == family) & runs["status"].isin(["finished", "diverged"])]


def margin_boundaries(
    experiment: Experiment, variant: str, seeds: list[int], runs: pd.DataFrame
) -> list[MarginBoundary]:
    """The quality boundary at each of ``max_lr.margins``: every seed's upper edge among the
    variant's stored ``runs`` judged at that margin (a diverged run fails at any margin)."""
    cfg = experiment.max_lr
    assert cfg is not None
    criterion = experiment.variants[variant].train.stability
    mine = runs[runs["variant"] == variant] if len(runs) else runs
    found = []
    for margin in sorted(set(cfg.margins) | {criterion.final_margin}):
        bounds = []
        for seed in seeds:
            points = [
                (
                    float(r.lr),
                    verdict_at_margin(
                        r.status,
                        r.final_val_loss,
                        (r.initial_loss, r.unigram_loss),
                        criterion,
                        margin,
                    ),
                )
                for r in mine[mine["seed"] == seed].itertuples()
            ]
            bounds.append(edge_of_points(seed, points))
        found.append(MarginBoundary(margin, bounds, variant_boundary(bounds)))
    return found


STAGE = Stage("max_lr", configured("max_lr"), run, "the max stable LR brackets")
