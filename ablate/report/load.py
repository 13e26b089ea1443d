"""What the store holds of an experiment, read once for the report: plan, runs, curves, studies.

The manifest says which runs are planned and in which stage (group); :func:`missing_runs` words
the state of every planned run that has no result, so a partial experiment reports honestly.
Each seed's divergence bracket spans what its probes found and what every stored run of its
probes' family places it (:func:`stored_divergence`): a run that diverged below the probes'
bracket widens it down to there, and the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pandas as pd

from ablate.core import store
from ablate.core.boundary import SeedBoundary, edge_of_points
from ablate.core.early_stop import HELD_GROUPS
from ablate.core.folders import ExperimentFolder
from ablate.core.jobs import read_jobs
from ablate.core.manifest import Manifest
from ablate.core.studies import StoredStudies
from ablate.report.analysis import column


@dataclass(frozen=True)
class StoredExperiment:
    """What the store holds of an experiment: its plan, runs, main-run metrics, studies."""

    manifest: Manifest
    runs: pd.DataFrame  # every planned run with a result (main and sweep)
    main: pd.DataFrame  # the main variant x seed runs (the shared-LR A/B)
    tuned: pd.DataFrame  # the tuned A/B: each variant at its best search settings
    crossover: pd.DataFrame  # each variant at the baseline's tuned settings and vice versa
    metrics: pd.DataFrame  # per-step metrics of the main runs
    tuned_metrics: pd.DataFrame  # per-step metrics of the tuned runs (the leading comparison)
    probes: pd.DataFrame  # probe rows of the main runs
    studies: StoredStudies  # stability.json, divergence brackets from every stored run
    missing: list[str]  # planned runs without a result, with their state
    convert: pd.DataFrame  # the convert: runs (continued and converted)
    convert_metrics: pd.DataFrame  # their per-step metrics
    inference: pd.DataFrame  # ablate bench --inference's table, if it was stored here
    configs: dict[str, dict]  # run id -> its stored config.json, for the main runs
    stored_runs: pd.DataFrame  # every finished run in the folder, planned or not (studies' too)
    divergence_moved: list[str] = field(default_factory=list)  # brackets the stored runs widened
    jobs: pd.DataFrame = field(default_factory=pd.DataFrame)  # each ``ablate run``'s wall time
    curve_evals: pd.DataFrame = field(default_factory=pd.DataFrame)  # the curve runs' evaluations
    usable_evals: pd.DataFrame = field(default_factory=pd.DataFrame)  # the walks' evaluations


def load_experiment_results(folder: ExperimentFolder) -> StoredExperiment:
    """Read the manifest, the planned runs' summaries, metrics and probes, and stability.json."""
    manifest = store.read_manifest(folder)
    runs = stored_runs = store.load_summaries(folder)
    planned = {r.run_id for r in manifest.runs}
    main_ids = manifest.group_ids("main")
    if planned:
        runs = runs[runs["run_id"].isin(planned)]
    main = runs[runs["run_id"].isin(main_ids)] if main_ids else runs
    studies, moved = stored_divergence(
        store.read_studies(folder).in_order(manifest.variants), stored_runs
    )
    tuned = runs[runs["run_id"].isin(manifest.group_ids("tuned"))]
    convert = runs[runs["run_id"].isin(manifest.group_ids("convert"))]
    return StoredExperiment(
        manifest=manifest,
        runs=runs,
        main=main,
        tuned=tuned,
        crossover=runs[runs["run_id"].isin(manifest.group_ids("crossover"))],
        metrics=store.load_metrics(folder, main),  # the main and tuned runs' curves are drawn
        tuned_metrics=store.load_metrics(folder, tuned) if len(tuned) else pd.DataFrame(),
        probes=store.load_probes(folder, main),
        studies=studies,
        divergence_moved=moved,
        missing=missing_runs(folder, manifest, runs),
        convert=convert,
        convert_metrics=store.load_metrics(folder, convert) if len(convert) else pd.DataFrame(),
        inference=folder.read_inference(),
        configs=_configs(folder, main),
        stored_runs=stored_runs,
        jobs=read_jobs(folder.jobs),
        curve_evals=evaluations(folder, runs[runs["run_id"].isin(manifest.group_ids("curve"))]),
        usable_evals=evaluations(folder, runs[runs["run_id"].isin(manifest.group_ids("usable"))])
        if manifest.walk_hold
        else pd.DataFrame(),
    )


EVAL_COLUMNS = ["run_id", "variant", "seed", "lr", "step", "val_loss"]


