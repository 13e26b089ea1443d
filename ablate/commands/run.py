"""``ablate run`` (every stage of an experiment, or every size of a ``scale:`` file) and
``ablate search`` (the studies alone).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.commands.common import (
    EXIT_OK,
    EXIT_RUN_FAILED,
    UsageError,
    load_with_settings,
    positive,
    print_scaling_summary,
    print_studies,
    warn_impure,
)

if TYPE_CHECKING:
    from rich.console import Console

    from ablate.core.experiment import Experiment


def _load(args: argparse.Namespace) -> Experiment:
    """The experiment ``run`` or ``search`` trains, with ``--backend``, ``--launcher``,
    ``--set``, ``--seeds`` and ``--primary-only`` applied, once ``--workers`` and ``--threads``
    are checked."""
    positive(args.workers, "--workers")
    positive(args.threads, "--threads")
    return load_with_settings(args, args.backend, args.launcher)[0]


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    """Run every stage of an experiment (:mod:`ablate.launch.pipeline`) and print the outcome."""
    from ablate.launch.pipeline import run_experiment

    experiment = _load(args)
    warn_impure(experiment, console)
    if experiment.scale is not None:
        return _run_scaled(args, experiment, console)
    result = run_experiment(
        experiment,
        args.results_dir,
        args.report_dir,
        args.workers,
        args.threads,
        args.storage,
        console,
    )
    print_studies(result.studies, console)
    table = (result.report_dir / "variants.md").read_text(encoding="utf-8")
    console.print(table, markup=False, highlight=False, soft_wrap=True)
    state = "" if result.report_rebuilt else " (up to date)"
    console.print(
        f"results: {result.folder.path}\nreport:  {result.report_dir / 'report.md'}{state}"
    )
    if result.missing:
        console.print(
            f"{len(result.missing)} planned run(s) not done (failed, or still trained by "
            f"another process): see {result.report_dir / 'report.md'}",
            markup=False,
        )
    return EXIT_RUN_FAILED if result.missing else EXIT_OK


def _run_scaled(args: argparse.Namespace, experiment: Experiment, console: Console) -> int:
    """``ablate run`` of a file with a ``scale:`` section: every size, then the scaling report."""
    from ablate.launch.scale import run_scaled

    result = run_scaled(
        experiment,
        args.results_dir,
        args.report_dir,
        args.workers,
        args.threads,
        args.storage,
        console,
    )
    print_scaling_summary(result.report, console)
    if result.missing:
        console.print(f"{len(result.missing)} planned run(s) not done: {'; '.join(result.missing)}")
    return EXIT_RUN_FAILED if result.missing else EXIT_OK


def cmd_search(args: argparse.Namespace, console: Console) -> int:
    """Run (or continue) the experiment's search and max-LR studies."""
    from ablate.launch.backends import start_trainer_early, studies_use_a_pool
    from ablate.launch.pipeline import Context, run_studies_only

    experiment = _load(args)
    if experiment.scale is not None:
        raise UsageError(f"{args.experiment}: has a scale: section; run it with ablate run")
    if experiment.search is None and experiment.max_lr is None:
        raise UsageError(f"{args.experiment}: has no search: or max_lr: section to run")
    start_trainer_early(experiment, args.workers, studies_use_a_pool(experiment))
    places = (args.results_dir, Path("reports"))
    ctx = Context(experiment, *places, args.workers, args.threads, args.storage, console)
    print_studies(run_studies_only(ctx), console)
    return EXIT_OK
