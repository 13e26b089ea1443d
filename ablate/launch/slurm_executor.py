"""The Slurm controller (:class:`SlurmExecutor`): every run queued for the tasks
(:mod:`ablate.launch.slurm_queue`), enough tasks kept serving the queue (one job array per
submission, through submitit), and each run followed until its :class:`Outcome` is settled,
the lost queued again; the design is in :mod:`ablate.launch.slurm`.
"""

from __future__ import annotations

import atexit
import math
import multiprocessing
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from rich.console import Console

from ablate.core.cluster import SlurmConfig
from ablate.core.early_stop import result_of
from ablate.core.errors import ConfigError
from ablate.core.folders import ExperimentFolder
from ablate.core.plan import RunSpec
from ablate.core.record import RunRecord
from ablate.launch.execute import (
    Executor,
    Obtained,
    ProgressFn,
    Request,
    SayFn,
    obtain_with,
    say_done,
    split_done,
)
from ablate.launch.progress import ProgressBoard
from ablate.launch.search import RunFailedError
from ablate.launch.slurm_jobs import (
    ACTIVE,
    SETUP_FAILED,
    Ending,
    Outcome,
    Submitted,
    job_outcome,
    job_states,
    log_tail,
    queue_group,
    recorded_jobs,
    reported_step,
    sbatch_error,
    task_logs,
)
from ablate.launch.slurm_queue import Queued, RunQueue, task_change
from ablate.launch.slurm_task import serve


class SlurmError(RunFailedError):
    """A run's job failed in a way a retry would not mend (its message says why); a search
    trial whose job failed is a failed trial, as one whose run raised."""


@dataclass
class Followed:
    """The runs one call of the controller follows: each run's request, those a task took
    (``live``), those queued and not yet taken (``waiting``: their attempt), the settled ones'
    outcomes, when each task was seen to end, and the jobs' states as last read (when)."""

    requests: dict[str, Request]
    live: dict[str, Submitted]
    waiting: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    ended_at: dict[str, float] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    read_at: float = -math.inf

    def open(self) -> bool:
        """Whether a run is still queued or training."""
        return bool(self.live or self.waiting)

    def settle(self, run_id: str, outcome: Outcome, board: ProgressBoard | None) -> None:
        """One run's outcome, final: it is followed no more (and its board line ends)."""
        self.live.pop(run_id, None)
        self.waiting.pop(run_id, None)
        self.outcomes[run_id] = outcome
        if board is not None:
            failed = None if outcome.record is not None else f"failed: {outcome.why}"
            board.finish(self.requests[run_id].spec, outcome.record, failed)


