"""The Slurm launcher (``runtime.launcher: slurm``): an :class:`Executor` whose runs are trained
by Slurm tasks, submitted through submitit, into the shared results folder.

The controller does not give each task its runs: it queues them (:mod:`ablate.launch.slurm_queue`,
files in ``<results>/<experiment>/.slurm/queue/``) and keeps enough tasks to serve the queue, as
one job array per submission, at most ``runtime.slurm.array_parallelism`` at once. Each task
(:func:`serve`) takes the oldest queued run, trains it, takes the next, and so on: up to
``runs_per_task`` runs, then it ends and a fresh task takes its place; with nothing queued it
waits ``task_idle_s`` for the controller's next run (the next search trial, max-LR probe or
stage) before it ends, and ends at once when the queue is empty and no controller waits on it
(the controller says so when its process ends, Ctrl-C included). So the seconds a task spends
starting Python and importing torch are paid once per task, not once per run or per search
round, and a whole experiment is a few submissions. Tasks that are submitted and still pending
when fewer runs are queued than tasks are free are cancelled.

With ``runtime.runs_per_device`` above 1, a task serves the queue with that many slots on each
GPU Slurm bound to it, each slot a process of its own doing the above (:func:`serve_slots`),
and the controller counts free slots, not tasks.

Each task claims and trains (or simulates) each run through the same executor path as a local
run (:class:`ablate.launch.execute.LocalExecutor` with one worker and
``runtime.slurm.cpus_per_task`` threads, or the simulator), so what it stores is what a local run
stores, and a search trial's evaluations reach its Optuna trial through the experiment's storage
(:class:`ablate.launch.search.PruningWatch`).

Job state is read with ``squeue`` every ``poll_s`` (``sacct`` needs accounting, which many
clusters and the test cluster lack; submitit's own polling uses it); the store and the queue,
which are files, are read more often. A task that takes a run records itself as the run's job.
A run's outcome is decided by the store, the queue and its task, in this order:

- its summary, stored: done;
- its training raised on the node (outside the run: a data file missing there), or the whole
  task raised: failed once, the exception's last line in the controller's output, not retried;
- its task ended without storing it as ``CANCELLED``, ``PREEMPTED``, ``TIMEOUT``, ``NODE_FAIL``,
  ``BOOT_FAIL``, ``DEADLINE`` or left the queue: queued again (``runtime.slurm.retries`` times),
  the task that takes it taking over the dead one's claim and resuming the run from its
  checkpoint (:mod:`ablate.training.run`); the task's other runs, stored or never taken, are
  not touched;
- its task ended ``FAILED`` or ``OUT_OF_MEMORY`` (a setup line that failed, a node that cannot
  run the job): failed once, with the end of its log; a task that failed before it took a run
  fails the runs still queued in the same way.

Every task that takes a run records itself in
``<results>/<experiment>/.slurm/by-run/<run-id>.json``: a controller started again follows the
runs whose tasks still train them, and the tasks still serving the queue, instead of
submitting them twice. Stopping the controller (Ctrl-C) leaves its
tasks running: they train what is queued, then end.
"""

from __future__ import annotations

import atexit
import math
import multiprocessing.connection
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from rich.console import Console

from ablate.core.cluster import SlurmConfig
from ablate.core.config import ConfigError, RuntimeConfig
from ablate.core.folders import ExperimentFolder, read_json, write_json_atomic
from ablate.core.plan import RunSpec
from ablate.core.record import RunRecord
from ablate.core.store import store_fault_cause
from ablate.launch.backends import backend_executor
from ablate.launch.devices import VISIBLE, gpu_ids, named_gpus, visible_gpu
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
from ablate.launch.slurm_queue import Queued, RunQueue, task_change, wait_for_run
from ablate.launch.workers import Resources, die_with_parent

ACTIVE = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD"}
    | {"REQUEUE_FED", "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "RESV_DEL_HOLD"}
)
RETRIED = frozenset({"CANCELLED", "PREEMPTED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"})
GONE = "GONE"  # squeue no longer lists the job (it ended more than MinJobAge ago)


class SlurmError(RunFailedError):
    """A run's job failed in a way a retry would not mend (its message says why); a search
    trial whose job failed is a failed trial, as one whose run raised."""


