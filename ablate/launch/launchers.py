"""The launchers (``runtime.launcher``): where a stage's runs execute, one registered object per
name (:mod:`ablate.core.launchers` reads the names; this module loads the objects).

A launcher is what the rest of ablate asks, and the only place that knows it: the executor the
stages get (around the backend's, the local trainer or the simulator:
:func:`ablate.launch.backends.backend_executor`), how many runs or studies go at once, and the
jobs it has submitted for ``ablate status``. ablate's own are ``local``
(:data:`ablate.launch.backends.LOCAL`) and ``slurm`` (:data:`ablate.launch.slurm.SLURM`); another
package adds one by naming its object under the entry-point group ``ablate.launchers`` in its
``pyproject.toml``, as ablate's does for its two. tests/launch/test_launchers.py runs the same
behaviour tests over every registered launcher.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rich.console import Console

from ablate.core.folders import ExperimentFolder
from ablate.core.launchers import launcher_names, registered
from ablate.core.runtime import RuntimeConfig
from ablate.launch.execute import Executor
from ablate.launch.resources import Resources, local_resources


@dataclass(frozen=True)
class Job:
    """A run's job as its launcher submitted it: its id, the run's stage (group) and what the
    scheduler says now: ``queued``, ``running``, ``ended`` (without it, nothing stored), or
    None where it could not be read this time."""

    job_id: str
    group: str
    state: str | None


class Launcher(Protocol):
    """What a launcher provides. ``label`` names its jobs in ``ablate status`` lines."""

    label: str

    def executor(
        self,
        runtime: RuntimeConfig,
        results_dir: Path,
        workers: int | None,
        threads: int | None,
        console: Console | None,
    ) -> Executor:
        """The executor the stages get for ``runtime`` and this results folder."""
        ...

    def resources(self, runtime: RuntimeConfig, jobs: int) -> Resources | None:
        """How many of ``jobs`` runs or studies go at once, with how many threads each; None
        to let the machine decide (:func:`ablate.launch.resources.choose_resources`)."""
        ...

    def jobs(self, folder: ExperimentFolder) -> dict[str, Job]:
        """The jobs it has submitted for an experiment's runs, by run id (none: empty)."""
        ...


@functools.cache
def launcher(name: str) -> Launcher:
    """The launcher registered as ``name`` (KeyError for a name not registered: the config
    refuses those first)."""
    points = registered()
    if name not in points:
        raise KeyError(f"no launcher {name!r}; registered: {', '.join(launcher_names())}")
    found: Launcher = points[name].load()
    return found


def every_launcher() -> dict[str, Launcher]:
    """Every registered launcher, by name."""
    return {name: launcher(name) for name in launcher_names()}


def resources_for(
    runtime: RuntimeConfig, jobs: int, workers: int | None = None, threads: int | None = None
) -> Resources:
    """The one choice of workers x threads for ``jobs`` runs or studies at once: the
    launcher's where it makes one (Slurm: every study at once, up to its array parallelism,
    each waiting on its trials' jobs), else this machine's (:func:`local_resources`)."""
    chosen = launcher(runtime.launcher).resources(runtime, jobs)
    return chosen or local_resources(runtime, jobs, workers, threads)
