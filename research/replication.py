"""One replication of an estimator on the simulator: its outcome, and the design put on a
stated truth (:mod:`research.estimators` scores many)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.core.config import RunConfig
from ablate.core.experiment import Experiment


@dataclass(frozen=True)
class Outcome:
    """One replication: the estimate's error on the estimator's scale, and whether the
    interval it reports covered the truth (None: it reports none)."""

    error: float
    covered: bool | None = None


Replication = Callable[[Experiment, int, Path], Outcome]


def with_truth(design: Experiment, replication: int, simulate: dict[str, Any]) -> Experiment:
    """``design`` on the simulator with this replication's seed and ``simulate`` keys (the
    variants' truths), every variant config and the base alike."""

    def simulated(cfg: RunConfig) -> RunConfig:
        runtime = cfg.runtime.model_copy(update={"backend": "simulate"})
        merged = {**runtime.simulate.model_dump(), **simulate, "seed": replication}
        runtime.simulate = type(runtime.simulate)(**merged)
        return cfg.model_copy(update={"runtime": runtime})

    variants = {name: simulated(cfg) for name, cfg in design.variants.items()}
    return design.model_copy(update={"base": simulated(design.base), "variants": variants})


def two_variants(design: Experiment) -> tuple[str, str]:
    names = list(design.variants)
    if len(names) < 2:
        raise ValueError(f"{design.name}: the estimators compare two variants; it has one")
    return names[0], names[1]
