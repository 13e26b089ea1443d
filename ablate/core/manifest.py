"""The plan's record (``experiment.json``) as one frozen :class:`Manifest`: what the stages
planned (each run as a :class:`PlannedRun`), with the file's variants, seeds, factors, analysis
and claims. :func:`plan_manifest` makes it from the experiment and the planned specs;
:meth:`Manifest.stored` is the JSON the store writes and :meth:`Manifest.from_stored` reads it
back, a key that an earlier version did not store read as None (or its default), so every
report built from an older store rebuilds as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ablate.core.experiment import Experiment
from ablate.core.plan import RunSpec
from ablate.core.stability import criterion_text
from ablate.core.stages import planned_groups


def claims_manifest(experiment: Experiment) -> list[dict[str, Any]]:
    """The file's claims as the report reads them, each with its baseline resolved."""
    names = list(experiment.variants)
    return [
        {**claim.model_dump(mode="json"), "baseline": claim.against(names)}
        for claim in experiment.claims
    ]


@dataclass(frozen=True)
class PlannedRun:
    """One planned run as the record holds it: who, at which seed, its id, the stage that
    planned it (its group), its LR and warmup, and the run it continues (convert)."""

    variant: str
    seed: int
    run_id: str
    group: str = "main"
    lr: float | None = None
    warmup_steps: int | None = None
    init_from: str | None = None

    @classmethod
    def from_stored(cls, stored: dict[str, Any]) -> PlannedRun:
        return cls(**{key: stored[key] for key in RUN_KEYS if key in stored})

    def stored(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in RUN_KEYS}


RUN_KEYS = ("variant", "seed", "run_id", "group", "lr", "warmup_steps", "init_from")


@dataclass(frozen=True)
class Manifest:
    """The plan's record: what a report is built over besides the runs themselves."""

    name: str
    variants: list[str]
    seeds: list[int]
    runs: list[PlannedRun] = field(default_factory=list)
    description: str = ""
    source: str | None = None  # the experiment file
    grid: list[list[Any]] = field(default_factory=list)  # [[dotted key, levels]], in order
    factors: dict[str, dict[str, Any]] = field(default_factory=dict)  # variant -> its levels
    convert: dict[str, Any] | None = None  # {"source": variant, "bias": mapping}
    min_effect: float | None = None  # None: stored before it was kept
    analysis: dict[str, Any] | None = None  # the analysis: section; None: before it was kept
    stages: list[str] | None = None  # the groups planned; None: before they were kept
    spike_factor: float | None = None
    spike_window: int | None = None  # None: before it was kept
    usable_within: float | None = None
    warmup_range: list[int] | None = None
    search_startup: int | None = None
    command_line: dict[str, Any] = field(default_factory=dict)  # what --set / --seeds changed
    decide: dict[str, Any] | None = None  # decide:'s record, where it ran
    claims: list[dict[str, Any]] = field(default_factory=list)
    criterion: str | None = None  # the stability criterion in words
    curve_stop: dict[str, Any] | None = None  # the curve's early stop: {"step", "margin"}
    walk_hold: dict[str, Any] | None = None  # the walks' hold: {"step", "within", "above"}

    @classmethod
    def from_stored(cls, stored: dict[str, Any]) -> Manifest:
        """The record as ``experiment.json`` holds it."""
        found = {key: stored[key] for key in STORED_KEYS if key in stored}
        runs = [PlannedRun.from_stored(run) for run in stored.get("runs", [])]
        return cls(**{**found, "runs": runs})

    def stored(self) -> dict[str, Any]:
        """As ``experiment.json`` holds it: every key in its place, ``decide``, ``claims``,
        ``curve_stop`` and ``walk_hold`` only where there are any."""
        record = {key: getattr(self, key) for key in STORED_KEYS}
        for key in ("decide", "claims", "curve_stop", "walk_hold"):
            if not record[key]:
                del record[key]
        return {**record, "runs": [run.stored() for run in self.runs]}

    def group_ids(self, group: str) -> set[str]:
        """The run ids of one group's planned runs."""
        return {run.run_id for run in self.runs if run.group == group}


STORED_KEYS = (
    "name",
    "description",
    "source",
    "variants",
    "grid",
    "factors",
    "convert",
    "seeds",
    "min_effect",
    "analysis",
    "stages",
    "spike_factor",
    "spike_window",
    "usable_within",
    "warmup_range",
    "search_startup",
    "command_line",
    "decide",
    "claims",
    "criterion",
    "curve_stop",
    "walk_hold",
)


def plan_manifest(
    experiment: Experiment, specs: list[RunSpec], decided: dict[str, Any] | None = None
) -> Manifest:
    """What the report needs to know of the plan: variants in order, seeds, factors, run ids,
    and with ``decide:`` what the sequential design did (``decided``)."""
    analysis = experiment.analysis
    return Manifest(
        name=experiment.name,
        description=experiment.description,
        source=experiment.path,
        variants=list(experiment.variants),
        grid=[[key, levels] for key, levels in experiment.grid.items()],  # ordered
        factors=experiment.factors,
        convert=(
            {"source": experiment.convert.source, "bias": experiment.convert.bias}
            if experiment.convert
            else None
        ),
        seeds=experiment.seeds,
        min_effect=analysis.min_effect,
        analysis=analysis.model_dump(mode="json"),
        stages=planned_groups(experiment),
        spike_factor=analysis.spike_factor,
        spike_window=analysis.spike_window,
        usable_within=experiment.max_lr.within if experiment.max_lr else None,
        warmup_range=(
            list(experiment.curve.warmup_span())
            if experiment.curve and experiment.curve.warmup_study_trials()
            else None
        ),
        search_startup=experiment.search.startup_trials() if experiment.search else None,
        command_line=experiment.command_line,  # what --set / --seeds changed in the file
        decide=decided or None,
        claims=claims_manifest(experiment),
        criterion=criterion_text(experiment.base.train.stability),
        curve_stop=(
            {"step": experiment.curve.stop_step, "margin": experiment.curve.stop_margin}
            if experiment.curve and experiment.curve.stop_step
            else None
        ),
        walk_hold=(
            {
                "step": experiment.max_lr.walk_step,
                "within": experiment.max_lr.walk_margin_within,
                "above": experiment.max_lr.walk_margin_above,
            }
            if experiment.max_lr and experiment.max_lr.walk_step
            else None
        ),
        runs=[
            PlannedRun(
                s.variant,
                s.seed,
                s.run_id,
                s.group,
                s.config.train.lr,
                s.config.train.warmup_steps,
                s.init_from,
            )
            for s in specs
        ],
    )
