"""What the Slurm controller knows of its tasks: each job's state from ``squeue``
(:func:`job_states`; ``sacct`` needs accounting, which many clusters lack), the task that took
each run (:class:`Submitted`, a file per run under ``.slurm/by-run/``), and what became of a run
as one typed :class:`Outcome` (done, to retry, failed), read from the task's result, the store
and the job's state and log (:func:`job_outcome`); where submitit keeps the tasks' files
(:func:`task_logs`) and sbatch's own line when it refuses a job (:func:`sbatch_error`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ablate.core.cluster import SlurmConfig
from ablate.core.folders import ExperimentFolder, read_json, write_json_atomic
from ablate.core.record import RunRecord

ACTIVE = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD"}
    | {"REQUEUE_FED", "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "RESV_DEL_HOLD"}
)


RETRIED = frozenset({"CANCELLED", "PREEMPTED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"})


GONE = "GONE"  # squeue no longer lists the job (it ended more than MinJobAge ago)


SETUP_FAILED = frozenset({"FAILED", "OUT_OF_MEMORY"})


class Ending(Enum):
    """How a run's time with the Slurm tasks ended."""

    DONE = "done"  # stored
    RETRY = "retry"  # its task ended without storing it (cancelled, preempted, gone): queue again
    FAILED = "failed"  # raised, or its task failed: a retry would not mend it


@dataclass(frozen=True)
class Outcome:
    """What became of one run: its ending, with the stored record (done) or why (the others)."""

    ending: Ending
    record: RunRecord | None = None
    why: str = ""

    @classmethod
    def done(cls, record: RunRecord) -> Outcome:
        return cls(Ending.DONE, record)

    @classmethod
    def retry(cls, why: str) -> Outcome:
        return cls(Ending.RETRY, why=why)

    @classmethod
    def failed(cls, why: str) -> Outcome:
        return cls(Ending.FAILED, why=why)


def job_states(job_ids: Iterable[str]) -> dict[str, str]:
    """Each job's (or array task's) state as ``squeue`` shows it, :data:`GONE` for one it no
    longer lists; jobs whose state could not be read this time are left out."""
    wanted = sorted(set(job_ids))
    if not wanted:
        return {}
    arrays = sorted({job.split("_")[0] for job in wanted})
    found = subprocess.run(
        ["squeue", "--noheader", "--states=all", "--array", "--format=%i|%T"]
        + [f"--jobs={','.join(arrays)}"],
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        if "Invalid job id" in found.stderr:  # none of them is known any more
            return dict.fromkeys(wanted, GONE)
        return {}  # the controller is busy or restarting: ask again next time
    listed = dict(line.split("|", 1) for line in found.stdout.split() if "|" in line)
    return {job: listed.get(job, GONE).split()[0] for job in wanted}


@dataclass
class Submitted:
    """One run's task: its job id, the run's attempt (1 = first queued), submitit's folder,
    the run's stage (group), and the task's slot and GPU that took it."""

    run_id: str
    job_id: str
    attempt: int
    folder: str
    group: str = "?"
    slot: int = 0  # which of the task's slots took it (runtime.runs_per_device)
    gpu: str | None = None  # the GPU that slot sees, where the task has several slots

    def job(self) -> Any:
        """The submitit job (for its result file and log)."""
        from submitit import SlurmJob

        return SlurmJob(folder=self.folder, job_id=self.job_id)


def recorded_jobs(folder: ExperimentFolder, run_ids: Iterable[str]) -> dict[str, Submitted]:
    """The task that last took each of these runs, where one did."""
    found = {rid: read_json(folder.slurm_job(rid)) for rid in run_ids}
    return {rid: Submitted(**entry) for rid, entry in found.items() if entry}


def submitted_jobs(folder: ExperimentFolder) -> dict[str, Submitted]:
    """Every run's last recorded job."""
    records = sorted(folder.slurm_jobs.glob("*.json"))
    return recorded_jobs(folder, (path.stem for path in records))


def record_jobs(folder: ExperimentFolder, submitted: list[Submitted]) -> None:
    """Record each run's task (a file per run, written whole)."""
    for job in submitted:
        path = folder.slurm_job(job.run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, vars(job))


def job_outcome(submitted: Submitted, state: str, folder: ExperimentFolder) -> Outcome:
    """What became of a run whose task ended: done (the task's result or the store has it), to
    retry (its task was cancelled, preempted or is gone) or failed (it raised, or its task
    failed)."""
    job = submitted.job()
    if job.paths.result_pickle.exists():
        try:
            result = job.result()
        except Exception as exc:  # submitit's FailedJobError: the task's traceback inside
            return Outcome.failed(f"job {submitted.job_id} raised: {raised_line(exc)}")
        if submitted.run_id in result:
            found: Outcome = result[submitted.run_id]
            if found.ending is Ending.DONE:
                return found
            return Outcome.failed(f"job {job.job_id} raised: {found.why}")
    record = folder.run(submitted.run_id).read_record()
    if record is not None:  # stored before its task was cut
        return Outcome.done(record)
    if state in RETRIED or state == GONE:
        return Outcome.retry(f"job {submitted.job_id} {state.lower()}")
    return Outcome.failed(f"job {submitted.job_id} {state.lower()}: {log_tail(job)}")


def last_line(text: str) -> str:
    """The last non-empty line of a traceback or log."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"


TRACE_RULE = "-" * 22  # submitit's FailedJobError puts the task's traceback between two


def raised_line(error: Exception) -> str:
    """The exception line of a task's traceback, out of submitit's FailedJobError."""
    parts = str(error).split(TRACE_RULE)
    return last_line(parts[1] if len(parts) >= 3 else str(error))


def log_tail(job: Any) -> str:
    """The last line of a job's log, or where to look."""
    for path in (job.paths.stderr, job.paths.stdout):
        if path.exists() and path.stat().st_size:
            return f"{last_line(path.read_text(errors='replace'))} (log: {path})"
    return f"no log (expected at {job.paths.stdout})"


def reported_step(folder: ExperimentFolder, run_id: str) -> tuple[int, float] | None:
    """The last (step, train loss) a running task reported, if any."""
    found = read_json(folder.run(run_id).progress)
    return (int(found["step"]), float(found["loss"])) if found else None


def queue_group(folder: ExperimentFolder, run_id: str) -> str:
    """A run's stage as its folder's config says (``?`` before it is written)."""
    return str((read_json(folder.run(run_id).config) or {}).get("group", "?"))


def task_logs(folder: ExperimentFolder, config: SlurmConfig) -> Path:
    """Where submitit keeps each task's script, pickles and log (``%j``: the job id)."""
    logs = Path(config.log_dir) if config.log_dir else folder.slurm_logs
    return logs / "%j"


def sbatch_error(exc: Exception) -> str:
    """sbatch's own error line out of submitit's exception text."""
    lines = [line.strip() for line in str(exc).splitlines() if "error" in line.lower()]
    return lines[-1] if lines else last_line(str(exc))
