"""What the commands share: their exit codes, the one-line usage error, the checks of
numeric options and ``--set``, and the lines more than one command prints.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from ablate.core.experiment import Experiment
    from ablate.core.studies import Studies


EXIT_OK, EXIT_RUN_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(ValueError):
    """A bad command-line value, as one line."""


def positive(value: int | None, flag: str) -> None:
    if value is not None and value < 1:
        raise UsageError(f"{flag}: got {value}; must be an integer >= 1")


def settings_of(args: argparse.Namespace) -> list[str]:
    """The command line's ``--set KEY=VALUE`` settings, with ``--seeds`` as ``seeds=[...]``."""
    settings = list(args.settings)
    if args.seeds is not None:
        try:
            seeds = [int(v) for v in args.seeds.split(",") if v.strip()]
        except ValueError:
            seeds = []
        if not seeds:
            raise UsageError(f"--seeds: {args.seeds!r}: give comma-separated integers, e.g. 0,1,2")
        settings.append(f"seeds=[{','.join(map(str, seeds))}]")
    return settings


def load_with_settings(
    args: argparse.Namespace, backend: str | None, launcher: str | None = None
) -> tuple[Experiment, list[str]]:
    """The experiment file with the command line's ``--set`` and ``--seeds``, and with
    ``--primary-only`` every section whose stages feed no primary verdict set to null
    (:func:`ablate.report.cost.secondary_sections`); and the settings that made it."""
    from ablate.core.load import load_experiment

    settings = settings_of(args)
    experiment = load_experiment(args.experiment, backend, launcher, settings)
    if not args.primary_only:
        return experiment, settings
    from ablate.report.cost import secondary_sections

    dropped = [f"{section}=null" for section in secondary_sections(experiment)]
    if not dropped:
        return experiment, settings
    settings = settings + dropped
    return load_experiment(args.experiment, backend, launcher, settings), settings


def warn_impure(experiment: Experiment, console: Console) -> None:
    """A warning line per variant that changes more than the norm against the baseline."""
    from ablate.core.overrides import impure_variants, impurity_lines

    baseline = next(iter(experiment.variants))
    for line in impurity_lines(impure_variants(experiment), baseline):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def print_scaling_summary(report: Path, console: Console) -> None:
    """The scaling report's opening (sizes and written summary) and where the rest is."""
    summary = report.read_text(encoding="utf-8").split("\n## ")[0]
    console.print(summary.strip(), markup=False, highlight=False, soft_wrap=True)
    console.print(f"scaling report: {report}")


def print_studies(studies: Studies, console: Console) -> None:
    from ablate.launch.studies import result_lines

    for line in result_lines(studies.search, studies.max_lr):
        console.print(line, markup=False)
