"""The staged protocol of one experiment, callable from Python: ``run_experiment(path)``.

The stages run in the order of :data:`ablate.launch.stages.STAGES` (the stage map of
docs/architecture.md lists them with the run groups each stores), each only where the file
configures it: the shared-LR A/B and sweep, the search, the curve, the tuned A/B, ``decide:``,
the cross-over, the usable-LR walks, the max-LR brackets, the studies' record, the
conversion, this invocation's job record and the report. Each is a module of
:mod:`ablate.launch.stages` whose docstring says what it does.

:data:`~ablate.launch.stages.STAGES` holds them as :class:`ablate.launch.context.Stage`: when it
is wanted and what it runs, given one :class:`ablate.launch.context.Context` (the experiment,
the executor, the results folder and the plan so far, which each stage updates). A stage only
decides which RunSpecs it needs; every run of every stage goes through the one executor the
context carries (:class:`ablate.launch.execute.Executor`: the local trainer or the simulator,
here or wherever the launcher sends runs: :mod:`ablate.launch.launchers`). The CLI parses and
prints; everything else is here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from ablate.core.experiment import Experiment
from ablate.core.folders import ExperimentFolder
from ablate.core.load import load_experiment
from ablate.core.plan import RunSpec
from ablate.core.studies import Studies
from ablate.launch.backends import start_trainer_early
from ablate.launch.context import Context
from ablate.launch.execute import Executor, split_done
from ablate.launch.preflight import preflight
from ablate.launch.progress import ExperimentPace, StepsLeft, pacing
from ablate.launch.stages import STAGES, training_stages
from ablate.launch.stages.job import record_job, start_job
from ablate.launch.stages.max_lr import max_lr_stage
from ablate.launch.stages.report import report_path
from ablate.launch.stages.search import search_stage
from ablate.launch.stages.studies import write_studies


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
    preflight(experiment, Path(results_dir), storage)
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
                ctx.say(f"{where}: {stage.title}{left}")
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


def run_studies_only(ctx: Context) -> Studies:
    """``ablate search``: the search and max-LR studies without training the A/Bs."""
    preflight(ctx.experiment, ctx.results_dir, ctx.storage)
    studies = Studies()
    if ctx.experiment.search is not None:
        studies.search = search_stage(ctx)
    if ctx.experiment.max_lr is not None:
        studies.max_lr = max_lr_stage(ctx, studies.best_lrs())
    write_studies(ctx, studies)
    return studies
