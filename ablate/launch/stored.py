"""What a results folder already holds of a plan, counted as the plan's stages count it.

:func:`stored_counts` counts the stored runs a plan would use, per variant and stage, with the
steps they trained (a run held short at its stop), and which studies have finished;
:func:`stored_of_plan` and :func:`stored_lines` give it per stage as ``ablate validate
--results-dir`` prints it, with the planned runs that would retrain a stored twin. The
estimate (:mod:`ablate.launch.estimate`) prices only what is left, the simulator's design
(:mod:`ablate.launch.expect`) is counted the same way, and the progress bar counts down from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ablate.core import store
from ablate.core.config import RunConfig
from ablate.core.experiment import Experiment
from ablate.core.folders import ExperimentFolder
from ablate.core.overrides import differences
from ablate.core.plan import plan_convert, plan_runs, plan_sweep
from ablate.core.stages import BEFORE_MAX_LR, planned_runs
from ablate.core.studies import StoredStudies

EXACT_GROUPS = ("main", "sweep", "convert")  # planned by id before anything runs
# what a stage's runs vary: LR, warmup and budget, and the step a run is held at (a curve
# point, a probe or a walk point stopped there is the plan's run, trained that far)
STUDY_KEYS = {"train.lr", "train.warmup_steps", "train.tokens", "runtime.pause_step"}
DECIDE_GROUPS = ("tuned", "crossover")  # decide:'s runs on seeds beyond the file's


@dataclass(frozen=True)
class Stored:
    """What a results folder holds of a plan: finished runs per (variant, stage) that the plan
    would use and the steps they trained (a held run's to its stop), and the (variant, stage)
    pairs whose study has finished (the search, the max-LR brackets), which train nothing more
    whatever their estimated count."""

    counts: dict[tuple[str, str], int]
    finished: set[tuple[str, str]]
    steps: dict[tuple[str, str], int] = field(default_factory=dict)

    def remaining(self, variant: str, group: str, planned: int) -> int:
        """The runs of ``planned`` still to train."""
        if (variant, group) in self.finished:
            return 0
        return max(planned - self.counts.get((variant, group), 0), 0)

    def steps_remaining(self, variant: str, group: str, planned: int) -> int:
        """The run-steps of ``planned`` (a stage's, as another store counted them) still to
        train."""
        if (variant, group) in self.finished:
            return 0
        return max(planned - self.steps.get((variant, group), 0), 0)


def stored_counts(experiment: Experiment, results_dir: Path) -> Stored:
    """Finished runs ``results_dir`` holds that the plan would use, per (variant, stage).

    The main, sweep and convert runs count by their planned ids. A study stage's run counts
    where its config differs from its variant's only in LR, warmup and budget (which the
    stages choose as they go) and the step it was held at, under the stage the plan's record
    (``experiment.json``) gives it (a usable walk reuses curve runs; the tuned and cross-over
    runs of seeds beyond the file's are ``decide:``'s), else the stage it was trained for. A
    search or max-LR study is finished when ``stability.json`` has its result and every run it
    names counts; ``decide:`` when the record says why it stopped; and every stage before a
    variant's finished max-LR study. A run held short (``runtime.pause_step``) counts with the
    steps it trained."""
    folder = ExperimentFolder.of(results_dir, experiment.name)
    counts: dict[tuple[str, str], int] = {}
    steps: dict[tuple[str, str], int] = {}

    def count(variant: str, group: str, trained: int) -> None:
        counts[(variant, group)] = counts.get((variant, group), 0) + 1
        steps[(variant, group)] = steps.get((variant, group), 0) + trained

    for spec in plan_runs(experiment) + plan_sweep(experiment) + plan_convert(experiment):
        record = folder.run(spec.run_id).read_record()
        if record is not None:
            count(spec.variant, spec.group, record.steps)
    ours = _study_runs_of_this_plan(experiment, folder)  # run id -> StudyRun
    manifest = store.read_manifest(folder) if folder.path.is_dir() else None
    recorded: dict[str, str] = {}  # the first stage that planned a run (a walk reuses the curve's)
    for entry in manifest.runs if manifest is not None else []:
        if entry.run_id in ours:
            recorded.setdefault(entry.run_id, entry.group)
    for run_id, run in ours.items():
        group = recorded.get(run_id) or run.trained_for
        if group in EXACT_GROUPS:
            continue
        if group in DECIDE_GROUPS and run.seed not in experiment.seeds:
            group = "decide"
        count(run.variant, group, run.steps)
    finished = _finished_studies(folder, set(ours))
    if manifest is not None and (manifest.decide or {}).get("stopped"):
        finished |= {(v, "decide") for v in experiment.variants}
    for variant, group in list(finished):
        if group == "max_lr":
            finished |= {(variant, g) for g in BEFORE_MAX_LR}
    return Stored(counts, finished, steps)


@dataclass(frozen=True)
class StudyRun:
    """A stored run a study stage of the plan may use: its variant, the stage it was trained
    for, its seed and the steps it trained."""

    variant: str
    trained_for: str
    seed: int
    steps: int


def _study_runs_of_this_plan(
    experiment: Experiment, folder: ExperimentFolder
) -> dict[str, StudyRun]:
    """The finished stored runs, by id, whose config differs from their variant's only in
    :data:`STUDY_KEYS`."""
    found = {}
    for run in folder.runs() if folder.path.is_dir() else []:
        stored = run.read_config()
        record = run.read_record() if stored else None
        if record is None:
            continue
        mine = experiment.variants.get(stored.get("variant", ""))
        if mine is None:
            continue
        try:
            changed = set(differences(RunConfig.model_validate(stored["config"]), mine))
        except (KeyError, ValidationError):  # a config no longer valid is no run of this plan
            continue
        if changed <= STUDY_KEYS:
            group = str(stored.get("group", "main"))
            found[run.path.name] = StudyRun(stored["variant"], group, record.seed, record.steps)
    return found


def _finished_studies(folder: ExperimentFolder, usable: set[str]) -> set[tuple[str, str]]:
    """(variant, stage) of the search and max-LR results in ``stability.json`` whose runs are
    all among ``usable``."""
    studies = store.read_studies(folder) if folder.path.is_dir() else StoredStudies()
    return {study for study, ids in studies.run_ids().items() if ids and set(ids) <= usable}


@dataclass(frozen=True)
class StoredOfPlan:
    """What a results folder holds of a plan, per stage in pipeline order: the runs stored
    (``held``) and planned (a study stage's count is its estimate: the studies choose as they
    go), the stages whose study finished, and, per set of keys, how many planned main, sweep or
    convert runs retrain a stored twin (same variant, seed and stage) that differs from them
    only in those keys (``()``: only in the runtime)."""

    folder: Path
    held: dict[str, int]
    planned: dict[str, int]
    finished: frozenset[str]
    retrained: dict[tuple[str, ...], int]


def stored_of_plan(
    experiment: Experiment, results_dir: Path, counts: Stored | None = None
) -> StoredOfPlan:
    """The :class:`StoredOfPlan` of ``experiment`` in ``results_dir`` (``counts``: its
    :func:`stored_counts`, where already read)."""
    folder = ExperimentFolder.of(results_dir, experiment.name)
    counts = counts or stored_counts(experiment, results_dir)
    planned: dict[str, int] = {}
    for variant, cfg in experiment.variants.items():
        for group, (n, _) in planned_runs(experiment, cfg, variant).items():
            planned[group] = planned.get(group, 0) + n
    held = {g: sum(n for (_, group), n in counts.counts.items() if group == g) for g in planned}
    specs = plan_runs(experiment) + plan_sweep(experiment) + plan_convert(experiment)
    todo = [s for s in specs if not folder.run(s.run_id).is_done()]
    twins = _stored_twins(folder)
    retrained: dict[tuple[str, ...], int] = {}
    for spec in todo:
        twin = twins.get((spec.variant, spec.seed, spec.group))
        if twin is not None:
            keys = tuple(differences(RunConfig.model_validate(twin), spec.config))
            retrained[keys] = retrained.get(keys, 0) + 1
    finished = frozenset(g for _, g in counts.finished)
    return StoredOfPlan(folder.path, held, planned, finished, retrained)


def stored_lines(
    experiment: Experiment, results_dir: Path, counts: Stored | None = None
) -> list[str]:
    """:func:`stored_of_plan` in words, as ``ablate validate --results-dir`` prints it: stored
    of planned per stage, then a line per set of keys that makes stored runs train again (so
    that a change that does not alter training, ``train.eval_batches``, is seen to retrain N
    runs)."""
    found = stored_of_plan(experiment, results_dir, counts)
    parts = [
        f"{g} {found.held[g]} (finished)"
        if g in found.finished
        else f"{g} {min(found.held[g], n)} of {n}"
        for g, n in found.planned.items()
        if n
    ]
    lines = [f"stored in {found.folder}, per stage (stored of planned): {', '.join(parts)}"]
    for keys, count in found.retrained.items():
        lines.append(
            f"  {count} planned run(s) retrain a stored run that differs only in "
            f"{', '.join(keys) or 'the runtime'}"
        )
    return lines


def _stored_twins(folder: ExperimentFolder) -> dict[tuple[str, int, str], dict[str, Any]]:
    """The config of each finished stored run by (variant, seed, stage)."""
    twins = {}
    for run in folder.runs():
        stored = run.read_config()
        if stored and run.is_done():
            twins[(stored["variant"], stored["seed"], stored.get("group", "main"))] = stored[
                "config"
            ]
    return twins
