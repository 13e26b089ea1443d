"""The staged protocol of one experiment, callable from Python: ``run_experiment(path)``.

Stages, in order (each one only those the file configures):

1. **shared** — the shared-LR A/B: every variant x seed at the base's LR and warmup, and the
   LR sweep;
2. **search** — an Optuna study per variant over LR x warmup, on the search seed (by default
   one above the largest of ``seeds``, so the final comparison is not scored on the noise it
   was selected on);
3. **curve** — every variant's final loss along a lattice of LRs on curve seeds apart from
   the final ones, grown at an edge, each variant's optimum, and its warmup study there
   (:mod:`ablate.launch.curve`);
4. **tuned** — the tuned A/B: every variant at its own best (LR, warmup) from the search, or
   at its curve's optimum LR with the warmup study's best, on the experiment's seeds,
   matched init and batch order as in the shared A/B;
5. **decide** — with ``decide:``, seeds added to the leading comparison (tuned, else shared)
   until the report's verdict on each of its comparisons is reached (:mod:`ablate.launch.decide`);
6. **crossover** — on the tuned A/B's seeds, each variant at the baseline's tuned (LR, warmup)
   and the baseline at each variant's, so every tuned Δ is also measured at a shared setting
   (:func:`ablate.core.plan.plan_crossover`; the report says when it depends on the LR);
7. **usable** — with ``max_lr.within`` and a tuned optimum, each variant's usable-LR boundary
   walked up from its optimum on the max-LR seeds (:mod:`ablate.launch.usable`);
8. **max_lr** — the largest stable LR per variant, bracketed seed by seed, then held against
   every other stored run of the variant at the same budget
   (:func:`ablate.launch.boundaries.check_boundaries`);
9. **studies** — the search and max-LR studies' results recorded (``stability.json``);
10. **convert** — continued training of the finished source runs, as stored and norm-swapped;
11. **job** — this invocation's wall time, runs and machine load stored (``jobs.jsonl``);
12. **report** — rebuilt from the store (skipped when it is up to date).

:data:`STAGES` is that list, in order, each a :class:`ablate.launch.context.Stage`: when it is
wanted and what it runs, given one :class:`ablate.launch.context.Context` (the experiment, the
executor, the results folder and the plan so far, which each stage updates). A stage only
decides which RunSpecs it needs; every run of every stage goes through the one executor the
context carries (:class:`ablate.launch.execute.Executor`: the local trainer or the simulator,
here or wherever the launcher sends runs: :mod:`ablate.launch.launchers`). The CLI parses and
prints; everything else is here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from ablate.core import store
from ablate.core.experiment import Experiment
from ablate.core.folders import ExperimentFolder
from ablate.core.load import load_experiment
from ablate.core.plan import (
    RunSpec,
    plan_convert,
    plan_crossover,
    plan_runs,
    plan_sweep,
    plan_tuned,
)
from ablate.core.stability import (
    criterion_text,
)
from ablate.core.stages import planned_groups, study_runs
from ablate.core.studies import (
    BoundaryResult,
    SearchResult,
    StoredStudies,
    Studies,
    StudyResult,
)
from ablate.launch.backends import check_what_trains, start_trainer_early
from ablate.launch.boundaries import check_boundaries, stored_stable_starts
from ablate.launch.context import Context, Stage
from ablate.launch.execute import Executor, ready_conversions, split_done
from ablate.launch.job import finish_job, record_job, start_job
from ablate.launch.progress import ExperimentPace, StepsLeft, StudyProgress, pacing
from ablate.launch.workers import sigint_deferred


@dataclass
class PipelineResult:
    """What :func:`run_experiment` did: the planned runs, the studies, the report."""

    experiment: Experiment
    folder: ExperimentFolder
    report_dir: Path
    specs: list[RunSpec]
    studies: Studies
    missing: list[RunSpec]
    report_rebuilt: bool


def run_experiment(
    experiment: Experiment | str | Path,
    results_dir: Path = Path("results"),
    report_dir: Path = Path("reports"),
    workers: int | None = None,
    threads: int | None = None,
    storage: str | None = None,
    console: Console | None = None,
    executor: Executor | None = None,
) -> PipelineResult:
    """Every stage of an experiment (file or loaded) in order; finished runs are reused.
    ``executor`` replaces the one ``runtime.backend`` names (a test's recorder)."""
    if not isinstance(experiment, Experiment):
        experiment = load_experiment(experiment)
    if executor is None:
        start_trainer_early(experiment, workers)
    check_what_trains(experiment, Path(results_dir))
    _check_storage(experiment, Path(results_dir), storage)
    ctx = Context(
        experiment,
        Path(results_dir),
        Path(report_dir),
        workers,
        threads,
        storage,
        console or Console(stderr=True),
        executor,
    )
    ctx.job = start_job(ctx.folder)
    pace = ExperimentPace(ctx.folder, lambda: _steps_to_train(ctx))
    try:
        with pacing(pace):
            return _run_stages(ctx, pace)
    except KeyboardInterrupt:
        record_job(ctx, "interrupted")
        raise
    except Exception:
        record_job(ctx, "failed")
        raise


def _steps_to_train(ctx: Context) -> StepsLeft:
    """What every stage may still train (the estimate's count, which imports torch: called
    at the first progress line, once something trains)."""
    from ablate.launch.estimate import steps_to_train

    return steps_to_train(ctx.experiment, ctx.results_dir)


def _run_stages(ctx: Context, pace: ExperimentPace | None = None) -> PipelineResult:
    """Every stage of :data:`STAGES` that has work, in order, over the context's executor;
    before each that trains, a header: its place among them, and with ``pace`` the whole
    experiment's steps and time left at most."""
    training = training_stages(ctx.experiment)
    for stage in STAGES:
        if stage.wanted(ctx):
            if stage.name in training:
                where = f"stage {training.index(stage.name) + 1} of {len(training)}"
                left = f"; {pace.text()}" if pace is not None else ""
                ctx.say(f"{where}: {TITLES[stage.name]}{left}")
            stage.run(ctx)
    plan = ctx.plan
    _, missing = split_done(plan.specs, ctx.results_dir)  # as stored now, by any process
    return PipelineResult(
        ctx.experiment,
        ctx.folder,
        report_path(ctx),
        plan.specs,
        plan.studies,
        missing,
        plan.rebuilt,
    )


def shared(ctx: Context) -> None:
    """The shared-LR A/B and the LR sweep; the plan starts with them and the convert runs."""
    plan = ctx.plan
    plan.specs = plan_runs(ctx.experiment) + plan_sweep(ctx.experiment)
    plan.continued = plan_convert(ctx.experiment)
    ctx.write_manifest()  # the tuned runs join it once the search chose
    ctx.execute(plan.specs)


def search(ctx: Context) -> None:
    """Every variant's LR x warmup study; its best settings are the tuned A/B's."""
    ctx.plan.studies.search = search_stage(ctx)
    ctx.plan.chosen = ctx.plan.studies.best_settings()


def tuned(ctx: Context) -> None:
    """Every variant at its chosen (LR, warmup) on the experiment's seeds."""
    runs = plan_tuned(ctx.experiment, ctx.plan.chosen)
    ctx.plan.specs += runs
    ctx.write_manifest()
    ctx.execute(runs)


def crossover(ctx: Context) -> None:
    """On the seeds the tuned A/B ended with, each variant at the other's chosen setting."""
    plan = ctx.plan
    seeds = sorted({s.seed for s in plan.specs if s.group == "tuned"})
    runs = plan_crossover(ctx.experiment, plan.chosen, seeds)
    plan.specs += runs
    ctx.write_manifest()
    ctx.execute(runs)


def max_lr(ctx: Context) -> None:
    """Every variant's max stable LR, started where the search found its best."""
    studies = ctx.plan.studies
    studies.max_lr = max_lr_stage(ctx, studies.best_lrs())


def record_studies(ctx: Context) -> None:
    """``stability.json``: the studies' results as they last."""
    write_studies(ctx, ctx.plan.studies)


def convert(ctx: Context) -> None:
    """Continued training of the finished source runs; the convert runs join the plan."""
    ctx.execute(ready_convert(ctx, ctx.plan.continued))
    ctx.plan.specs += ctx.plan.continued


def report(ctx: Context) -> None:
    """The report, rebuilt unless it is up to date."""
    ctx.plan.rebuilt = report_stage(ctx)


def stage_module(name: str) -> Callable[[Context], None]:
    """A stage module's ``run``, imported when the stage runs (decide's loads the report's
    statistics: a file without ``decide:`` never does)."""

    def run(ctx: Context) -> None:
        importlib.import_module(f"ablate.launch.{name}").run(ctx)

    return run


def _configured(section: str) -> Callable[[Context], bool]:
    """Wanted where the experiment has ``section``."""
    return lambda ctx: getattr(ctx.experiment, section) is not None


def _chose(ctx: Context) -> bool:
    """Wanted where a search or curve chose a setting for the tuned A/B."""
    return bool(ctx.plan.chosen)


def _walks(ctx: Context) -> bool:
    """Wanted with ``max_lr.within`` and a tuned optimum to walk from."""
    cfg = ctx.experiment.max_lr
    return cfg is not None and cfg.within is not None and _chose(ctx)


def _has_studies(ctx: Context) -> bool:
    """Wanted where a search or max-LR study ran."""
    return ctx.experiment.search is not None or ctx.experiment.max_lr is not None


# the pipeline, in order: a stage runs where it is wanted at that point of the plan
STAGES: tuple[Stage, ...] = (
    Stage("shared", lambda ctx: True, shared),
    Stage("search", _configured("search"), search),
    Stage("curve", _configured("curve"), stage_module("curve")),
    Stage("tuned", _chose, tuned),
    Stage("decide", _configured("decide"), stage_module("decide")),
    Stage("crossover", _chose, crossover),
    Stage("usable", _walks, stage_module("usable")),
    Stage("max_lr", _configured("max_lr"), max_lr),
    Stage("studies", _has_studies, record_studies),
    Stage("convert", lambda ctx: bool(ctx.plan.continued), convert),
    Stage("job", lambda ctx: True, finish_job),
    Stage("report", lambda ctx: True, report),
)


TITLES = {  # what a stage that trains does, as its header names it
    "shared": "the A/B at the shared LR (and the LR sweep)",
    "search": "the LR x warmup search",
    "curve": "each variant's LR curve and its warmup study",
    "tuned": "the A/B at each variant's tuned settings",
    "decide": "seeds added until the verdicts are reached",
    "crossover": "the cross-over: each variant at the other's settings",
    "usable": "the usable-LR walks",
    "max_lr": "the max stable LR brackets",
    "convert": "the checkpoint conversion",
}


def training_stages(experiment: Experiment) -> list[str]:
    """The stages of :data:`STAGES` that train runs for this file, in pipeline order."""
    planned = {"shared", *planned_groups(experiment)}
    return [s.name for s in STAGES if s.name in TITLES and s.name in planned]


def studies_configured(experiment: Experiment) -> bool:
    """Whether the file has an Optuna study: a search, max-LR probes or a curve."""
    return any(s is not None for s in (experiment.search, experiment.max_lr, experiment.curve))


def _check_storage(experiment: Experiment, root: Path, storage: str | None) -> None:
    """The studies' storage opens, or one line and exit 2 before anything trains (Optuna is
    imported only for a file that has studies)."""
    if studies_configured(experiment):
        from ablate.launch.storage import check_storage_opens

        check_storage_opens(experiment, root, storage)


def search_stage(ctx: Context) -> dict[str, SearchResult]:
    """Run (or continue) every variant's LR x warmup study; ``{variant: summary}``."""
    return _studies(ctx, "search")


def max_lr_stage(ctx: Context, best: dict[str, float]) -> dict[str, BoundaryResult]:
    """Bracket every variant's max stable LR seed by seed and check the brackets against the
    store; each starts at the largest stable LR stored at the probes' budget (inside the
    stable window, however narrow), else at its search's ``best`` LR."""
    runs = store.load_summaries(ctx.folder)
    starts = {**best, **stored_stable_starts(ctx.experiment, runs)}
    found = _studies(ctx, "max_lr", starts)
    return check_boundaries(ctx.experiment, found, store.load_summaries(ctx.folder))


def _studies(
    ctx: Context, kind: str, best: dict[str, float] | None = None
) -> dict[str, StudyResult]:
    """Every variant's study of ``kind`` (Optuna is imported only here: a file without
    studies never loads it); ``{variant: result}``."""
    from ablate.launch.storage import storage_label, storage_url
    from ablate.launch.studies import run_studies, runs_at_once, study_jobs

    url = storage_url(ctx.experiment, ctx.results_dir, ctx.storage)
    at_once = runs_at_once(ctx.experiment, (kind,))
    res = ctx.resources(len(study_jobs(ctx.experiment, (kind,))) * at_once)  # runs at once
    ctx.say(
        f"{kind} studies in {storage_label(url)}: {res.workers} worker(s) x {res.threads} thread(s)"
    )
    total = sum(
        study_runs(ctx.experiment, config, variant)[kind][0]
        for variant, config in ctx.experiment.variants.items()
    )
    with StudyProgress(ctx.console, ctx.folder, kind, total) as progress:
        found = run_studies(ctx.experiment, ctx.executor, url, res, (kind,), progress.say, best)
        return found[kind]


def write_studies(ctx: Context, studies: Studies) -> None:
    """``stability.json`` (:mod:`ablate.core.studies`): the criterion, the storage and every
    study's result as it lasts (what only this process saw is not stored)."""
    from ablate.launch.storage import storage_label, storage_url

    url = storage_url(ctx.experiment, ctx.results_dir, ctx.storage)
    stored = StoredStudies(
        search=studies.search,
        max_lr=studies.max_lr,
        experiment=ctx.experiment.name,
        storage=storage_label(url),
        criterion=criterion_text(ctx.experiment.base.train.stability),
        search_seed=ctx.experiment.search_seed() if ctx.experiment.search else None,
    )
    store.write_studies(ctx.folder, stored)


def run_studies_only(ctx: Context) -> Studies:
    """``ablate search``: the search and max-LR studies without training the A/Bs."""
    _check_storage(ctx.experiment, ctx.results_dir, ctx.storage)
    studies = Studies()
    if ctx.experiment.search is not None:
        studies.search = search_stage(ctx)
    if ctx.experiment.max_lr is not None:
        studies.max_lr = max_lr_stage(ctx, studies.best_lrs())
    write_studies(ctx, studies)
    return studies


def ready_convert(ctx: Context, continued: list[RunSpec]) -> list[RunSpec]:
    """The convert runs whose source finished with stored weights; the others are named."""
    ready, waiting = ready_conversions(continued, ctx.folder)
    for spec, why in waiting:
        ctx.say(f"convert: {spec.variant} seed={spec.seed} skipped: {why}")
    return ready


def report_path(ctx: Context) -> Path:
    """The experiment's report folder."""
    return ctx.report_dir / ctx.experiment.name


def report_stage(ctx: Context) -> bool:
    """Rebuild the report unless it is up to date; whether it was rebuilt."""
    store.remember_report_dir(ctx.folder, report_path(ctx))
    if store.report_is_current(ctx.folder, report_path(ctx)):
        return False
    # scipy and matplotlib only when it is rebuilt; Ctrl-C waits for the import: one that landed
    # inside a C extension's start-up (matplotlib's ft2font) aborted Python at exit (SIGABRT)
    with sigint_deferred():
        from ablate.report.builder import build_report

    build_report(ctx.folder, report_path(ctx))
    return True
