"""The job stage: this invocation's wall time, what it trained and how busy the machine was,
stored as a line of the experiment's ``jobs.jsonl`` (:mod:`ablate.core.jobs`) before the report
is built, so the report's Compute line includes it. A run cut by Ctrl-C or failing part-way is
recorded by :func:`ablate.launch.pipeline.run_experiment` on its way out.
"""

from __future__ import annotations

import os

from ablate.core.folders import ExperimentFolder
from ablate.core.jobs import JobClock, append_job
from ablate.launch.context import Context, Stage, always


def runs_stored(folder: ExperimentFolder) -> int:
    """How many runs of the folder are done (finished, diverged or pruned)."""
    return sum(1 for run in folder.runs() if run.is_done())


def start_job(folder: ExperimentFolder) -> JobClock:
    """The clock of an invocation starting now on ``folder``."""
    return JobClock.start(runs_stored(folder))


def record_job(ctx: Context, outcome: str) -> None:
    """Store this invocation's wall time and what it trained, once: where it trained anything,
    or was cut or failed part-way (its time then counts towards the experiment's); never for
    the simulator, whose time is not the experiment's."""
    runtime = ctx.experiment.base.runtime
    if ctx.job is None or runtime.backend == "simulate":
        return
    chosen = ctx.resources(os.cpu_count() or 1)
    how = (runtime.backend, runtime.launcher, chosen.workers, chosen.threads)
    record = ctx.job.record(runs_stored(ctx.folder), outcome, how)
    ctx.job = None
    if record.runs_trained or outcome != "finished":
        append_job(ctx.folder.jobs, record)


def finish_job(ctx: Context) -> None:
    """The stage: the invocation's record, as finished."""
    record_job(ctx, "finished")


STAGE = Stage("job", always, finish_job)
