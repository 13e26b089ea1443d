"""Before spending: what the runs a store already holds say each planned comparison can detect.

``ablate validate FILE --results-dir DIR`` prints, for every variant against the baseline, from
the matched seeds the store holds (the tuned A/B's when there is one, else the planned
shared-LR runs): the paired SD, the smallest |Δ| those pairs detect at 80% power and the pairs
that ``analysis.min_effect`` needs (:func:`ablate.report.verdict.reach`), against the seeds the
file plans. With fewer than two stored pairs there is nothing to size it from, and it says so.

``ablate validate FILE --simulate`` runs the file's whole design on the simulator instead
(:func:`ablate.launch.expect.simulated_lines`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ablate.core import store
from ablate.core.experiment import Experiment
from ablate.core.folders import ExperimentFolder
from ablate.core.plan import plan_runs
from ablate.core.sequential import decide_seeds
from ablate.report.analysis import matched_differences
from ablate.report.verdict import Reach, reach


def stored_comparison_runs(experiment: Experiment, results_dir: Path) -> tuple[str, pd.DataFrame]:
    """("tuned" or "shared LR", the finished runs of that comparison the store holds)."""
    folder = ExperimentFolder.of(results_dir, experiment.name)
    runs = store.load_summaries(folder) if folder.path.is_dir() else pd.DataFrame()
    if runs.empty:
        return "shared LR", runs
    runs = runs[runs["status"] == "finished"]
    tuned = runs[runs["group"] == "tuned"]
    if len(tuned):
        return "tuned", tuned
    seeds = decide_seeds(experiment) if experiment.decide is not None else experiment.seeds
    planned = {s.run_id for s in plan_runs(experiment, seeds)}  # with the seeds decide: adds
    return "shared LR", runs[runs["run_id"].isin(planned)]


@dataclass(frozen=True)
class ComparisonReach:
    """One planned comparison, ``variant`` − ``baseline``: what its stored pairs detect."""

    variant: str
    baseline: str
    reach: Reach


@dataclass(frozen=True)
class StoredReach:
    """What the stored pairs of ``where`` ("tuned" or "shared LR") detect per comparison, at
    ``min_effect``, against the ``planned_seeds`` the file plans (``max_seeds``: decide:'s
    ceiling; None without decide:)."""

    where: str
    min_effect: float
    planned_seeds: int
    max_seeds: int | None
    comparisons: list[ComparisonReach]


def stored_reach(experiment: Experiment, results_dir: Path) -> StoredReach:
    """Per comparison against the baseline, the reach of the pairs the store holds."""
    where, runs = stored_comparison_runs(experiment, results_dir)
    m = experiment.analysis.min_effect
    variants = list(experiment.variants)
    comparisons = []
    for variant in variants[1:]:
        diffs = matched_differences(runs, variant, variants[0]) if len(runs) else pd.Series()
        found = reach(diffs.to_numpy(dtype=float), m)
        comparisons.append(ComparisonReach(variant, variants[0], found))
    ceiling = experiment.decide.max_seeds if experiment.decide is not None else None
    return StoredReach(where, m, len(experiment.seeds), ceiling, comparisons)


def render_reach(stored: StoredReach) -> list[str]:
    """One line per comparison: what its stored pairs detect and what min_effect needs."""
    m = stored.min_effect
    planned = str(stored.planned_seeds)
    if stored.max_seeds is not None:
        planned += f", up to {stored.max_seeds} with decide:"
    lines = [f"what the stored {stored.where} pairs detect (analysis.min_effect {m:g} nats):"]
    for comparison in stored.comparisons:
        found = comparison.reach
        label = f"  {comparison.variant} − {comparison.baseline}"
        if found.pairs < 2:
            lines.append(f"{label}: {found.pairs} stored pair(s), nothing to size it from yet")
            continue
        lines.append(
            f"{label}: paired SD {found.sd:.4f} over {found.pairs} stored pairs; they detect "
            f"{found.mde:.4f} at 80% power; {found.needed_text(m)} (the file plans {planned})"
        )
    return lines


def reach_lines(experiment: Experiment, results_dir: Path) -> list[str]:
    """:func:`render_reach` of :func:`stored_reach`."""
    return render_reach(stored_reach(experiment, results_dir))