@dataclass
class SlurmExecutor:
    """Runs queued for Slurm tasks that each train several
    (:func:`ablate.launch.slurm_task.serve`); ``task`` is what a task runs them with."""

    imports: ClassVar[tuple[str, ...]] = ()  # its study workers train nothing themselves
    root: Path
    task: Executor
    config: SlurmConfig
    console: Console | None = field(default=None, compare=False, repr=False)
    per_device: int = 1  # runtime.runs_per_device: each task's slots per GPU

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "console": None}

    def prepare(self) -> None:
        """Nothing to load here: the jobs train."""

    def obtain(
        self,
        request: Request,
        wait: bool = False,
        say: SayFn = print,
        progress: ProgressFn | None = None,
    ) -> RunRecord:
        """The stored record of the request's run, else queued for the tasks and waited for
        (its steps go to the run's progress file, not to ``progress``)."""
        spec = request.spec

        def attempt() -> RunRecord:
            found = self._through_jobs([request], say)[spec.run_id]
            if found.record is None:
                raise SlurmError(f"run {spec.run_id}: {found.why}")
            return found.record

        return obtain_with(attempt, spec, self.root, wait, say)

    def obtain_all(self, requests: list[Request], say: SayFn = print) -> list[Obtained]:
        """The stored records of the requests' runs, the others queued together for the
        queue's tasks, waited for."""
        found: dict[str, Obtained] = {}
        pending = []
        for request in requests:
            folder = ExperimentFolder.of(self.root, request.spec.experiment)
            record = result_of(folder.run(request.spec.run_id), request.spec)
            if record is None:
                pending.append(request)
            else:
                found[request.spec.run_id] = record
        if pending:
            for run_id, outcome in self._through_jobs(pending, say).items():
                failed = SlurmError(f"run {run_id}: {outcome.why}")
                found[run_id] = outcome.record if outcome.record is not None else failed
        return [found[request.spec.run_id] for request in requests]

    def run(self, specs: list[RunSpec]) -> list[RunRecord]:
        """Every pending spec through the queue; the records of all."""
        console = self.console or Console(stderr=True)
        done, pending = split_done(specs, self.root)
        say_done(console, len(done), len(pending), self.root)
        if not pending:
            return done
        with ProgressBoard(console, pending) as board:
            requests = [Request(spec) for spec in pending]
            outcomes = self._through_jobs(requests, console.print, board)
        return done + [o.record for o in outcomes.values() if o.record is not None]

    def _through_jobs(
        self, requests: list[Request], say: SayFn, board: ProgressBoard | None = None
    ) -> dict[str, Outcome]:
        """Queue the requests' runs (:meth:`_join`), keep tasks serving the queue, and follow
        each run until it is done or failed, queueing the lost again (taking over their
        claims); each run's outcome."""
        folder = ExperimentFolder.of(self.root, requests[0].spec.experiment)
        queue = open_queue(folder)
        runs = self._join(folder, queue, requests, say)
        while runs.open():
            if time.monotonic() - runs.read_at >= self.config.poll_s:
                self._read_jobs(folder, queue, runs, say, board)
            self._follow_queued(folder, queue, runs, board)
            self._follow_live(folder, queue, runs, say, board)
            if runs.open():
                time.sleep(min(self.config.poll_s, STORE_POLL_S))
        return runs.outcomes

    def _join(
        self, folder: ExperimentFolder, queue: RunQueue, requests: list[Request], say: SayFn
    ) -> Followed:
        """The requests' runs to follow: those an earlier controller queued as they are
        (waiting, or being taken by a task now), those a task of one trains (:meth:`_adopt`),
        and the others queued. Read in the order a task moves a run (queued, taken, recorded),
        so that a run taken meanwhile is seen once, never queued twice."""
        specs = [request.spec for request in requests]
        queued = {s.run_id: a for s in specs if (a := queue.attempt(s.run_id)) is not None}
        unqueued = [spec for spec in specs if spec.run_id not in queued]
        runs = Followed({r.spec.run_id: r for r in requests}, self._adopt(folder, unqueued, say))
        runs.waiting |= queued
        for run_id, request in runs.requests.items():
            if run_id not in runs.live and run_id not in runs.waiting:
                put(folder, queue, Queued(request), runs.waiting)
        return runs

    def _read_jobs(
        self,
        folder: ExperimentFolder,
        queue: RunQueue,
        runs: Followed,
        say: SayFn,
        board: ProgressBoard | None,
    ) -> None:
        """The tasks staffed and every followed job's state read; where the tasks failed
        before serving (their setup), every run still queued fails with their line."""
        queue.open()
        runs.states, setup_failed = self._staff(folder, queue, say)
        jobs = (j.job_id for j in runs.live.values() if j.job_id not in runs.states)
        runs.states |= job_states(jobs)
        runs.read_at = time.monotonic()
        for run_id in list(runs.waiting) if setup_failed else []:
            runs.settle(run_id, Outcome.failed(setup_failed), board)

    def _follow_queued(
        self,
        folder: ExperimentFolder,
        queue: RunQueue,
        runs: Followed,
        board: ProgressBoard | None,
    ) -> None:
        """Each run no longer in the queue: taken by a task (followed as live), or settled
        (another controller's task stored it, or it failed)."""
        queued = set(queue.waiting())  # one listing: those still in it need no reading
        for run_id, attempt in list(runs.waiting.items()):
            if run_id in queued:
                continue
            found = self._queued_outcome(folder, queue, runs.requests[run_id], attempt, runs)
            if isinstance(found, Submitted):
                runs.live[run_id] = found
                del runs.waiting[run_id]
            elif found is not None:
                runs.settle(run_id, found, board)

    def _follow_live(
        self,
        folder: ExperimentFolder,
        queue: RunQueue,
        runs: Followed,
        say: SayFn,
        board: ProgressBoard | None,
    ) -> None:
        """Each run a task took: its step on the board while it trains; once it ended, settled,
        or queued again (``runtime.slurm.retries`` times) where its task was lost."""
        for run_id, job in list(runs.live.items()):
            state = runs.states.get(job.job_id)
            found = self._live_outcome(folder, queue, job, state, runs)
            if found is None:
                if board is not None and state == "RUNNING":
                    if (step := reported_step(folder, run_id)) is not None:
                        board.start(runs.requests[run_id].spec)
                        board.update(run_id, *step)
                continue
            if found.ending is Ending.RETRY and job.attempt <= self.config.retries:
                say(f"{found.why}: queueing run {run_id} again (retry {job.attempt})")
                del runs.live[run_id]
                lost = replace(runs.requests[run_id], take_over=True)
                put(folder, queue, Queued(lost, job.attempt + 1), runs.waiting)
                continue
            if found.ending is Ending.RETRY:
                found = Outcome.failed(f"{found.why}, after {job.attempt} attempts")
            runs.settle(run_id, found, board)

    def _live_outcome(
        self,
        folder: ExperimentFolder,
        queue: RunQueue,
        job: Submitted,
        state: str | None,
        runs: Followed,
    ) -> Outcome | None:
        """What became of a run a task took: None while it trains, else its outcome (a task
        that ended without a result is given ``result_wait_s`` for it to appear first:
        ``runs.ended_at`` holds when it ended)."""
        stored = result_of(folder.run(job.run_id), runs.requests[job.run_id].spec)
        if stored is not None:
            return Outcome.done(stored)
        failure = queue.failure(job.run_id)
        if failure is not None:
            return Outcome.failed(failure)
        if state is None or state in ACTIVE:
            return None
        found = job_outcome(job, state, folder)
        waited = time.monotonic() - runs.ended_at.setdefault(job.run_id, time.monotonic())
        if found.ending is Ending.FAILED and waited < self.config.result_wait_s:
            return None  # its result file may not have reached this node yet
        return found

    def _queued_outcome(
        self,
        folder: ExperimentFolder,
        queue: RunQueue,
        request: Request,
        attempt: int,
        runs: Followed,
    ) -> Submitted | Outcome | None:
        """What became of the request's run once it left the queue: None (not yet recorded by its
        task), the task that took it, or done (another controller's task trained it)."""
        run_id = request.spec.run_id
        record = result_of(folder.run(run_id), request.spec)
        if record is not None:
            return Outcome.done(record)
        job = recorded_jobs(folder, [run_id]).get(run_id)
        if job is not None:
            return job
        taker = queue.taken_by(run_id)
        if taker is not None and runs.states.get(taker, "RUNNING") not in ACTIVE:
            group = queue_group(folder, run_id)
            logs = str(task_logs(folder, self.config))
            return Submitted(run_id, taker, attempt, logs, group)
        return None

    def _staff(
        self, folder: ExperimentFolder, queue: RunQueue, say: SayFn
    ) -> tuple[dict[str, str], str | None]:
        """Keep as many tasks as the queued runs beyond the free slots need (up to the
        array's parallelism), cancelling pending tasks no run needs; the tasks' states, and
        the line of a task that failed before it served (its setup) where no other started.
        A task's refusal (its slots' runs would not fit its GPU) cancels the tasks and raises
        :class:`ConfigError`."""
        with queue.lock():
            jobs = queue.workers()
            states = job_states(jobs)
            alive = [job for job in jobs if states.get(job, "PENDING") in ACTIVE]
            if (refusal := queue.refusal()) is not None:  # runs_per_device runs do not fit
                if alive:
                    subprocess.run(["scancel", *alive], capture_output=True)
                queue.set_workers([])
                raise ConfigError(refusal)
            failed = [j for j in jobs if states.get(j) in SETUP_FAILED and not queue.started(j)]
            if failed and not any(queue.started(job) for job in alive):
                job = failed[0]
                line = f"job {job} {states[job].lower()}: {log_tail(self._job(folder, job))}"
                return states, line
            per_task = self.config.task_slots(self.per_device)
            free = sum(queue.slots(job, per_task) - queue.busy(job) for job in alive)
            wanted = len(queue.waiting())
            change = task_change(wanted, free, per_task)
            if change > 0:
                count = min(change, self.config.array_parallelism - len(alive))
                if count > 0:
                    alive += self._submit(folder, queue, count, wanted, say)
            elif change < 0:
                idle = [job for job in alive if states.get(job) == "PENDING"]
                spare = idle[:-change]
                if spare:
                    subprocess.run(["scancel", *spare], capture_output=True)
                    alive = [job for job in alive if job not in spare]
                    say(f"cancelled {len(spare)} pending task(s) no queued run needs")
            queue.set_workers(alive)
        return states, None

    def _job(self, folder: ExperimentFolder, job_id: str) -> Any:
        """The submitit job of one of this experiment's tasks (for its log)."""
        from submitit import SlurmJob

        return SlurmJob(folder=task_logs(folder, self.config), job_id=job_id)

    def _adopt(
        self, folder: ExperimentFolder, specs: list[RunSpec], say: SayFn
    ) -> dict[str, Submitted]:
        """The recorded jobs of these specs still queued or running on runs with no record (a
        held run the curve trains on has one: its live task serves others)."""
        recorded = list(recorded_jobs(folder, (spec.run_id for spec in specs)).values())
        states = job_states(job.job_id for job in recorded)
        active = (j for j in recorded if states.get(j.job_id) in ACTIVE)
        live = {j.run_id: j for j in active if folder.run(j.run_id).read_record() is None}
        if live:
            ids = ", ".join(sorted({job.job_id.split("_")[0] for job in live.values()}))
            say(f"following {len(live)} runs a task of job {ids} trains")
        return live

    def _submit(
        self, folder: ExperimentFolder, queue: RunQueue, count: int, wanted: int, say: SayFn
    ) -> list[str]:
        """``count`` more tasks to serve the queue, as one job array; their job ids."""
        from submitit.core.utils import FailedJobError  # what a failed sbatch raises

        executor = self._submitit(folder, folder.path.name)
        where, logs = str(queue.path.resolve()), str(executor.folder)
        most, idle_s = self.config.runs_per_task, self.config.task_idle_s
        queue.refused_file.unlink(missing_ok=True)  # these tasks check anew
        try:
            jobs = executor.map_array(
                serve,
                [self.task] * count,
                [where] * count,
                [logs] * count,
                [most] * count,
                [idle_s] * count,
                [self.per_device] * count,
            )
        except FailedJobError as exc:  # sbatch refused: bad partition, account, limits
            raise ConfigError(
                f"runtime.slurm: sbatch refused the job: {sbatch_error(exc)}"
            ) from None
        array = jobs[0].job_id.split("_")[0]
        say(f"submitted {count} task(s) to Slurm as job {array} for {wanted} queued run(s)")
        return [job.job_id for job in jobs]

    def _submitit(self, folder: ExperimentFolder, experiment: str) -> Any:
        """A submitit executor with this section's sbatch parameters."""
        import submitit

        cfg = self.config
        executor = submitit.SlurmExecutor(folder=task_logs(folder, cfg), max_num_timeout=0)
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


STORE_POLL_S = 0.25  # how often the controller reads the store and the queue (files)


_CLOSE_AT_EXIT: set[Path] = set()


def open_queue(folder: ExperimentFolder) -> RunQueue:
    """The experiment's queue, said to have a controller waiting on it; the process that
    started ablate (not a study's worker) forgets an earlier controller's refusal
    (``runs_per_device`` runs that did not fit) and says at its exit that none waits any
    more, so the tasks leave once the queue is empty."""
    queue = RunQueue(folder.slurm_queue)
    queue.open()
    if multiprocessing.parent_process() is None and queue.path not in _CLOSE_AT_EXIT:
        _CLOSE_AT_EXIT.add(queue.path)
        atexit.register(queue.close)
        queue.refused_file.unlink(missing_ok=True)  # an earlier controller's: tasks check anew
    return queue


def put(folder: ExperimentFolder, queue: RunQueue, queued: Queued, waiting: dict[str, int]) -> None:
    """Queue a run, forgetting its last task (the one that takes it records itself)."""
    run_id = queued.request.spec.run_id
    folder.slurm_job(run_id).unlink(missing_ok=True)
    queue.put(queued)
    waiting[run_id] = queued.attempt
