"""The report stage: the experiment's report rebuilt from the store, unless it is up to date
(:func:`ablate.core.store.report_is_current`); scipy and matplotlib load only when it is.
"""

from __future__ import annotations

from pathlib import Path

from ablate.core import store
from ablate.launch.context import Context, Stage, always
from ablate.launch.workers import sigint_deferred


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


def run(ctx: Context) -> None:
    """The stage: the report, and whether it was rebuilt, in the plan."""
    ctx.plan.rebuilt = report_stage(ctx)


STAGE = Stage("report", always, run)
