"""The commands that read a results folder: ``ablate status`` and ``ablate report``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.commands.common import EXIT_OK, UsageError, print_scaling_summary

if TYPE_CHECKING:
    from rich.console import Console


def _check_results_folder(results: Path) -> None:
    """Raise unless ``results`` is an experiment's results folder (or a scaled one's)."""
    from ablate.core import store
    from ablate.core.folders import ExperimentFolder

    if not results.is_dir():
        raise UsageError(
            f"{results}: results folder not found "
            "(give results/<experiment>, as written by ablate run)"
        )
    folder = ExperimentFolder(results)
    if not (store.is_experiment(folder) or folder.is_scaled()):
        raise UsageError(
            f"{results}: holds no experiment.json and no run folders; "
            "give results/<experiment>, as written by ablate run"
        )


def _one_experiment(results: Path) -> Path:
    """``results`` itself, or where it is a results root (``--results-dir``) holding exactly
    one experiment's folder, that folder; a root holding several is an error naming them."""
    from ablate.core import store
    from ablate.core.folders import ExperimentFolder

    folder = ExperimentFolder(results)
    if not results.is_dir() or store.is_experiment(folder) or folder.is_scaled():
        return results
    held = sorted(
        p for p in results.iterdir() if p.is_dir() and store.is_experiment(ExperimentFolder(p))
    )
    if len(held) == 1:
        return held[0]
    if len(held) > 1:
        names = ", ".join(str(p) for p in held)
        raise UsageError(f"{results}: holds {len(held)} experiments; give one of: {names}")
    return results


def cmd_status(args: argparse.Namespace, console: Console) -> int:
    """Print where an experiment's runs stand, per stage (:mod:`ablate.launch.status`)."""
    from ablate.core.folders import ExperimentFolder
    from ablate.launch.status import status_lines

    results = _one_experiment(args.results)
    _check_results_folder(results)
    for line in status_lines(ExperimentFolder(results)):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return EXIT_OK


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    """Rebuild the report of one experiment's results folder."""
    from ablate.core import store
    from ablate.core.folders import ExperimentFolder
    from ablate.report.builder import build_report

    _check_results_folder(args.results)
    folder = ExperimentFolder(args.results)
    if folder.is_scaled():
        from ablate.report.builder import build_scaling_report

        path = build_scaling_report(folder, args.out or Path("reports") / args.results.name)
        print_scaling_summary(path, console)
        return EXIT_OK
    out = args.out or store.remembered_report_dir(folder)
    out = out or Path("reports") / args.results.name
    report = build_report(folder, out)
    console.print(report.table_markdown, markup=False, highlight=False, soft_wrap=True)
    if report.missing:
        console.print(f"incomplete: {len(report.missing)} planned run(s) have no result yet")
    console.print(f"report: {report.markdown}, {report.html}")
    return EXIT_OK
