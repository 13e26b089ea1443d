"""The queue between the Slurm controller and its tasks: files in the experiment's
``.slurm/queue/`` on the shared file system (:meth:`ExperimentFolder.slurm_queue`).

The controller puts each run it wants as ``<run-id>.pkl`` (the request and its attempt); a
task takes one by renaming it to ``<run-id>.<job-id>.taken`` (a rename is atomic: one task
gets it), records itself as the run's job (``.slurm/by-run/``) and drops the ``.taken`` file.
A task says it started (``started/<job-id>``, holding how many runs it trains at once: its
slots, ``runtime.runs_per_device`` on each of its GPUs, else 1) and marks each slot busy while
it trains and once it has ended (``busy/<job-id>@<slot>``), so the controller knows how many
of its tasks' slots are free and which tasks failed before they served (a busy flag holds the
run its slot trains); a run that raised on a node is written to ``failed/<run-id>.txt`` at once
(the slot goes on with the next), as is one whose slot's process died under it (a task of
several slots: killed for memory, crashed). A task
that finds its slots' runs would not fit its GPU writes ``refused.txt`` (the controller stops,
exit 2).
``controller`` exists while a controller waits on the queue: without it, a task leaves as soon
as the queue is empty; with it, after ``runtime.slurm.task_idle_s`` with nothing to train.
``workers.json`` lists the tasks submitted to serve the queue, and ``.lock`` is held while one
process decides how many more to submit (:func:`task_change`).
"""

from __future__ import annotations

import fcntl
import math
import os
import pickle
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ablate.core.folders import read_json, write_atomic, write_json_atomic, write_text_atomic
from ablate.launch.execute import Request

SUFFIX = ".pkl"
TAKEN = ".taken"


@dataclass(frozen=True)
class Queued:
    """A run in the queue: the request and which attempt this is (1: the first)."""

    request: Request
    attempt: int = 1


