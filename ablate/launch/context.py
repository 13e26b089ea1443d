"""What every stage of the pipeline is given: one :class:`Context` (the experiment, its results
folder, the executor, the plan so far) and one shape (:class:`Stage`: its name, ``wanted(ctx)``,
``run(ctx)`` and, for a stage that trains, the title its header gives).
:data:`ablate.launch.stages.STAGES` lists the stages in the order they run, each from its own
module of :mod:`ablate.launch.stages`; a new stage is one such module and its line there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from ablate.core import store
from ablate.core.experiment import Experiment
from ablate.core.folders import ExperimentFolder
from ablate.core.jobs import JobClock
from ablate.core.manifest import plan_manifest
from ablate.core.plan import RunSpec, Settings
from ablate.core.record import RunRecord
from ablate.core.studies import Studies
from ablate.launch.backends import make_executor
from ablate.launch.execute import Executor
from ablate.launch.launchers import resources_for
from ablate.launch.resources import Resources


@dataclass
class Plan:
    """What the stages have planned and found so far: every run (``specs``; the convert runs
    apart in ``continued``, they train last), the studies' results, each variant's chosen
    (LR, warmup) for the tuned A/B, ``decide:``'s record and whether the report was rebuilt."""

    specs: list[RunSpec] = field(default_factory=list)
    continued: list[RunSpec] = field(default_factory=list)
    studies: Studies = field(default_factory=Studies)
    chosen: dict[str, Settings] = field(default_factory=dict)
    decided: dict[str, Any] | None = None
    rebuilt: bool = False


@dataclass
class Context:
    """Where an experiment's runs and report go, how many processes train them, the executor
    every stage obtains its runs through and the plan the stages build."""

    experiment: Experiment
    results_dir: Path
    report_dir: Path
    workers: int | None = None
    threads: int | None = None
    storage: str | None = None
    console: Console = field(default_factory=lambda: Console(stderr=True))
    given: InitVar[Executor | None] = None  # default: the one the runtime names
    executor: Executor = field(init=False)
    plan: Plan = field(default_factory=Plan)
    job: JobClock | None = None  # this invocation's clock, until its record is stored

    def __post_init__(self, given: Executor | None) -> None:
        runtime = self.experiment.base.runtime
        self.executor = given or make_executor(
            runtime, self.results_dir, self.workers, self.threads, self.console
        )

    @property
    def folder(self) -> ExperimentFolder:
        """The experiment's results folder."""
        return ExperimentFolder.of(self.results_dir, self.experiment.name)

    def say(self, text: str) -> None:
        """Print one plain line."""
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def resources(self, jobs: int) -> Resources:
        """Workers and threads for ``jobs`` studies at once (:func:`resources_for`)."""
        return resources_for(self.experiment.base.runtime, jobs, self.workers, self.threads)

    def execute(self, specs: list[RunSpec]) -> list[RunRecord]:
        """Every spec through the executor (skip stored, run the rest)."""
        return self.executor.run(specs)

    def write_manifest(self, specs: list[RunSpec] | None = None) -> None:
        """The plan as the report reads it (``experiment.json``): ``specs`` (default: the
        plan's runs and its convert runs), with ``decide:``'s record."""
        planned = specs if specs is not None else self.plan.specs + self.plan.continued
        manifest = plan_manifest(self.experiment, planned, self.plan.decided)
        store.write_manifest(self.folder, manifest)


@dataclass(frozen=True)
class Stage:
    """One stage: its name, whether it has work in this experiment at this point of the plan,
    and what it does (plans runs, obtains them through the executor, updates the plan)."""

    name: str
    wanted: Callable[[Context], bool]
    run: Callable[[Context], None]
    title: str | None = None  # what a stage that trains does, as its header names it


def always(ctx: Context) -> bool:
    """Wanted in every experiment."""
    return True


def configured(section: str) -> Callable[[Context], bool]:
    """Wanted where the experiment has ``section``."""
    return lambda ctx: getattr(ctx.experiment, section) is not None


def chose(ctx: Context) -> bool:
    """Wanted where a search or curve chose a setting for the tuned A/B."""
    return bool(ctx.plan.chosen)
