"""``ablate status``: where an experiment's runs stand, per stage, at a glance.

Every run the plan names (``experiment.json``), every study run that is stored, and every run
a launcher holds as a job (the Slurm launcher's ``.slurm/by-run/`` and its queue) is one of:
**done** (a summary with a final status), **failed** (a summary that says so, or a job that
ended without one), **interrupted** (stopped by Ctrl-C or a signal: its summary says so, and a
rerun trains it), **running** or **queued** (its job's state as its launcher reads it, or a
local process that holds it; a run of a task that trains several in turn is running only while
it is claimed), or **not started**. Nothing here writes; it
reads the store and asks each registered launcher (:mod:`ablate.launch.launchers`) for its
jobs. Where a stage waits on jobs it says how many of their tasks are training.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import pandas as pd

from ablate.core import store
from ablate.core.folders import ExperimentFolder, RunFolder, read_json
from ablate.core.stages import STATUS_ORDER
from ablate.launch.launchers import Job, every_launcher

STATES = ("done", "failed", "interrupted", "running", "queued", "not started")


@dataclass(frozen=True)
class RunState:
    """One run's stage (group), state and, under Slurm, its job."""

    run_id: str
    group: str
    state: str
    job: str | None = None


def known_runs(folder: ExperimentFolder, jobs: dict[str, Job]) -> dict[str, str]:
    """Every run the experiment knows of (planned, stored, submitted), by run id: its stage,
    the one that trained it where it is stored (a walk's start that is a tuned run counts as
    tuned, as in the report's cost table), else the first that planned it."""
    runs: dict[str, str] = {}
    for planned in store.read_manifest(folder).runs:
        runs.setdefault(planned.run_id, planned.group)
    for run in folder.runs():
        config = read_json(run.config) or {}
        runs[run.path.name] = str(config.get("group", runs.get(run.path.name, "?")))
    for run_id, job in jobs.items():
        runs.setdefault(run_id, job.group)
    return runs


def submitted(folder: ExperimentFolder) -> tuple[dict[str, Job], str]:
    """Every registered launcher's jobs for the experiment's runs, by run id, and the label of
    the launcher that has some (``Slurm job``)."""
    jobs: dict[str, Job] = {}
    label = "job"
    for each in every_launcher().values():
        found = each.jobs(folder)
        if found:
            jobs.update(found)
            label = each.label
    return jobs, label


def run_states(folder: ExperimentFolder, jobs: dict[str, Job] | None = None) -> list[RunState]:
    """Each known run's state (a submitted run's from its job's state; ``jobs``: as
    :func:`submitted` gives them, read here when not given)."""
    jobs = submitted(folder)[0] if jobs is None else jobs
    found = []
    for run_id, group in known_runs(folder, jobs).items():
        job = jobs.get(run_id)
        state = _state(folder.run(run_id), job.state if job else None)
        found.append(RunState(run_id, group, state, job and job.job_id))
    return found


def _state(run: RunFolder, job_state: str | None) -> str:
    record = run.read_any_record()
    if record is not None and record.status in store.DONE_STATUSES:
        return "done"
    if job_state == "running" and not run.experiment.claim(run.run_id).exists():
        job_state = "queued"  # its task trains another of its runs first
    if job_state in ("queued", "running"):
        return job_state
    if record is not None and record.status == "interrupted":
        return "interrupted"
    if record is not None or job_state is not None:
        return "failed"  # a failed run, or a job that ended without a result
    local = store.pending_state(run)
    return "running" if local.startswith("running") else "not started"


def status_table(states: list[RunState]) -> pd.DataFrame:
    """Runs per stage in each state, and the jobs of those running or queued."""
    frame = pd.DataFrame([vars(s) for s in states], columns=["run_id", "group", "state", "job"])
    table = pd.crosstab(frame["group"], frame["state"]).reindex(columns=list(STATES), fill_value=0)
    live = frame[frame["state"].isin(["running", "queued"]) & frame["job"].notna()]
    arrays = live.groupby("group")["job"].agg(
        lambda ids: ", ".join(sorted({i.split("_")[0] for i in ids}))
    )
    table["jobs"] = arrays.reindex(table.index).fillna("")
    order = sorted(table.index, key=lambda g: (STATUS_ORDER + (g,)).index(g))
    return table.loc[order].rename_axis("stage").reset_index()


class Waiting(NamedTuple):
    """A stage a controller waits on: its runs running and queued, the launcher's label for
    its jobs (``Slurm job``), their arrays (empty where no launcher holds them) and how many
    of their tasks train."""

    stage: str
    running: int
    queued: int
    label: str
    jobs: str
    tasks: int


def waiting_stages(table: pd.DataFrame, states: list[RunState], label: str) -> list[Waiting]:
    """Each stage of ``table`` (:func:`status_table` of ``states``) with runs running or queued
    (``label``: as :func:`submitted` gives it)."""
    waiting = table[(table["running"] + table["queued"]) > 0]
    return [
        Waiting(
            row.stage,
            int(row.running),
            int(row.queued),
            label,
            row.jobs,
            len({s.job for s in states if s.group == row.stage and s.state == "running" and s.job}),
        )
        for row in waiting.itertuples()
    ]


def waiting_line(waiting: Waiting) -> str:
    """``waiting for STAGE: R running, Q queued`` and, under jobs, their arrays and tasks."""
    held = (
        f" ({waiting.label} {waiting.jobs}; {waiting.tasks} task(s) training)"
        if waiting.jobs
        else ""
    )
    return f"waiting for {waiting.stage}: {waiting.running} running, {waiting.queued} queued{held}"


def status_lines(folder: ExperimentFolder) -> list[str]:
    """The table, and what a controller is waiting for."""
    jobs, label = submitted(folder)
    states = run_states(folder, jobs)
    if not states:
        return [f"{folder.path}: no planned or stored runs"]
    table = status_table(states)
    waiting = waiting_stages(table, states, label)
    lines = [table.to_markdown(index=False), *map(waiting_line, waiting)]
    if not waiting:
        lines.append("nothing is running or queued")
    return lines
