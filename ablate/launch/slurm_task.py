"""What a Slurm task runs (:func:`serve`): runs taken from the queue one after another and
obtained through the backend's executor on the node, each recorded as the task's; with
``runtime.runs_per_device`` above 1, several slots per GPU, each a process of its own
(:func:`serve_slots`). SIGTERM (scancel, preemption, the time limit) stops the run in progress
as Ctrl-C stops a local one, and the task exits without a result so that the controller
(:mod:`ablate.launch.slurm_executor`) queues that run again.
"""

from __future__ import annotations

import math
import multiprocessing.connection
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.core.errors import ConfigError
from ablate.core.folders import ExperimentFolder, write_json_atomic
from ablate.core.store import store_fault_cause
from ablate.launch.devices import VISIBLE, gpu_ids, named_gpus, visible_gpu
from ablate.launch.execute import Executor, Request
from ablate.launch.preflight import check_fit
from ablate.launch.slurm_jobs import Ending, Outcome, Submitted, last_line, record_jobs
from ablate.launch.slurm_queue import RunQueue, wait_for_run
from ablate.launch.workers import die_with_parent

TERMINATED = 128 + signal.SIGTERM  # the exit status of a task that Slurm stopped


def serve(
    task: Executor, queue_path: str, logs: str, most: int, idle_s: float, per_device: int = 1
) -> dict[str, Outcome]:
    """What each Slurm task does: take runs from the queue at ``queue_path`` one after another
    and obtain each through ``task`` (claim, train, store), recording itself as each one's job
    (its submitit folder ``logs``), until it has obtained ``most`` or finds none
    (:func:`ablate.launch.slurm_queue.wait_for_run`); each run's :class:`Outcome`: done, or
    failed where obtaining it raised (written to the queue at once, and the task
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
            if outcome.ending is Ending.FAILED:
                queue.fail(spec.run_id, f"job {me} raised: {outcome.why}")
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
    (:func:`ablate.launch.preflight.check_fit`); None where they fit, where they train nothing
    (the simulator) or where torch sees no GPU (they train on the CPU)."""
    found = (queue.read(run_id) for run_id in queue.waiting())
    configs = [q.request.spec.config for q in found if q is not None]
    if not any(cfg.runtime.backend == "train" for cfg in configs):
        return None
    gpus = gpu_ids("cuda")
    if not gpus:
        return None
    try:
        check_fit(configs, gpus, 1)
    except ConfigError as error:
        return str(error)
    return None


def obtain_here(task: Executor, request: Request, folder: ExperimentFolder) -> Outcome:
    """One run obtained in a task: done, or failed with the exception's line; a store
    fault (and an interrupt) goes up."""
    spec = request.spec
    report = ProgressFile(folder.run(spec.run_id).progress)
    try:
        record = task.obtain(request, wait=True, say=print, progress=report)
    except Exception as exc:
        if store_fault_cause(exc) is not None:
            raise
        return Outcome.failed(last_line(f"{type(exc).__name__}: {exc}"))
    return Outcome.done(record)


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
