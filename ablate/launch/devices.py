"""Which GPU each pool worker trains on, and whether ``runtime.runs_per_device`` runs fit on one.

A local pool on a machine with GPUs starts one worker per GPU times ``runs_per_device``
(:func:`ablate.launch.resources.choose_resources`); each worker takes the next slot of a counter
the pool shares and sees only its GPU (``CUDA_VISIBLE_DEVICES``, set before torch touches CUDA:
:func:`take_device`), so worker i trains on GPU i mod n, ``runs_per_device`` workers to a GPU.
A run's bits do not depend on its neighbours: each is its own process with its own device
state. Before such a pool starts, the executor (:func:`ablate.launch.preflight.check_fit`) has
one worker train a few steps of each distinct run shape on the first GPU
(:func:`ablate.launch.preflight.step_memory`) and refuses, as bad input, a ``runs_per_device``
whose runs would not fit that GPU's free memory (:func:`fit_error`). Torch is imported only
where a GPU is asked about.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ablate.core.config import RunConfig
from ablate.core.runtime import RuntimeConfig

VISIBLE = "CUDA_VISIBLE_DEVICES"
# a CUDA context's memory per process (torch's kernels, cuBLAS's workspace), which the
# allocator's peak does not count; an estimate, not measured here (no GPU was lent)
CONTEXT_MB = 512.0


def gpu_ids(accelerator: str) -> tuple[str, ...]:
    """The CUDA devices runs may use, as ``CUDA_VISIBLE_DEVICES`` names them: none for
    ``cpu``; for ``cuda`` / ``auto`` the devices torch counts, named as this process sees them
    (its own ``CUDA_VISIBLE_DEVICES`` where set)."""
    if accelerator == "cpu":
        return ()
    import torch

    count = torch.cuda.device_count()
    named = named_gpus()
    return named[:count] if named else tuple(str(i) for i in range(count))


def named_gpus() -> tuple[str, ...]:
    """The GPUs this process's ``CUDA_VISIBLE_DEVICES`` names (in a Slurm task: those Slurm
    bound to it; none where it is unset), read without torch."""
    return tuple(d.strip() for d in os.environ.get(VISIBLE, "").split(",") if d.strip())


@contextmanager
def visible_gpu(device: str) -> Iterator[None]:
    """Within: this process's ``CUDA_VISIBLE_DEVICES`` is ``device`` (so a process started
    here sees only it), restored after."""
    before = os.environ.get(VISIBLE)
    os.environ[VISIBLE] = device
    try:
        yield
    finally:
        if before is None:
            del os.environ[VISIBLE]
        else:
            os.environ[VISIBLE] = before


def run_gpus(runtime: RuntimeConfig) -> tuple[str, ...]:
    """The GPUs that pool workers are spread over (:func:`gpu_ids`); none for a DDP run, whose
    processes take their devices themselves."""
    return gpu_ids(runtime.accelerator) if runtime.processes() == 1 else ()


def take_device(gpus: Sequence[str], counter: Any) -> str:
    """In a pool worker, before torch touches CUDA: take the next slot of the pool's shared
    ``counter`` (a ``multiprocessing.Value``) and see only GPU slot mod n; returns its name."""
    with counter.get_lock():
        slot = counter.value
        counter.value += 1
    device = gpus[slot % len(gpus)]
    os.environ[VISIBLE] = device
    return device


@dataclass(frozen=True)
class Measured:
    """What one run shape needs on a GPU and what the GPU has free, in MiB."""

    run_mb: float  # the allocator's reserved peak over a few steps, plus a CUDA context
    free_mb: float  # free on the device, the measuring process's own context given back


def fit_error(runs_per_device: int, measured: Measured, device: str) -> str | None:
    """The one-line refusal where ``runs_per_device`` runs of ``measured.run_mb`` do not fit
    the device's free memory; None where they fit."""
    need = runs_per_device * measured.run_mb
    if need <= measured.free_mb:
        return None
    fit = math.floor(measured.free_mb / measured.run_mb)
    return (
        f"runtime.runs_per_device: {runs_per_device} runs of about {measured.run_mb / 1024:.2f} "
        f"GiB each (a measured step's peak plus {CONTEXT_MB / 1024:.2f} GiB of CUDA context) "
        f"need {need / 1024:.1f} GiB on GPU {device}, which has {measured.free_mb / 1024:.1f} "
        f"GiB free; at most {fit} fit"
    )


def shape_key(cfg: RunConfig) -> str:
    """What decides a run's GPU memory: its model, data, batch and precision."""
    train = cfg.train
    return "|".join(
        [cfg.model.model_dump_json(), cfg.data.model_dump_json(), str(train.batch_size)]
        + [train.precision, str(train.z_loss)]
    )
