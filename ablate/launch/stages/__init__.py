"""The pipeline's stages, one module each, in the order they run: :data:`STAGES`.

Each module holds its stage's work and one :class:`ablate.launch.context.Stage` (``STAGE``):
its name, when it is wanted at that point of the plan, what it runs and, for a stage that
trains, its header's title. The run groups a stage trains, when a file plans them and how many
runs they take are :data:`ablate.core.stages.RUN_GROUPS` (a test holds the two tables to the
same stages). A new stage is a module here, its line below and, where it trains runs of its
own, its group in that table. Work that loads Optuna, scipy or matplotlib is imported inside
the stage that needs it, so a file without studies or ``decide:`` never loads them.
"""

from __future__ import annotations

from ablate.core.experiment import Experiment
from ablate.core.stages import planned_groups
from ablate.launch.context import Stage
from ablate.launch.stages import (
    convert,
    crossover,
    curve,
    decide,
    job,
    max_lr,
    report,
    search,
    shared,
    studies,
    tuned,
    usable,
)

STAGES: tuple[Stage, ...] = tuple(
    module.STAGE
    for module in (
        shared,
        search,
        curve,
        tuned,
        crossover,
        decide,
        usable,
        max_lr,
        studies,
        convert,
        job,
        report,
    )
)


def training_stages(experiment: Experiment) -> list[str]:
    """The stages of :data:`STAGES` that train runs for this file, in pipeline order."""
    planned = {"shared", *planned_groups(experiment)}
    return [s.name for s in STAGES if s.title is not None and s.name in planned]
