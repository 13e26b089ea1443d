"""Which executor an experiment's ``runtime`` names, and what must be checked before it runs:
the local trainer or the simulator (``runtime.backend``), here or as Slurm jobs
(``runtime.launcher``)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ablate.core.config import RuntimeConfig
from ablate.core.experiment import Experiment
from ablate.launch.execute import Executor, LocalExecutor


def make_executor(
    runtime: RuntimeConfig,
    results_dir: Path,
    workers: int | None = None,
    threads: int | None = None,
    console: Console | None = None,
) -> Executor:
    """The executor of ``runtime.backend`` and ``runtime.launcher``: the local trainer or the
    simulator (:mod:`ablate.launch.simulator`), here or in Slurm jobs
    (:mod:`ablate.launch.slurm`: each task trains with one worker of
    ``runtime.slurm.cpus_per_task`` threads, at the results folder's absolute path)."""
    slurm = runtime.launcher == "slurm"
    root = results_dir.resolve() if slurm else results_dir
    if runtime.backend == "simulate":
        from ablate.launch.simulator import SimulatedExecutor

        executor: Executor = SimulatedExecutor(root, None if slurm else console)
    elif slurm:
        executor = LocalExecutor(root, 1, runtime.slurm.cpus_per_task)
    else:
        executor = LocalExecutor(results_dir, workers, threads, console)
    if not slurm:
        return executor
    from ablate.launch.slurm import SlurmExecutor

    return SlurmExecutor(results_dir, executor, runtime.slurm, console)


def check_what_trains(experiment: Experiment, results_dir: Path) -> None:
    """Raise on corpora or models that cannot train, or stored runs on other data (the trainer
    and torch are imported only here). A simulated experiment reads no data and builds no
    model: it has nothing here to check, and loads neither."""
    if experiment.base.runtime.backend == "simulate":
        return
    from ablate.launch.estimate import check_inputs
    from ablate.launch.freshness import check_stored_data

    check_stored_data(experiment, results_dir, check_inputs(experiment))
