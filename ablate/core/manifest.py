"""The plan's record as the report reads it (``experiment.json``): :func:`plan_manifest` writes
what the stages planned, with the file's variants, seeds, factors, analysis and claims.
"""

from __future__ import annotations

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


def plan_manifest(
    experiment: Experiment, specs: list[RunSpec], decided: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What the report needs to know of the plan: variants in order, seeds, factors, run ids,
    and with ``decide:`` what the sequential design did (``decided``)."""
    return {
        "name": experiment.name,
        "description": experiment.description,
        "source": experiment.path,
        "variants": list(experiment.variants),
        "grid": [[key, levels] for key, levels in experiment.grid.items()],  # ordered
        "factors": experiment.factors,
        "convert": (
            {"source": experiment.convert.source, "bias": experiment.convert.bias}
            if experiment.convert
            else None
        ),
        "seeds": experiment.seeds,
        "min_effect": experiment.analysis.min_effect,
        "analysis": experiment.analysis.model_dump(mode="json"),
        "stages": planned_groups(experiment),
        "spike_factor": experiment.analysis.spike_factor,
        "spike_window": experiment.analysis.spike_window,
        "usable_within": experiment.max_lr.within if experiment.max_lr else None,
        "warmup_range": (
            [experiment.curve.warmup_min, experiment.curve.warmup_max]
            if experiment.curve and experiment.curve.warmup_trials
            else None
        ),
        "search_startup": experiment.search.startup_trials() if experiment.search else None,
        "command_line": experiment.command_line,  # what --set / --seeds changed in the file
        **({"decide": decided} if decided else {}),
        **({"claims": claims_manifest(experiment)} if experiment.claims else {}),
        "criterion": criterion_text(experiment.base.train.stability),
        "runs": [
            {
                "variant": s.variant,
                "seed": s.seed,
                "run_id": s.run_id,
                "group": s.group,
                "lr": s.config.train.lr,
                "warmup_steps": s.config.train.warmup_steps,
                "init_from": s.init_from,
            }
            for s in specs
        ],
    }
