"""The run groups of the pipeline, as one table: every list of them elsewhere derives from it.

A run's ``group`` (in its summary and the plan's record) says which stage trained it. Each
:class:`RunGroup` names the group, the pipeline stage that trains it
(:data:`ablate.launch.stages.STAGES`), when a file plans it, and how the store finds its
runs: in the plan's record (most), by the group alone (the warmup studies' trials), or through
the study that names them (search trials, max-LR probes). ``decide:`` plans no group of its own:
its runs are more seeds of the tuned A/B and its cross-over, stored as ``tuned`` and
``crossover``.

:data:`RUN_GROUPS` is in the order the plan's record has always listed them (``decide`` after
the walks, though it trains after the cross-over), so stored plans and reports keep their bytes.
The orders derived from it: :func:`planned_groups` (what a file plans), :data:`STATUS_ORDER`
(``ablate status``), :data:`REPORT_ORDER` (the report's Stages line, before the studies' runs)
and :data:`BEFORE_MAX_LR` (the stages a finished max-LR study comes after).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ablate.core.boundary import probes_per_seed
from ablate.core.config import RunConfig
from ablate.core.experiment import Experiment
from ablate.core.plan import (
    RunSpec,
    Settings,
    plan_convert,
    plan_curve,
    plan_sweep,
    plan_tuned,
)

Planned = Callable[[Experiment], bool]
Count = Callable[[Experiment, RunConfig, str], tuple[int, int]]  # (runs, steps) of one variant
USABLE_WALK = 5  # runs a usable walk takes per seed, about: the reference's end within an octave


@dataclass(frozen=True)
class RunGroup:
    """One group of runs: its name, the stage that trains it, when a file plans it, and how
    the store finds its runs."""

    name: str
    stage: str
    planned: Planned
    count: Count  # at most, for the estimate: (runs of one variant, steps per run)
    found_by: str = "plan"  # "plan": the plan's record; "group": the group alone; "study"
    stored_as: str | None = None  # another group's name, where its runs are stored as those
    section: str | None = None  # the file's section that plans it (None: main, or a choice's)


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
    return experiment.curve is not None and bool(experiment.curve.warmup_study_trials())


def _counted(specs: list[RunSpec]) -> tuple[int, int]:
    """(runs, steps of the longest) of planned specs; (0, 0) for none."""
    return len(specs), max((s.config.steps() for s in specs), default=0)


def _steps(tokens: int | None, config: RunConfig) -> int:
    """Steps of a run of ``tokens`` (the variant's budget where None)."""
    return (tokens or config.train.tokens) // config.tokens_per_step()


def _main(experiment: Experiment, config: RunConfig, variant: str) -> tuple[int, int]:
    return len(experiment.seeds), config.steps()


def _sweep(experiment: Experiment, config: RunConfig, variant: str) -> tuple[int, int]:
    return _counted([s for s in plan_sweep(experiment) if s.variant == variant])


def _search(experiment: Experiment, config: RunConfig, variant: str) -> tuple[int, int]:
    search = experiment.search
    assert search is not None
    return search.n_trials, _steps(search.tokens, config)


def _curve(experiment: Experiment, config: RunConfig, variant: str) -> tuple[int, int]:
    """At its range: growing at an edge adds more."""
    return _counted([s for s in plan_curve(experiment) if s.variant == variant])


def _warmup(experiment: Experiment, config: RunConfig, variant: str) -> tuple[int, int]:
    curve = experiment.curve
    assert curve is not None
    return curve.warmup_study_trials() * len(experiment.curve_seeds()), _steps(curve.tokens, config)


def _tuned(experiment: Experiment, config: RunConfig, variant: str) -> tuple[int, int]:
    """Planned at the base's settings: the choice changes LR and warmup, not the count; a
    cross-over has at most as many (none where both chose the same)."""
    at_base = {variant: Settings(config.train.lr, config.train.warmup_steps)}
    return _counted(plan_tuned(experiment, at_base))


def _usable(experiment: Experiment, config: RunConfig, variant: str) -> tuple[int, int]:
    return USABLE_WALK * _max_lr_seeds(experiment), config.steps()


def _decide(experiment: Experiment, config: RunConfig, variant: str) -> tuple[int, int]:
    """At most ``max_seeds`` − len(seeds) more seeds of the leading comparison: each a tuned
    run, and a cross-over run too where the file chooses settings."""
    decide = experiment.decide
    assert decide is not None
    per_seed = 2 if _chooses(experiment) else 1
    return per_seed * (decide.max_seeds - len(experiment.seeds)), config.steps()


def _max_lr(experiment: Experiment, config: RunConfig, variant: str) -> tuple[int, int]:
    cfg = experiment.max_lr
    assert cfg is not None
    probes = max_lr_probes(experiment, cfg.start or config.train.lr)
    steps = _steps(cfg.tokens, config)
    return probes * _max_lr_seeds(experiment), min(steps, cfg.stop_step or steps)


def _convert(experiment: Experiment, config: RunConfig, variant: str) -> tuple[int, int]:
    """The continued and converted runs, counted with their source ``variant``."""
    convert = experiment.convert
    assert convert is not None
    return _counted(plan_convert(experiment)) if variant == convert.source else (0, 0)


def _max_lr_seeds(experiment: Experiment) -> int:
    cfg = experiment.max_lr
    assert cfg is not None
    return len(cfg.seeds or experiment.seeds)


def max_lr_probes(experiment: Experiment, start: float) -> int:
    """An upper bound on one seed's probes from a stable ``start`` (the first seed's; the
    others start at its boundary and take fewer): its quality bracket, then its divergence
    bracket from there; the divergence bracket alone where ``max_lr.stop_step`` holds them."""
    cfg = experiment.max_lr
    assert cfg is not None
    brackets = 1 if cfg.stop_step is not None else 2
    return brackets * probes_per_seed(start, cfg.lr_max, cfg.per_octave, cfg.coarse_steps())


RUN_GROUPS: tuple[RunGroup, ...] = (
    RunGroup("main", "shared", lambda experiment: True, _main),
    RunGroup("sweep", "shared", _has("sweep"), _sweep, section="sweep"),
    RunGroup("search", "search", _has("search"), _search, found_by="study", section="search"),
    RunGroup("curve", "curve", _has("curve"), _curve, section="curve"),
    RunGroup("warmup", "curve", _warmup_study, _warmup, found_by="group", section="curve"),
    RunGroup("tuned", "tuned", _chooses, _tuned),
    RunGroup("crossover", "crossover", _chooses, _tuned),
    RunGroup("usable", "usable", _walks, _usable, section="max_lr"),
    RunGroup("decide", "decide", _has("decide"), _decide, stored_as="tuned", section="decide"),
    RunGroup("max_lr", "max_lr", _has("max_lr"), _max_lr, found_by="study", section="max_lr"),
    RunGroup("convert", "convert", _has("convert"), _convert, section="convert"),
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


def planned_runs(
    experiment: Experiment, config: RunConfig, variant: str = ""
) -> dict[str, tuple[int, int]]:
    """Per group the file plans, in :data:`RUN_GROUPS`' order: (runs of one variant at most,
    steps per run), by each group's ``count``."""
    planned = [g for g in RUN_GROUPS if g.planned(experiment)]
    return {g.name: g.count(experiment, config, variant) for g in planned}


def study_runs(
    experiment: Experiment, config: RunConfig, variant: str = ""
) -> dict[str, tuple[int, int]]:
    """:func:`planned_runs` beyond the main runs."""
    runs = planned_runs(experiment, config, variant)
    del runs["main"]
    return runs
