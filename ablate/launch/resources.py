"""How many runs go at once on this machine and how many torch threads each gets
(:class:`Resources`): the command line's or the file's counts, else chosen for the cores and
GPUs (:func:`choose_resources`), the same however many runs are pending, so a run's bits do not
depend on what trained beside it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ablate.core.runtime import RuntimeConfig
from ablate.launch.devices import gpu_ids


@dataclass(frozen=True)
class Resources:
    """How many runs go at once, how many torch threads each one gets, and the GPUs the
    workers are spread over (none: CPU runs)."""

    workers: int
    threads: int
    gpus: tuple[str, ...] = ()


def choose_resources(
    pending: int,
    workers: int | None = None,
    threads: int | None = None,
    cores: int | None = None,
    gpus: Sequence[str] = (),
    runs_per_device: int = 1,
) -> Resources:
    """Default: ``runs_per_device`` workers per GPU when runs use GPUs, else one per core (at
    most one per pending run). A run's torch threads are the cores per GPU slot, else 1,
    whatever the pending runs and workers: the thread count orders the float sums of matmuls
    and reductions, so a run trained alone (the last of a stage, one resumed after Ctrl-C)
    must get the threads it would have had beside others, or its bits differ
    (docs/results.md)."""
    cores = cores or os.cpu_count() or 1
    slots = len(gpus) * runs_per_device
    n = workers or max(1, min(pending, slots or cores))
    per_run = max(1, cores // slots) if slots else 1
    return Resources(workers=n, threads=threads or per_run, gpus=tuple(gpus))


def local_resources(
    runtime: RuntimeConfig, jobs: int, workers: int | None = None, threads: int | None = None
) -> Resources:
    """Workers x threads on this machine for ``jobs`` runs or studies at once: the command
    line's ``workers`` / ``threads``, else the file's ``runtime``, else chosen for the machine
    (:func:`choose_resources`); one of each for the simulator, whose runs take milliseconds.
    A launcher that runs them elsewhere chooses its own
    (:func:`ablate.launch.launchers.resources_for`)."""
    if runtime.backend == "simulate":
        return Resources(1, 1)
    gpus = gpu_ids(runtime.accelerator)
    res = choose_resources(
        jobs,
        workers or runtime.workers,
        threads or runtime.threads,
        gpus=gpus,
        runs_per_device=runtime.runs_per_device,
    )
    return res if runtime.processes() == 1 else replace(res, gpus=())  # DDP picks its own