TERMINATED = 128 + signal.SIGTERM  # the exit status of a task that Slurm stopped


Outcome = tuple[str, Any]  # ("done", RunRecord), ("retry", why) or ("failed", message)


def serve(
    task: Executor, queue_path: str, logs: str, most: int, idle_s: float, per_device: int = 1
) -> dict[str, Outcome]:
    """What each Slurm task does: take runs from the queue at ``queue_path`` one after another
    and obtain each through ``task`` (claim, train, store), recording itself as each one's job
    (its submitit folder ``logs``), until it has obtained ``most`` or finds none
    (:func:`ablate.launch.slurm_queue.wait_for_run`); each run's ``("done", record)``, or
    ``("failed", line)`` where obtaining it raised (written to the queue at once, and the task
    goes on; a store that cannot be written stops it). With ``per_device`` above 1 and GPUs
    (``CUDA_VISIBLE_DEVICES``, as Slurm binds them), the task serves that many slots per GPU
    at once, each a process of its own doing the above (:func:`serve_slots`), after checking
    that the queued runs fit (:func:`packed_fit_error`).

    SIGTERM (scancel, preemption, the time limit) stops the run in progress as Ctrl-C stops a
    local one (it keeps its checkpoint), and the task exits at once without a result
    (submitit's own handler would let it run on until Slurm kills it), so the controller
    queues that run again."""
    import submitit

    signal.signal(signal.SIGTERM, _stop)
    me = str(submitit.JobEnvironment().job_id)
    queue = RunQueue(Path(queue_path))
    gpus = named_gpus() if per_device > 1 else ()
    slots = len(gpus) * per_device or 1
    queue.hello(me, slots)
    if slots == 1:
        return serve_slot(task, queue, me, 0, (logs, most, idle_s))
    if (line := packed_fit_error(queue)) is not None:
        queue.refuse(line)
        return {}
    return serve_slots(task, queue, me, gpus, slots, (logs, most, idle_s))


def serve_slot(
    task: Executor,
    queue: RunQueue,
    me: str,
    slot: int,
    serving: tuple[str, int, float],
    gpu: str | None = None,
) -> dict[str, Outcome]:
    """Slot ``slot`` of task ``me`` (seeing GPU ``gpu``, if one of several slots): runs one
    after another (:func:`serve`), with ``serving`` (logs, most, idle_s)."""
    logs, most, idle_s = serving
    outcomes: dict[str, Outcome] = {}
    try:
        while len(outcomes) < most and (queued := wait_for_run(queue, me, idle_s)) is not None:
            spec = queued.request.spec
            queue.set_busy(me, True, slot, spec.run_id)
            folder = ExperimentFolder.of(task.root, spec.experiment)
            taken = Submitted(spec.run_id, me, queued.attempt, logs, spec.group, slot, gpu)
            record_jobs(folder, [taken])
            queue.taken_file(spec.run_id, me).unlink(missing_ok=True)
            outcome = outcomes[spec.run_id] = obtain_here(task, queued.request, folder)
            if outcome[0] == "failed":
                queue.fail(spec.run_id, f"job {me} raised: {outcome[1]}")
            queue.set_busy(me, False, slot)
    except KeyboardInterrupt:
        print(f"task {me}: stopped by Slurm; the controller queues its run again", flush=True)
        os._exit(TERMINATED)
    queue.set_busy(me, True, slot)  # ended: the controller counts it as taking nothing more
    return outcomes


SLOT_GRACE_S = 20.0  # after SIGTERM, how long a task waits for its slots to stop their runs


