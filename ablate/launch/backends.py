"""Which executor an experiment's ``runtime`` names, and what must be checked before it runs:
the local trainer or the simulator (``runtime.backend``, :func:`backend_executor`), here or
wherever its launcher sends runs (``runtime.launcher``, :mod:`ablate.launch.launchers`: this
module's :data:`LOCAL` runs them on this machine)."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console

from ablate.core.experiment import Experiment
from ablate.core.folders import ExperimentFolder
from ablate.core.runtime import RuntimeConfig
from ablate.launch.execute import Executor, LocalExecutor
from ablate.launch.launchers import Job, launcher
from ablate.launch.resources import Resources
from ablate.launch.workers import TRAINING_IMPORTS, pool_context, start_server


def make_executor(
    runtime: RuntimeConfig,
    results_dir: Path,
    workers: int | None = None,
    threads: int | None = None,
    console: Console | None = None,
) -> Executor:
    """The executor of ``runtime.backend`` through ``runtime.launcher``'s launcher."""
    return launcher(runtime.launcher).executor(runtime, results_dir, workers, threads, console)


def backend_executor(
    runtime: RuntimeConfig,
    root: Path,
    workers: int | None = None,
    threads: int | None = None,
    console: Console | None = None,
) -> Executor:
    """The executor of ``runtime.backend`` on this machine: the local trainer (a pool of
    ``workers`` processes of ``threads`` threads) or the simulator
    (:mod:`ablate.launch.simulator`)."""
    if runtime.backend == "simulate":
        from ablate.launch.simulator import SimulatedExecutor

        return SimulatedExecutor(root, console)
    return LocalExecutor(root, workers, threads, console)


def start_trainer_early(experiment: Experiment, workers: int | None, pooled: bool = True) -> None:
    """Where the experiment's runs train here in a pool (``runtime.backend: train`` with the
    local launcher, more than one worker on this machine, and ``pooled``: the caller's work
    uses one), start the pool's server now: its import of torch and Lightning, seconds on 2
    cores, goes on while this process loads its own and plans, instead of after
    (:func:`ablate.launch.workers.start_server`). Where the runs use GPUs, whose count needs
    torch, one GPU with ``runs_per_device: 1`` trains here and the server only cost work."""
    runtime = experiment.base.runtime
    if runtime.backend != "train" or runtime.launcher != LOCAL.label or not pooled:
        return
    if (workers or runtime.workers or os.cpu_count() or 1) > 1:  # on a GPU: maybe one slot
        start_server(pool_context(), TRAINING_IMPORTS, wait=False)


def studies_use_a_pool(experiment: Experiment) -> bool:
    """Whether the search and max-LR studies train in a pool: several studies side by side,
    or one study's trials or seeds several at a time (else one study trains here)."""
    search, max_lr = experiment.search, experiment.max_lr
    return (
        len(experiment.variants) > 1
        or (search is not None and search.parallel_trials > 1)
        or (max_lr is not None and max_lr.parallel_seeds > 1)
    )


class LocalLauncher:
    """``runtime.launcher: local``: the backend's executor, here."""

    label = "local"

    def executor(
        self,
        runtime: RuntimeConfig,
        results_dir: Path,
        workers: int | None,
        threads: int | None,
        console: Console | None,
    ) -> Executor:
        """The backend's executor on this machine."""
        return backend_executor(runtime, results_dir, workers, threads, console)

    def resources(self, runtime: RuntimeConfig, jobs: int) -> Resources | None:
        """None: the machine decides."""
        return None

    def jobs(self, folder: ExperimentFolder) -> dict[str, Job]:
        """None: a local run's process holds its claim (``ablate status`` reads that)."""
        return {}


LOCAL = LocalLauncher()
