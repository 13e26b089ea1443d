"""The Slurm launcher (``runtime.launcher: slurm``): an :class:`Executor` whose runs are Slurm
jobs, submitted through submitit, into the shared results folder.

A stage's pending runs go out as one job array (:func:`pack`): as many tasks as the array runs
at once (``runtime.slurm.array_parallelism``), each training its share of the runs one after
another in one process, at most ``runs_per_task`` of them (more tasks where there are more
runs), so the seconds a task spends starting Python and importing torch are paid once per task,
not per run, and a stage of hundreds of runs is a few dozen jobs of the queue; a search trial
or a max-LR probe (``obtain``) is one job, waited for. Each task claims and trains (or
simulates) each of its runs through the same executor path as a local run
(:class:`ablate.launch.execute.LocalExecutor` with one worker and
``runtime.slurm.cpus_per_task`` threads, or the simulator), so what it stores is what a local
run stores, and a search trial's evaluations reach its Optuna trial through the experiment's
storage (:class:`ablate.launch.search.PruningWatch`).

Job state is read with ``squeue`` (``sacct`` needs accounting, which many clusters and the
test cluster lack; submitit's own polling uses it). A run's outcome is decided by the store and
its task's result file, in this order:

- its summary, stored (by a task still running its other runs, or one cut after it) or
  returned by the task: done;
- its training raised on the node (outside the run: a data file missing there), or the whole
  task raised: failed once, the exception's last line in the controller's output, not retried;
- the job ended without a result as ``CANCELLED``, ``PREEMPTED``, ``TIMEOUT``, ``NODE_FAIL``,
  ``BOOT_FAIL``, ``DEADLINE`` or left the queue: resubmitted (``runtime.slurm.retries`` times),
  the new task taking over the dead one's claim and resuming the run from its checkpoint
  (:mod:`ablate.training.run`); runs the task had stored are not resubmitted;
- it ended ``FAILED`` or ``OUT_OF_MEMORY`` without a result (a setup line that failed, a node
  that cannot run the job): failed once, with the end of its log.

Every submission is recorded in ``<results>/<experiment>/.slurm/by-run/<run-id>.json``: a
controller started again adopts the jobs of its pending runs that are still queued or running
instead of submitting them twice. Stopping the controller (Ctrl-C) leaves its jobs running.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from rich.console import Console

from ablate.core.cluster import SlurmConfig
from ablate.core.config import ConfigError, RuntimeConfig
from ablate.core.folders import ExperimentFolder, read_json, write_json_atomic
from ablate.core.plan import RunSpec
from ablate.core.record import RunRecord
from ablate.core.store import store_fault_cause
from ablate.launch.backends import backend_executor
from ablate.launch.execute import (
    EvalWatch,
    Executor,
    Obtained,
    ProgressFn,
    Request,
    SayFn,
    obtain_with,
    say_done,
    split_done,
)
from ablate.launch.launchers import Job
from ablate.launch.progress import ProgressBoard
from ablate.launch.search import RunFailedError
from ablate.launch.workers import Resources

ACTIVE = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD"}
    | {"REQUEUE_FED", "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "RESV_DEL_HOLD"}
)
RETRIED = frozenset({"CANCELLED", "PREEMPTED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"})
T = TypeVar("T")
GONE = "GONE"  # squeue no longer lists the job (it ended more than MinJobAge ago)


class SlurmError(RunFailedError):
    """A run's job failed in a way a retry would not mend (its message says why); a search
    trial whose job failed is a failed trial, as one whose run raised."""


TERMINATED = 128 + signal.SIGTERM  # the exit status of a task that Slurm stopped


Outcome = tuple[str, Any]  # ("done", RunRecord), ("retry", why) or ("failed", message)


def run_task(task: Executor, requests: list[Request]) -> dict[str, Outcome]:
    """What one Slurm task does: obtain its runs through ``task`` one after another (claim,
    train, store); each run's ``("done", record)``, or ``("failed", line)`` where obtaining it
    raised (the task goes on with the next run; a store that cannot be written stops it).

    SIGTERM (scancel, preemption, the time limit) stops the run in progress as Ctrl-C stops a
    local one (it keeps its checkpoint), and the task exits at once without a result
    (submitit's own handler would let it run on until Slurm kills it), so the controller
    resubmits the runs it had not stored."""
    signal.signal(signal.SIGTERM, _stop)
    outcomes: dict[str, Outcome] = {}
    for request in requests:
        spec = request.spec
        folder = ExperimentFolder.of(task.root, spec.experiment)
        report = ProgressFile(folder.run(spec.run_id).progress)
        try:
            record = task.obtain(
                spec, request.watch, request.take_over, wait=True, say=print, progress=report
            )
        except KeyboardInterrupt:
            print(f"run {spec.run_id}: stopped by Slurm; the controller resubmits it", flush=True)
            os._exit(TERMINATED)
        except Exception as exc:
            if store_fault_cause(exc) is not None:
                raise
            outcomes[spec.run_id] = ("failed", last_line(f"{type(exc).__name__}: {exc}"))
            continue
        outcomes[spec.run_id] = ("done", record)
    return outcomes


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


PROGRESS_EVERY_S = 2.0  # how often a task writes its step for the controller


@dataclass
class ProgressFile:
    """A task's progress callback: its step and train loss, written to the run's
    ``progress.json`` at most every :data:`PROGRESS_EVERY_S` seconds."""

    path: Path
    written: float = -math.inf

    def __call__(self, step: int, loss: float) -> None:
        now = time.monotonic()
        if now - self.written >= PROGRESS_EVERY_S and self.path.parent.is_dir():
            write_json_atomic(self.path, {"step": step, "loss": loss})
            self.written = now


def reported_step(folder: ExperimentFolder, run_id: str) -> tuple[int, float] | None:
    """The last (step, train loss) a running task reported, if any."""
    found = read_json(folder.run(run_id).progress)
    return (int(found["step"]), float(found["loss"])) if found else None


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
    """One run's job: its id, its attempt (1 = first submission), submitit's folder and the
    run's stage (group)."""

    run_id: str
    job_id: str
    attempt: int
    folder: str
    group: str = "?"

    def job(self) -> Any:
        """The submitit job (for its result file and log)."""
        from submitit import SlurmJob

        return SlurmJob(folder=self.folder, job_id=self.job_id)


def recorded_jobs(folder: ExperimentFolder, run_ids: Iterable[str]) -> dict[str, Submitted]:
    """The last job submitted for each of these runs, where one was."""
    found = {rid: read_json(folder.slurm_job(rid)) for rid in run_ids}
    return {rid: Submitted(**entry) for rid, entry in found.items() if entry}


def submitted_jobs(folder: ExperimentFolder) -> dict[str, Submitted]:
    """Every run's last recorded job."""
    records = sorted(folder.slurm_jobs.glob("*.json"))
    return recorded_jobs(folder, (path.stem for path in records))


def record_jobs(folder: ExperimentFolder, submitted: list[Submitted]) -> None:
    """Record each run's new job (a file per run, written whole)."""
    for job in submitted:
        path = folder.slurm_job(job.run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, vars(job))


def job_outcome(submitted: Submitted, state: str, folder: ExperimentFolder) -> Outcome:
    """What became of a run whose task ended: ``("done", record)``, ``("retry", why)`` or
    ``("failed", message)``."""
    job = submitted.job()
    if job.paths.result_pickle.exists():
        try:
            kind, value = job.result()[submitted.run_id]
        except Exception as exc:  # submitit's FailedJobError: the task's traceback inside
            return "failed", f"job {submitted.job_id} raised: {raised_line(exc)}"
        return (
            (kind, value)
            if kind == "done"
            else ("failed", f"job {submitted.job_id} raised: {value}")
        )
    record = folder.run(submitted.run_id).read_record()
    if record is not None:  # stored before its task was cut
        return "done", record
    if state in RETRIED or state == GONE:
        return "retry", f"job {submitted.job_id} {state.lower()}"
    return "failed", f"job {submitted.job_id} {state.lower()}: {log_tail(job)}"


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


@dataclass
class SlurmExecutor:
    """Runs as Slurm tasks, several to a task (:func:`pack`); ``task`` is what a task runs
    its specs with."""

    imports: ClassVar[tuple[str, ...]] = ()  # its study workers train nothing themselves
    root: Path
    task: Executor
    config: SlurmConfig
    console: Console | None = field(default=None, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "console": None}

    def prepare(self) -> None:
        """Nothing to load here: the jobs train."""

    def obtain(
        self,
        spec: RunSpec,
        watch: EvalWatch | None = None,
        take_over: bool = False,
        wait: bool = False,
        say: SayFn = print,
        progress: ProgressFn | None = None,
    ) -> RunRecord:
        """The stored record of ``spec``, else one job that obtains it, waited for (its
        steps go to the run's progress file, not to ``progress``)."""

        def attempt() -> RunRecord:
            outcomes = self._through_jobs([Request(spec, watch, take_over)], say)
            kind, value = outcomes[spec.run_id]
            if kind != "done":
                raise SlurmError(f"run {spec.run_id}: {value}")
            return value

        return obtain_with(attempt, spec, self.root, wait, say)

    def obtain_all(self, requests: list[Request], say: SayFn = print) -> list[Obtained]:
        """The stored records of the requests' runs, the others as one job array (a task
        each, up to the array's parallelism), waited for."""
        found: dict[str, Obtained] = {}
        pending = []
        for request in requests:
            record = (
                ExperimentFolder.of(self.root, request.spec.experiment)
                .run(request.spec.run_id)
                .read_record()
            )
            if record is None:
                pending.append(request)
            else:
                found[request.spec.run_id] = record
        if pending:
            for run_id, (kind, value) in self._through_jobs(pending, say).items():
                found[run_id] = value if kind == "done" else SlurmError(f"run {run_id}: {value}")
        return [found[request.spec.run_id] for request in requests]

    def run(self, specs: list[RunSpec]) -> list[RunRecord]:
        """Every pending spec as a task of one job array; the records of all."""
        console = self.console or Console(stderr=True)
        done, pending = split_done(specs, self.root)
        say_done(console, len(done), len(pending), self.root)
        if not pending:
            return done
        with ProgressBoard(console, pending) as board:
            requests = [Request(spec) for spec in pending]
            outcomes = self._through_jobs(requests, console.print, board)
        return done + [value for kind, value in outcomes.values() if kind == "done"]

    def _through_jobs(
        self, requests: list[Request], say: SayFn, board: ProgressBoard | None = None
    ) -> dict[str, Outcome]:
        """Submit (or adopt) the requests' tasks and follow them until each run is done or
        failed, resubmitting the lost (taking over their claims); ``{run_id: (kind, record or
        message)}``."""
        specs = [request.spec for request in requests]
        folder = ExperimentFolder.of(self.root, specs[0].experiment)
        by_id = {request.spec.run_id: request for request in requests}
        live = self._adopt(folder, specs, say)
        fresh = [request for request in requests if request.spec.run_id not in live]
        live.update(self._submit(folder, fresh, 1, say))
        outcomes: dict[str, Outcome] = {}
        ended_at: dict[str, float] = {}
        while live:
            time.sleep(self.config.poll_s)
            states = job_states(job.job_id for job in live.values())
            retry: dict[int, list[Request]] = {}
            for run_id, job in list(live.items()):
                state = states.get(job.job_id)
                stored = folder.run(run_id).read_record()
                if (state is None or state in ACTIVE) and stored is None:
                    if state == "RUNNING" and board is not None:
                        if (step := reported_step(folder, run_id)) is not None:
                            board.start(by_id[run_id].spec)  # a packed task's run that began
                            board.update(run_id, *step)
                    continue
                kind, value = ("done", stored) if stored else job_outcome(job, state, folder)
                if (
                    kind == "failed"
                    and time.monotonic() - ended_at.setdefault(run_id, time.monotonic())
                    < self.config.result_wait_s
                ):
                    continue  # its result file may not have reached this node yet
                del live[run_id]
                if kind == "retry" and job.attempt <= self.config.retries:
                    say(f"{value}: resubmitting run {run_id} (retry {job.attempt})")
                    lost = replace(by_id[run_id], take_over=True)
                    retry.setdefault(job.attempt + 1, []).append(lost)
                    continue
                if kind == "retry":
                    kind, value = "failed", f"{value}, after {job.attempt} attempts"
                outcomes[run_id] = (kind, value)
                if board is not None:
                    board.finish(
                        by_id[run_id].spec,
                        value if kind == "done" else None,
                        None if kind == "done" else f"failed: {value}",
                    )
            for attempt, lost in retry.items():
                live.update(self._submit(folder, lost, attempt, say))
        return outcomes

    def _adopt(
        self, folder: ExperimentFolder, specs: list[RunSpec], say: SayFn
    ) -> dict[str, Submitted]:
        """The recorded jobs of these specs that are still queued or running."""
        recorded = list(recorded_jobs(folder, (spec.run_id for spec in specs)).values())
        states = job_states(job.job_id for job in recorded)
        live = {job.run_id: job for job in recorded if states.get(job.job_id) in ACTIVE}
        if live:
            ids = ", ".join(sorted({job.job_id.split("_")[0] for job in live.values()}))
            say(f"following {len(live)} jobs already queued or running (job {ids})")
        return live

    def _submit(
        self, folder: ExperimentFolder, requests: list[Request], attempt: int, say: SayFn
    ) -> dict[str, Submitted]:
        """One job array (one job for one task) of ``requests`` packed into tasks
        (:func:`pack`), each run's task recorded."""
        if not requests:
            return {}
        from submitit.core.utils import FailedJobError  # what a failed sbatch raises

        executor = self._submitit(folder, requests[0].spec.experiment)
        tasks = pack(requests, self.config.array_parallelism, self.config.runs_per_task)
        n = len(tasks)
        try:
            jobs = executor.map_array(run_task, [self.task] * n, tasks)
        except FailedJobError as exc:  # sbatch refused: bad partition, account, limits
            raise ConfigError(
                f"runtime.slurm: sbatch refused the job: {sbatch_error(exc)}"
            ) from None
        logs = str(executor.folder)
        submitted = [
            Submitted(request.spec.run_id, job.job_id, attempt, logs, request.spec.group)
            for task, job in zip(tasks, jobs, strict=True)
            for request in task
        ]
        record_jobs(folder, submitted)
        array = submitted[0].job_id.split("_")[0]
        say(f"submitted {len(requests)} run(s) to Slurm as job {array} ({n} task(s))")
        return {job.run_id: job for job in submitted}

    def _submitit(self, folder: ExperimentFolder, experiment: str) -> Any:
        """A submitit executor with this section's sbatch parameters."""
        import submitit

        cfg = self.config
        logs = Path(cfg.log_dir) if cfg.log_dir else folder.slurm_logs
        executor = submitit.SlurmExecutor(folder=logs / "%j", max_num_timeout=0)
        optional = {
            "partition": cfg.partition,
            "account": cfg.account,
            "qos": cfg.qos,
            "gpus_per_node": cfg.gpus_per_task or None,
            "mem": f"{cfg.mem_gb:g}GB" if cfg.mem_gb else None,
        }
        executor.update_parameters(
            job_name=f"ablate-{experiment}",
            time=cfg.time_min,
            cpus_per_task=cfg.cpus_per_task,
            array_parallelism=cfg.array_parallelism,
            setup=list(cfg.setup),
            additional_parameters=dict(cfg.sbatch),
            stderr_to_stdout=True,
            **{key: value for key, value in optional.items() if value is not None},
        )
        return executor


def pack(specs: list[T], parallel: int, most: int) -> list[list[T]]:
    """``specs`` (runs, or requests for runs) as the tasks of one array: as many tasks as run
    at once (``parallel``, or one per spec where there are fewer), more where a task would hold
    over ``most`` runs; runs in order, the tasks' sizes differing by one at most. Packing never
    costs parallelism: a stage with fewer runs than free slots still trains every run at
    once."""
    n = len(specs)
    tasks = min(n, max(parallel, math.ceil(n / most)))
    size, extra = divmod(n, tasks)
    bounds = [i * size + min(i, extra) for i in range(tasks + 1)]
    return [specs[bounds[i] : bounds[i + 1]] for i in range(tasks)]


def sbatch_error(exc: Exception) -> str:
    """sbatch's own error line out of submitit's exception text."""
    lines = [line.strip() for line in str(exc).splitlines() if "error" in line.lower()]
    return lines[-1] if lines else last_line(str(exc))


class SlurmLauncher:
    """``runtime.launcher: slurm``: each stage's runs as Slurm jobs (this module)."""

    label = "Slurm job"

    def executor(
        self,
        runtime: RuntimeConfig,
        results_dir: Path,
        workers: int | None,
        threads: int | None,
        console: Console | None,
    ) -> Executor:
        """A :class:`SlurmExecutor` whose tasks run the backend's executor with one worker of
        ``runtime.slurm.cpus_per_task`` threads, at the results folder's absolute path (the
        command line's workers and threads are this machine's: not the tasks')."""
        task = backend_executor(runtime, results_dir.resolve(), 1, runtime.slurm.cpus_per_task)
        return SlurmExecutor(results_dir, task, runtime.slurm, console)

    def resources(self, runtime: RuntimeConfig, jobs: int) -> Resources:
        """Every study at once (each waits on its trials' jobs), up to the array's
        parallelism, with one thread."""
        return Resources(max(1, min(jobs, runtime.slurm.array_parallelism)), 1)

    def jobs(self, folder: ExperimentFolder) -> dict[str, Job]:
        """Each run's last recorded job with its state from ``squeue``."""
        submitted = submitted_jobs(folder)
        states = job_states(job.job_id for job in submitted.values())
        return {
            run_id: Job(job.job_id, job.group, _word(states.get(job.job_id)))
            for run_id, job in submitted.items()
        }


def _word(state: str | None) -> str | None:
    """A Slurm state as a launcher's job state: queued, running, ended (None: not read)."""
    if state is None:
        return None
    if state in ACTIVE:
        return "queued" if state == "PENDING" else "running"
    return "ended"


SLURM = SlurmLauncher()
