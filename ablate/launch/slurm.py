"""The Slurm launcher (``runtime.launcher: slurm``): an :class:`Executor` whose runs are trained
by Slurm tasks, submitted through submitit, into the shared results folder.

The controller does not give each task its runs: it queues them
(:mod:`ablate.launch.slurm_queue`, files in ``<results>/<experiment>/.slurm/queue/``) and keeps
enough tasks to serve the queue, as one job array per submission, at most
``runtime.slurm.array_parallelism`` at once. Each task (:func:`ablate.launch.slurm_task.serve`)
takes the oldest queued run, trains it, takes the next, and so on: up to ``runs_per_task`` runs,
then it ends and a fresh task takes its place; with nothing queued it waits ``task_idle_s`` for
the controller's next run (the next search trial, max-LR probe or stage) before it ends, and
ends at once when the queue is empty and no controller waits on it (the controller says so when
its process ends, Ctrl-C included). So the seconds a task spends starting Python and importing
torch are paid once per task, not once per run or per search round, and a whole experiment is a
few submissions. Tasks that are submitted and still pending when fewer runs are queued than
tasks are free are cancelled.

With ``runtime.runs_per_device`` above 1, a task serves the queue with that many slots on each
GPU Slurm bound to it, each slot a process of its own doing the above
(:func:`ablate.launch.slurm_task.serve_slots`),
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

The module holds the launcher; the controller is :mod:`ablate.launch.slurm_executor`, what a
task runs :mod:`ablate.launch.slurm_task`, the tasks' records and states and a run's typed
outcome :mod:`ablate.launch.slurm_jobs`, and the queue :mod:`ablate.launch.slurm_queue`.

Every task that takes a run records itself in
``<results>/<experiment>/.slurm/by-run/<run-id>.json``: a controller started again follows the
runs whose tasks still train them, the runs still queued, and the tasks still serving the
queue, instead of submitting them twice. Stopping the controller (Ctrl-C) leaves its
tasks running: they train what is queued, then end.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ablate.core.folders import ExperimentFolder
from ablate.core.runtime import RuntimeConfig
from ablate.launch.backends import backend_executor
from ablate.launch.execute import Executor
from ablate.launch.launchers import Job
from ablate.launch.resources import Resources
from ablate.launch.slurm_executor import SlurmExecutor
from ablate.launch.slurm_jobs import ACTIVE, job_states, submitted_jobs
from ablate.launch.slurm_queue import RunQueue


class SlurmLauncher:
    """``runtime.launcher: slurm``: each stage's runs as Slurm jobs (see the module)."""

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
