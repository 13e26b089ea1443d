"""The run groups of the pipeline, as one table: every list of them elsewhere derives from it.

A run's ``group`` (in its summary and the plan's record) says which stage trained it. Each
:class:`RunGroup` names the group, the pipeline stage that trains it
(:data:`ablate.launch.pipeline.STAGES`), when a file plans it, and how the store finds its
runs: in the plan's record (most), by the group alone (the warmup studies' trials), or through
the study that names them (search trials, max-LR probes). ``decide:`` plans no group of its own:
its runs are more seeds of the tuned A/B, stored as ``tuned``.

:data:`RUN_GROUPS` is in the order the plan's record has always listed them (``decide`` after
the walks, though it trains after the tuned A/B), so stored plans and reports keep their bytes.
The orders derived from it: :func:`planned_groups` (what a file plans), :data:`STATUS_ORDER`
(``ablate status``), :data:`REPORT_ORDER` (the report's Stages line, before the studies' runs)
and :data:`BEFORE_MAX_LR` (the stages a finished max-LR study comes after).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ablate.core.experiment import Experiment

Planned = Callable[[Experiment], bool]


@dataclass(frozen=True)
class RunGroup:
    """One group of runs: its name, the stage that trains it, when a file plans it, and how
    the store finds its runs."""

    name: str
    stage: str
    planned: Planned
    found_by: str = "plan"  # "plan": the plan's record; "group": the group alone; "study"
    stored_as: str | None = None  # another group's name, where its runs are stored as those


def _has(section: str) -> Planned:
    return lambda experiment: getattr(experiment, section) is not None


def _chooses(experiment: Experiment) -> bool:
    """A search or a curve chooses each variant's tuned settings."""
    return experiment.search is not None or experiment.curve is not None


def _walks(experiment: Experiment) -> bool:
    """The usable-LR walks: ``max_lr.within`` and a tuned optimum to walk from."""
    cfg = experiment.max_lr
    return cfg is not None and cfg.within is not None and _chooses(experiment)


def _warmup_study(experiment: Experiment) -> bool:
    return experiment.curve is not None and bool(experiment.curve.warmup_trials)


RUN_GROUPS: tuple[RunGroup, ...] = (
    RunGroup("main", "shared", lambda experiment: True),
    RunGroup("sweep", "shared", _has("sweep")),
    RunGroup("search", "search", _has("search"), found_by="study"),
    RunGroup("curve", "curve", _has("curve")),
    RunGroup("warmup", "curve", _warmup_study, found_by="group"),
    RunGroup("tuned", "tuned", _chooses),
    RunGroup("crossover", "crossover", _chooses),
    RunGroup("usable", "usable", _walks),
    RunGroup("decide", "decide", _has("decide"), stored_as="tuned"),
    RunGroup("max_lr", "max_lr", _has("max_lr"), found_by="study"),
    RunGroup("convert", "convert", _has("convert")),
)


def planned_groups(experiment: Experiment) -> list[str]:
    """The groups whose runs this file plans (the warmup studies' trials aside: the curve
    stage's), in :data:`RUN_GROUPS`' order."""
    return [g.name for g in RUN_GROUPS if g.found_by != "group" and g.planned(experiment)]


STORED = tuple(g for g in RUN_GROUPS if g.stored_as is None)  # the groups runs are stored as
STATUS_ORDER = tuple(g.name for g in STORED)
REPORT_ORDER = tuple(g.name for g in STORED if g.found_by != "study")
BY_GROUP = frozenset(g.name for g in RUN_GROUPS if g.found_by == "group")
BEFORE_MAX_LR = frozenset(
    g.name for g in RUN_GROUPS if g.stage not in ("shared", "max_lr", "convert")
)