@dataclass(frozen=True)
class RunQueue:
    """One experiment's queue folder (this module's docstring)."""

    path: Path

    def put(self, queued: Queued) -> None:
        """Queue a run (again): written whole, its earlier failure forgotten."""
        run_id = queued.request.spec.run_id
        self.path.mkdir(parents=True, exist_ok=True)
        self.failed_file(run_id).unlink(missing_ok=True)
        data = pickle.dumps(queued)
        write_atomic(self.path / f"{run_id}{SUFFIX}", lambda tmp: tmp.write_bytes(data))

    def waiting(self) -> list[str]:
        """The run ids queued and not taken, oldest first."""
        if not self.path.is_dir():
            return []
        found = []
        for entry in os.scandir(self.path):
            if entry.name.endswith(SUFFIX):
                try:
                    found.append((entry.stat().st_mtime_ns, entry.name.removesuffix(SUFFIX)))
                except FileNotFoundError:  # taken meanwhile
                    continue
        return [run_id for _, run_id in sorted(found)]

    def read(self, run_id: str) -> Queued | None:
        """A waiting run's entry, None once it is taken."""
        try:
            return pickle.loads((self.path / f"{run_id}{SUFFIX}").read_bytes())
        except FileNotFoundError:
            return None

    def attempt(self, run_id: str) -> int | None:
        """The attempt of a run waiting or being taken (read in that order, the order a task
        moves it in), None where it is neither."""
        waiting = self.read(run_id)
        if waiting is not None:
            return waiting.attempt
        for path in self.path.glob(f"{run_id}.*{TAKEN}"):  # listed after the read: not missed
            try:
                taken: Queued = pickle.loads(path.read_bytes())
            except FileNotFoundError:  # recorded meanwhile
                continue
            return taken.attempt
        return None

    def take(self, job_id: str) -> Queued | None:
        """The oldest waiting run for task ``job_id``, None when there is none; the task owns
        it once it is renamed to its ``.taken`` name."""
        for run_id in self.waiting():
            taken = self.taken_file(run_id, job_id)
            try:
                os.rename(self.path / f"{run_id}{SUFFIX}", taken)
            except FileNotFoundError:  # another task was faster
                continue
            return pickle.loads(taken.read_bytes())
        return None

    def taken_file(self, run_id: str, job_id: str) -> Path:
        """A run's entry while task ``job_id`` records itself as its job."""
        return self.path / f"{run_id}.{job_id}{TAKEN}"

    def taken_by(self, run_id: str) -> str | None:
        """The task that took a run and has not yet recorded itself, if any."""
        for path in self.path.glob(f"{run_id}.*{TAKEN}"):
            return path.name.removesuffix(TAKEN).split(".", 1)[1]
        return None

    def failed_file(self, run_id: str) -> Path:
        """Where a task writes the line of a run that raised on its node."""
        return self.path / "failed" / f"{run_id}.txt"

    def fail(self, run_id: str, line: str) -> None:
        """Record that a run raised (``line`` says how)."""
        self.failed_file(run_id).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.failed_file(run_id), line)

    def failure(self, run_id: str) -> str | None:
        """The line of a run that raised on a node, if it did."""
        try:
            return self.failed_file(run_id).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def busy_file(self, job_id: str, slot: int = 0) -> Path:
        """Present while slot ``slot`` of task ``job_id`` trains a run (holding its id), and
        once the slot has ended (empty)."""
        return self.path / "busy" / f"{job_id}@{slot}"

    def set_busy(self, job_id: str, busy: bool, slot: int = 0, run_id: str = "") -> None:
        """Mark slot ``slot`` of task ``job_id`` training ``run_id`` (or ended, without one),
        or free."""
        path = self.busy_file(job_id, slot)
        if busy:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, run_id)
        else:
            path.unlink(missing_ok=True)

    def slot_run(self, job_id: str, slot: int) -> str | None:
        """The run slot ``slot`` of task ``job_id`` is training, if any."""
        try:
            return self.busy_file(job_id, slot).read_text(encoding="utf-8") or None
        except FileNotFoundError:
            return None

    def busy(self, job_id: str) -> int:
        """How many of task ``job_id``'s slots are training a run or have ended."""
        return len(list((self.path / "busy").glob(f"{job_id}@*")))

    def hello(self, job_id: str, slots: int = 1) -> None:
        """Say task ``job_id`` started (a task that fails before this failed in its setup),
        training ``slots`` runs at once, none of them busy yet (a job Slurm requeued under
        the same id forgets its earlier run's flags)."""
        path = self.started_file(job_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in (self.path / "busy").glob(f"{job_id}@*"):  # Slurm requeued this job id
            stale.unlink(missing_ok=True)
        write_text_atomic(path, str(slots))

    def started_file(self, job_id: str) -> Path:
        """Present once task ``job_id`` started serving; its slots inside."""
        return self.path / "started" / job_id

    def started(self, job_id: str) -> bool:
        """Whether task ``job_id`` ever started serving the queue."""
        return self.started_file(job_id).exists()

    def slots(self, job_id: str, expected: int) -> int:
        """How many runs task ``job_id`` trains at once: what it said when it started, else
        (pending, or an older task that said nothing) ``expected``."""
        try:
            return int(self.started_file(job_id).read_text(encoding="utf-8") or expected)
        except FileNotFoundError:
            return expected

    @property
    def refused_file(self) -> Path:
        """Where a task writes why its slots' runs would not fit its GPU."""
        return self.path / "refused.txt"

    def refuse(self, line: str) -> None:
        """Say the tasks cannot train ``runtime.runs_per_device`` runs at once (``line``)."""
        write_text_atomic(self.refused_file, line)

    def refusal(self) -> str | None:
        """A task's refusal, if one refused."""
        try:
            return self.refused_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    @property
    def controller_file(self) -> Path:
        """Present while a controller waits on this queue."""
        return self.path / "controller"

    def open(self) -> None:
        """Say a controller waits on the queue (its tasks stay for the next run)."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.controller_file.touch()

    def close(self) -> None:
        """Say no controller waits: tasks leave once the queue is empty."""
        self.controller_file.unlink(missing_ok=True)

    def is_open(self) -> bool:
        """Whether a controller waits on the queue."""
        return self.controller_file.exists()

    @property
    def workers_file(self) -> Path:
        """The tasks submitted to serve the queue."""
        return self.path / "workers.json"

    def workers(self) -> list[str]:
        """The job ids of the tasks submitted to serve the queue (some may have ended)."""
        return list((read_json(self.workers_file) or {}).get("jobs", []))

    def set_workers(self, job_ids: list[str]) -> None:
        """Replace the list of tasks serving the queue."""
        self.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.workers_file, {"jobs": job_ids})

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the queue's lock (one process decides the tasks at a time)."""
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.path / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


QUEUE_POLL_S = 0.25  # how often a free task looks for a run: the next trial comes at once
SLOW_POLL_S = 2.0  # ... and once it has waited BACK_OFF_S: a stage's tasks spare the file server
BACK_OFF_S = 10.0


def wait_for_run(queue: RunQueue, job_id: str, idle_s: float) -> Queued | None:
    """The next run for task ``job_id``: looked for until one is queued, None once the
    queue is empty and either no controller waits on it or ``idle_s`` passed."""
    since = time.monotonic()
    while (found := queue.take(job_id)) is None:
        waited = time.monotonic() - since
        if not queue.is_open() or waited >= idle_s:
            return None
        time.sleep(QUEUE_POLL_S if waited < BACK_OFF_S else SLOW_POLL_S)
    return found


def task_change(wanted: int, free: int, per_task: int) -> int:
    """How many more tasks of ``per_task`` slots the ``wanted`` queued runs need beyond the
    ``free`` slots (positive), or how many tasks' slots no queued run needs (negative)."""
    if wanted > free:
        return math.ceil((wanted - free) / per_task)
    return -((free - wanted) // per_task)