def serve_slots(
    task: Executor,
    queue: RunQueue,
    me: str,
    gpus: tuple[str, ...],
    slots: int,
    serving: tuple[str, int, float],
) -> dict[str, Outcome]:
    """``slots`` processes serving the queue at once, slot i seeing only GPU i mod n (set
    before it starts: torch there never sees another), each :func:`serve_slot` with
    ``serving`` (logs, most, idle_s); their outcomes together. A slot that dies fails its run
    at once (:func:`collect_slots`). SIGTERM reaches every process of the task; here it
    also stops the slots (they keep their checkpoints) before the task exits without a
    result."""
    context = multiprocessing.get_context("spawn")
    processes: list[Any] = []
    readers = []
    try:
        for slot in range(slots):
            reader, writer = context.Pipe(duplex=False)
            args = (task, str(queue.path), me, slot, serving, writer)
            process = context.Process(target=_slot_main, args=args, name=f"slot-{slot}")
            with visible_gpu(gpus[slot % len(gpus)]):
                process.start()
            writer.close()
            processes.append(process)
            readers.append(reader)
        return collect_slots(queue, me, processes, readers)
    except KeyboardInterrupt:  # Slurm's SIGTERM reached the slots too: they stop their runs
        deadline = time.monotonic() + SLOT_GRACE_S
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in processes:
            if process.is_alive():  # a slot the signal did not reach (SIGTERM once, late)
                process.terminate()
        print(f"task {me}: stopped by Slurm; the controller queues its runs again", flush=True)
        os._exit(TERMINATED)


def collect_slots(
    queue: RunQueue, me: str, processes: list[Any], readers: list[Any]
) -> dict[str, Outcome]:
    """The outcomes the slots (``processes``) of task ``me`` send over ``readers`` as each
    ends. A slot that dies without sending (killed for memory, crashed) fails the run it was
    training at once, as a task of one slot that dies so fails its run (not queued again;
    the controller reads it while the other slots go on), and is marked ended. One that
    exits on SIGTERM leaves its run to the task's own exit (queued again)."""
    outcomes: dict[str, Outcome] = {}
    slot_of = {reader: slot for slot, reader in enumerate(readers)}
    while slot_of:
        for reader in multiprocessing.connection.wait(list(slot_of)):
            slot = slot_of.pop(reader)
            try:
                outcomes |= reader.recv()
            except EOFError:
                processes[slot].join()
                code = processes[slot].exitcode
                run_id = queue.slot_run(me, slot)
                if run_id is not None and code != TERMINATED:
                    queue.fail(
                        run_id, f"job {me}: slot {slot} died under it ({how_it_ended(code)})"
                    )
                queue.set_busy(me, True, slot)
    for process in processes:
        process.join()
    return outcomes


def how_it_ended(code: int | None) -> str:
    """A dead process's exit code in words: the signal that killed it, or its exit code."""
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        memory = ", as when out of memory" if -code == signal.SIGKILL else ""
        return f"killed by {name}{memory}"
    return f"exit code {code}"


def _slot_main(
    task: Executor,
    queue_path: str,
    me: str,
    slot: int,
    serving: tuple[str, int, float],
    writer: Any,
) -> None:
    """A slot's process (:func:`serve_slots`): serve, then hand the outcomes back."""
    signal.signal(signal.SIGTERM, _stop)
    die_with_parent()
    queue = RunQueue(Path(queue_path))
    writer.send(serve_slot(task, queue, me, slot, serving, os.environ.get(VISIBLE)))


def packed_fit_error(queue: RunQueue) -> str | None:
    """Where the runs queued when a task with several slots starts would not fit its first
    GPU ``runtime.runs_per_device`` at a time, the line that says so
    (:func:`ablate.launch.estimate.check_fit`); None where they fit, where they train nothing
    (the simulator) or where torch sees no GPU (they train on the CPU)."""
    found = (queue.read(run_id) for run_id in queue.waiting())
    configs = [q.request.spec.config for q in found if q is not None]
    if not any(cfg.runtime.backend == "train" for cfg in configs):
        return None
    gpus = gpu_ids("cuda")
    if not gpus:
        return None
    from ablate.launch.estimate import check_fit  # torch: only where runs use GPUs

    try:
        check_fit(configs, gpus, 1)
    except ConfigError as error:
        return str(error)
    return None