def evaluations(folder: ExperimentFolder, runs: pd.DataFrame) -> pd.DataFrame:
    """Every evaluation of ``runs``: run id, variant, seed, peak LR, step and val loss."""
    metrics = store.load_metrics(folder, runs) if len(runs) else pd.DataFrame()
    if "val_loss" not in metrics:
        return pd.DataFrame(columns=EVAL_COLUMNS)
    found = metrics.dropna(subset=["val_loss"]).drop(columns="lr")  # the step's scheduled LR
    found = found.rename(columns={"peak_lr": "lr"})
    return found[EVAL_COLUMNS].reset_index(drop=True)


def _configs(folder: ExperimentFolder, runs: pd.DataFrame) -> dict[str, dict]:
    found = {rid: folder.run(rid).read_config() for rid in runs["run_id"]} if len(runs) else {}
    return {rid: config for rid, config in found.items() if config is not None}


def missing_runs(folder: ExperimentFolder, manifest: Manifest, runs: pd.DataFrame) -> list[str]:
    """'variant seed=N [group lr] (state)' for every planned run without a result, each once."""
    have = set(runs["run_id"]) if len(runs) else set()
    missing: dict[str, str] = {}
    for r in manifest.runs:
        if r.run_id in have or r.run_id in missing:
            continue
        group = r.group
        if group == "main":
            where = ""
        elif group in ("convert", "tuned", "crossover"):
            where = f" ({group})"
        else:
            where = f" ({group}, lr={r.lr:.3g})"
        state = store.pending_state(folder.run(r.run_id))
        missing[r.run_id] = f"{r.variant} seed={r.seed}{where}: {state}"
    return list(missing.values())


def unigram_floor(runs: pd.DataFrame) -> float | None:
    """The corpus's unigram cross-entropy as the runs recorded it (None before it was)."""
    floor = column(runs, "unigram_loss").dropna()
    return float(floor.iloc[0]) if len(floor) else None


def stored_divergence(
    studies: StoredStudies, runs: pd.DataFrame
) -> tuple[StoredStudies, list[str]]:
    """The studies with every seed's divergence bracket spanning its probes' and the one every
    stored run of its probes' family at any LR and warmup places (one held short at a stage's
    step counted as not diverged: no committed real run diverged after step 32)
    (:func:`ablate.core.boundary.edge_of_points`: the first diverged LR above its lowest run
    that did not diverge, the largest that did not below it); and, in words, each bracket
    that this widened."""
    if runs.empty or "family" not in runs:
        return studies, []
    ended = runs["status"].isin(["finished", "diverged"])
    stages = runs["group"] if "group" in runs else pd.Series("", index=runs.index)
    held = (runs["status"] == "pruned") & stages.isin(HELD_GROUPS)  # did not diverge
    judged = runs[ended | held]
    found, moved = {}, []
    for variant, result in studies.max_lr.items():
        families = set(runs.loc[runs["run_id"].isin(result.run_ids), "family"])
        mine = judged[judged["family"].isin(families)]
        bounds = []
        for probed in result.divergence_bounds:
            rows = mine[mine["seed"] == probed.seed]
            statuses = zip(rows["lr"], rows["status"], strict=True)
            points = [(float(lr), status != "diverged") for lr, status in statuses]
            bound = spanned(probed, edge_of_points(probed.seed, points), points)
            if (bound.last_stable, bound.first_unstable) != (
                probed.last_stable,
                probed.first_unstable,
            ):
                moved.append(
                    f"{variant} seed {probed.seed} {bracket_text(probed)} → {bracket_text(bound)}"
                )
            bounds.append(bound)
        found[variant] = replace(result, divergence_bounds=bounds)
    return replace(studies, max_lr=found), moved


def spanned(
    probed: SeedBoundary, stored: SeedBoundary, points: list[tuple[float, bool]]
) -> SeedBoundary:
    """A seed's divergence bracket wide enough for what its probes found and for every stored
    run (``points``: LR, did not diverge): a run that diverged below the probes' bracket
    (:func:`ablate.core.boundary.edge_of_points` places the edge there) widens it down; one
    that did not diverge above it widens it up to the first LR that diverged above that run
    (none: no upper end). Where they disagree the edge lies somewhere between, and the width
    widens the variant's interval."""
    lows = [e for e in (probed.last_stable, stored.last_stable) if e is not None]
    high = probed.first_unstable
    survived = [lr for lr, ok in points if ok]
    if high is not None and survived and max(survived) > high:
        above = [lr for lr, ok in points if not ok and lr > max(survived)]
        high = min(above, default=None)
    elif high is not None and stored.first_unstable is not None:
        high = max(high, stored.first_unstable)
    return SeedBoundary(probed.seed, min(lows, default=None), high, probed.probes)


def bracket_text(bound: SeedBoundary) -> str:
    """``[0.648, 0.707]`` (a missing end: ``–``)."""
    ends = (bound.last_stable, bound.first_unstable)
    return "[" + ", ".join("–" if e is None else f"{e:.3g}" for e in ends) + "]"