def obtain_here(task: Executor, request: Request, folder: ExperimentFolder) -> Outcome:
    """One run obtained in a task: ``("done", record)`` or ``("failed", line)``; a store
    fault (and an interrupt) goes up."""
    spec = request.spec
    report = ProgressFile(folder.run(spec.run_id).progress)
    try:
        record = task.obtain(
            spec, request.watch, request.take_over, wait=True, say=print, progress=report
        )
    except Exception as exc:
        if store_fault_cause(exc) is not None:
            raise
        return "failed", last_line(f"{type(exc).__name__}: {exc}")
    return "done", record


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
    """What became of a run whose task ended: ``("done", record)``, ``("retry", why)`` or
    ``("failed", message)``."""
    job = submitted.job()
    if job.paths.result_pickle.exists():
        try:
            result = job.result()
        except Exception as exc:  # submitit's FailedJobError: the task's traceback inside
            return "failed", f"job {submitted.job_id} raised: {raised_line(exc)}"
        if submitted.run_id in result:
            kind, value = result[submitted.run_id]
            return (
                (kind, value) if kind == "done" else ("failed", f"job {job.job_id} raised: {value}")
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
    """Runs queued for Slurm tasks that each train several (:func:`serve`); ``task`` is what
    a task runs them with."""

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
        spec: RunSpec,
        watch: EvalWatch | None = None,
        take_over: bool = False,
        wait: bool = False,
        say: SayFn = print,
        progress: ProgressFn | None = None,
    ) -> RunRecord:
        """The stored record of ``spec``, else queued for the tasks and waited for (its
        steps go to the run's progress file, not to ``progress``)."""

        def attempt() -> RunRecord:
            outcomes = self._through_jobs([Request(spec, watch, take_over)], say)
            kind, value = outcomes[spec.run_id]
            if kind != "done":
                raise SlurmError(f"run {spec.run_id}: {value}")
            return value

        return obtain_with(attempt, spec, self.root, wait, say)

    def obtain_all(self, requests: list[Request], say: SayFn = print) -> list[Obtained]:
        """The stored records of the requests' runs, the others queued together for the
        queue's tasks, waited for."""
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
        """Every pending spec through the queue; the records of all."""
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
        """Queue the requests' runs (following those a task of an earlier controller still
        trains), keep tasks serving the queue, and follow each run until it is done or
        failed, queueing the lost again (taking over their claims); ``{run_id: (kind, record
        or message)}``."""
        specs = [request.spec for request in requests]
        folder = ExperimentFolder.of(self.root, specs[0].experiment)
        queue = open_queue(folder)
        by_id = {request.spec.run_id: request for request in requests}
        live = self._adopt(folder, specs, say)
        waiting: dict[str, int] = {}  # queued, not yet taken: the attempt
        for run_id, request in by_id.items():
            if run_id not in live:
                put(folder, queue, Queued(request), waiting)
        outcomes: dict[str, Outcome] = {}
        ended_at: dict[str, float] = {}
        states: dict[str, str] = {}
        read_at = -math.inf
        while live or waiting:
            if time.monotonic() - read_at >= self.config.poll_s:
                queue.open()
                states, setup_failed = self._staff(folder, queue, say)
                states |= job_states(j.job_id for j in live.values() if j.job_id not in states)
                read_at = time.monotonic()
                for run_id in list(waiting) if setup_failed else []:
                    del waiting[run_id]
                    self._finish(outcomes, board, by_id[run_id], "failed", setup_failed)
            queued = set(queue.waiting())  # one listing: those still in it need no reading
            for run_id, attempt in list(waiting.items()):
                if run_id in queued:
                    continue
                kind, value = self._queued_outcome(folder, queue, run_id, attempt, states)
                if kind == "taken":
                    live[run_id] = value
                    del waiting[run_id]
                elif kind != "waiting":
                    del waiting[run_id]
                    self._finish(outcomes, board, by_id[run_id], kind, value)
            for run_id, job in list(live.items()):
                found = self._live_outcome(folder, queue, job, states.get(job.job_id), ended_at)
                if found is None:
                    if board is not None and states.get(job.job_id) == "RUNNING":
                        if (step := reported_step(folder, run_id)) is not None:
                            board.start(by_id[run_id].spec)
                            board.update(run_id, *step)
                    continue
                kind, value = found
                del live[run_id]
                if kind == "retry" and job.attempt <= self.config.retries:
                    say(f"{value}: queueing run {run_id} again (retry {job.attempt})")
                    lost = replace(by_id[run_id], take_over=True)
                    put(folder, queue, Queued(lost, job.attempt + 1), waiting)
                    continue
                if kind == "retry":
                    kind, value = "failed", f"{value}, after {job.attempt} attempts"
                self._finish(outcomes, board, by_id[run_id], kind, value)
            if live or waiting:
                time.sleep(min(self.config.poll_s, STORE_POLL_S))
        return outcomes

    def _live_outcome(
        self,
        folder: ExperimentFolder,
        queue: RunQueue,
        job: Submitted,
        state: str | None,
        ended_at: dict[str, float],
    ) -> Outcome | None:
        """What became of a run a task took: None while it trains, else ``("done", record)``,
        ``("retry", why)`` or ``("failed", line)`` (a task that ended without a result is
        given ``result_wait_s`` for it to appear first: ``ended_at`` holds when it ended)."""
        stored = folder.run(job.run_id).read_record()
        if stored is not None:
            return "done", stored
        failure = queue.failure(job.run_id)
        if failure is not None:
            return "failed", failure
        if state is None or state in ACTIVE:
            return None
        kind, value = job_outcome(job, state, folder)
        waited = time.monotonic() - ended_at.setdefault(job.run_id, time.monotonic())
        if kind == "failed" and waited < self.config.result_wait_s:
            return None  # its result file may not have reached this node yet
        return kind, value

    @staticmethod
    def _finish(
        outcomes: dict[str, Outcome],
        board: ProgressBoard | None,
        request: Request,
        kind: str,
        value: Any,
    ) -> None:
        """Settle one run's outcome (and its line on the board)."""
        outcomes[request.spec.run_id] = (kind, value)
        if board is not None:
            board.finish(
                request.spec,
                value if kind == "done" else None,
                None if kind == "done" else f"failed: {value}",
            )

    def _queued_outcome(
        self,
        folder: ExperimentFolder,
        queue: RunQueue,
        run_id: str,
        attempt: int,
        states: dict[str, str],
    ) -> tuple[str, Any]:
        """What became of a queued run: ``("waiting", None)``, ``("taken", Submitted)``,
        ``("done", record)`` (another controller's task trained it) or ``("failed", line)``."""
        record = folder.run(run_id).read_record()
        if record is not None:
            return "done", record
        job = recorded_jobs(folder, [run_id]).get(run_id)
        if job is not None:
            return "taken", job
        taker = queue.taken_by(run_id)
        if taker is not None and states.get(taker, "RUNNING") not in ACTIVE:
            group = queue_group(folder, run_id)
            logs = str(task_logs(folder, self.config))
            return "taken", Submitted(run_id, taker, attempt, logs, group)
        return "waiting", None

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
        """The recorded jobs of these specs that are still queued or running."""
        recorded = list(recorded_jobs(folder, (spec.run_id for spec in specs)).values())
        states = job_states(job.job_id for job in recorded)
        live = {job.run_id: job for job in recorded if states.get(job.job_id) in ACTIVE}
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
SETUP_FAILED = frozenset({"FAILED", "OUT_OF_MEMORY"})
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
        return SlurmExecutor(results_dir, task, runtime.slurm, console, runtime.runs_per_device)

    def resources(self, runtime: RuntimeConfig, jobs: int) -> Resources:
        """Every study at once (each waits on its trials' jobs), up to the array's
        parallelism, with one thread."""
        return Resources(max(1, min(jobs, runtime.slurm.array_parallelism)), 1)

    def jobs(self, folder: ExperimentFolder) -> dict[str, Job]:
        """Each run's last recorded job with its state from ``squeue``, and each queued run
        as queued for the queue's newest task (while there is none, it is not started)."""
        submitted = submitted_jobs(folder)
        states = job_states(job.job_id for job in submitted.values())
        found = {
            run_id: Job(job.job_id, job.group, _word(states.get(job.job_id)))
            for run_id, job in submitted.items()
        }
        queue = RunQueue(folder.slurm_queue)
        tasks = queue.workers()
        for run_id in queue.waiting() if tasks else []:
            queued = queue.read(run_id)
            if queued is not None:
                found[run_id] = Job(tasks[-1], queued.request.spec.group, "queued")
        return found


def _word(state: str | None) -> str | None:
    """A Slurm state as a launcher's job state: queued, running, ended (None: not read)."""
    if state is None:
        return None
    if state in ACTIVE:
        return "queued" if state == "PENDING" else "running"
    return "ended"


SLURM = SlurmLauncher()
