"""The sections of an experiment file that configure its stages: ``sweep``, ``search``,
``curve``, ``max_lr`` and ``decide`` (what each one runs is in :mod:`ablate.core.stages`), and
the LR lattice they share (:func:`lattice`).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from ablate.core.section import Seed, StrictSection


def _check_range(low: float, high: float, what: str) -> None:
    if not low < high:
        raise ValueError(f"{what}: the minimum ({low:g}) must be below the maximum ({high:g})")


def lattice(low: float, high: float, per_octave: int) -> list[float]:
    """The LRs 2^(k / per_octave) from ``low`` to ``high`` (both included when on it): exact
    powers, so lattices of 2, 4 and 8 points an octave share their common points bit for bit."""
    first = math.ceil(math.log2(low) * per_octave - 1e-9)
    last = math.floor(math.log2(high) * per_octave + 1e-9)
    return [2.0 ** (k / per_octave) for k in range(first, last + 1)]


class SweepConfig(StrictSection):
    """A log-spaced learning-rate grid run for every variant and seed: final loss against LR.

    Either ``points`` evenly spaced from lr_min to lr_max, or (``per_octave``) the lattice
    2^(k / per_octave) of that range, continued more coarsely (every 2^(k / coarse_per_octave))
    up to ``coarse_max``: fine through the basin, coarse on to the divergence edge."""

    lr_min: float = Field(1e-4, gt=0, le=100)
    lr_max: float = Field(1e-1, gt=0, le=100)
    points: int = Field(7, ge=2, le=200)
    per_octave: int | None = Field(
        None, ge=1, le=16, description="lattice points per doubling (then points is unused)"
    )
    coarse_max: float | None = Field(
        None, gt=0, le=100, description="per_octave: the coarse lattice continues up to here"
    )
    coarse_per_octave: int = Field(2, ge=1, le=16, description="points per doubling above lr_max")
    seeds: list[Seed] | None = Field(None, min_length=1, description="default: the experiment's")
    tokens: int | None = Field(None, ge=1, description="budget of a sweep run; default train's")

    @model_validator(mode="after")
    def _ordered(self) -> SweepConfig:
        _check_range(self.lr_min, self.lr_max, "sweep.lr_min/lr_max")
        if self.coarse_max is not None:
            if self.per_octave is None:
                raise ValueError("sweep.coarse_max needs sweep.per_octave (a lattice grid)")
            _check_range(self.lr_max, self.coarse_max, "sweep.lr_max/coarse_max")
            if self.per_octave % self.coarse_per_octave:
                raise ValueError(
                    f"sweep.coarse_per_octave ({self.coarse_per_octave}) must divide "
                    f"sweep.per_octave ({self.per_octave}): the coarse points lie on the lattice"
                )
        return self

    def lrs(self) -> list[float]:
        """The grid: the lattice (fine, then coarse) with ``per_octave``, else ``points``
        learning rates evenly spaced in log from lr_min to lr_max."""
        if self.per_octave is not None:
            fine = lattice(self.lr_min, self.lr_max, self.per_octave)
            if self.coarse_max is None:
                return fine
            coarse = lattice(self.lr_max, self.coarse_max, self.coarse_per_octave)
            return fine + [lr for lr in coarse if lr > fine[-1]]
        ratio = (self.lr_max / self.lr_min) ** (1 / (self.points - 1))
        return [self.lr_min * ratio**i for i in range(self.points)]


class SearchConfig(StrictSection):
    """An Optuna study per variant over learning rate (log) and warmup; objective: val loss."""

    n_trials: int = Field(20, ge=1, le=100_000)
    timeout_s: float | None = Field(None, gt=0)
    lr_min: float = Field(1e-4, gt=0, le=100)
    lr_max: float = Field(1.0, gt=0, le=100)
    warmup_min: int = Field(0, ge=0)
    warmup_max: int = Field(100, ge=0)
    sampler: Literal["tpe", "random"] = "tpe"
    startup: int | None = Field(
        None,
        ge=0,
        description="TPE's random start-up trials, below n_trials; default half of n_trials, "
        "at most 10 (Optuna's default)",
    )
    sampler_seed: int = Field(0, ge=0)
    parallel_trials: int = Field(
        1,
        ge=1,
        le=256,
        description="trials a study runs at once: each round asks this many (TPE with a "
        "constant liar), trains them together and tells them all before the next",
    )
    pruner: Literal["median", "none"] = "median"
    seed: Seed | None = Field(
        None,
        description="run seed of every trial; default: one above the largest of seeds, so the "
        "tuned comparison is scored on seeds the search did not select on",
    )
    tokens: int | None = Field(None, ge=1, description="budget of a trial; default train's")

    @model_validator(mode="after")
    def _ordered(self) -> SearchConfig:
        _check_range(self.lr_min, self.lr_max, "search.lr_min/lr_max")
        if self.warmup_min > self.warmup_max:
            raise ValueError("search.warmup_min must be <= search.warmup_max")
        if self.startup is not None and self.sampler != "tpe":
            raise ValueError("search.startup applies to sampler tpe only (random is all start-up)")
        if self.startup is not None and self.startup >= self.n_trials:
            raise ValueError(
                f"search.startup ({self.startup}) must be below n_trials ({self.n_trials}): a "
                "TPE study that stops at its random start-up never searched; for a random "
                "search on purpose write sampler: random"
            )
        return self

    def startup_trials(self) -> int:
        """TPE's random start-up: ``startup``, else half of ``n_trials`` up to 10, so a short
        study still gets past it (Optuna's own default, 10, would leave a 5-trial study all
        random)."""
        return self.startup if self.startup is not None else min(10, self.n_trials // 2)


class CurveConfig(StrictSection):
    """Each variant's LR optimum from its own loss curve: every variant at every lattice LR
    2^(k / per_octave) of the range on curve seeds disjoint from the final ones, at the final
    budget; the range grows by an octave on the side where a curve's lowest point lies at its
    edge, up to ``extend`` octaves (:mod:`ablate.core.optimum` fits it). With ``stop_step``,
    points far above the best at that step stop there (:mod:`ablate.core.early_stop`)."""

    seeds: list[Seed] | None = Field(
        None, min_length=2, description="default: the two above the largest of seeds"
    )
    per_octave: int = Field(2, ge=1, le=16, description="curve points per doubling of the LR")
    lr_min: float = Field(1e-3, gt=0, le=100)
    lr_max: float = Field(3e-2, gt=0, le=100)
    extend: int = Field(2, ge=0, le=10, description="octaves the range may grow at an edge")
    tokens: int | None = Field(None, ge=1, description="budget of a curve run; default train's")
    warmup_trials: int = Field(
        0,
        ge=0,
        le=1000,
        description="a TPE study per variant over warmup at its optimum LR (0: none)",
    )
    warmup_startup: int = Field(4, ge=1, description="of those, the sampler's random start-up")
    warmup_min: int = Field(0, ge=0)
    warmup_max: int = Field(100, ge=0)
    warmup_grid: list[int] | None = Field(
        None,
        min_length=2,
        description="in place of the TPE study, each of these warmups tried once per variant "
        "on every curve seed (queued trials of its Optuna study), e.g. the octaves 1/8, 1/4 "
        "and 1/2 of the run: the warmup needs finding only to where it moves the loss "
        "(docs/early-stop.md)",
    )
    warmup_steps: int | None = Field(
        None,
        ge=0,
        description="in place of a warmup study, the warmup the curve and every tuned run train "
        "at, declared (e.g. a quarter of the run, where every committed study found the loss flat "
        "to within min_effect: docs/early-stop.md), so the LR is chosen at the warmup it trains "
        "at; none: the study's best, else the file's warmup",
    )
    sampler_seed: int = Field(0, ge=0)
    stop_step: int | None = Field(
        None,
        ge=1,
        description="an evaluation step at which every curve run pauses and the points far "
        "above the best stop there (docs/early-stop.md); none: every point trains to the end",
    )
    stop_margin: float = Field(
        0.2,
        gt=0,
        le=10,
        description="nats above the best point at stop_step, mean over the curve seeds, "
        "beyond which a point stops",
    )

    @model_validator(mode="after")
    def _ordered(self) -> CurveConfig:
        _check_range(self.lr_min, self.lr_max, "curve.lr_min/lr_max")
        if self.warmup_min > self.warmup_max:
            raise ValueError("curve.warmup_min must be <= curve.warmup_max")
        if self.warmup_grid is not None:
            if self.warmup_trials:
                raise ValueError(
                    "curve.warmup_grid and curve.warmup_trials are two studies of the warmup: "
                    "give one (a grid tries each of its warmups, a TPE study warmup_trials)"
                )
            if min(self.warmup_grid) < 0 or len(set(self.warmup_grid)) < len(self.warmup_grid):
                raise ValueError(
                    f"curve.warmup_grid {self.warmup_grid}: distinct warmups of 0 steps or more"
                )
        if self.warmup_steps is not None and (self.warmup_grid or self.warmup_trials):
            raise ValueError(
                "curve.warmup_steps declares the tuned runs' warmup; curve.warmup_grid and "
                "curve.warmup_trials search it: give one"
            )
        if self.warmup_trials and self.warmup_startup >= self.warmup_trials:
            raise ValueError(
                f"curve.warmup_startup ({self.warmup_startup}) must be below warmup_trials "
                f"({self.warmup_trials}): the sampler must get past its random start-up"
            )
        return self

    def warmup_study_trials(self) -> int:
        """Trials of each variant's warmup study: the grid's warmups, else ``warmup_trials``."""
        return len(self.warmup_grid) if self.warmup_grid else self.warmup_trials

    def warmup_span(self) -> tuple[int, int]:
        """The warmups the study searches: the grid's ends, else warmup_min to warmup_max."""
        if self.warmup_grid:
            return min(self.warmup_grid), max(self.warmup_grid)
        return self.warmup_min, self.warmup_max

    def lrs(self, low_octaves: int = 0, high_octaves: int = 0) -> list[float]:
        """The lattice LRs of the range, grown by these octaves below and above it."""
        return lattice(
            self.lr_min / 2.0**low_octaves, self.lr_max * 2.0**high_octaves, self.per_octave
        )


class MaxLRConfig(StrictSection):
    """Each seed's maximum stable LR, bracketed on its own on one lattice of LRs shared by every
    variant (2^(k / per_octave)), and the variant's median over seeds with an interval."""

    seeds: list[Seed] | None = Field(None, min_length=1, description="default: the experiment's")
    start: float | None = Field(
        None,
        gt=0,
        description="first probe; default the largest stable LR the plan's runs stored at the "
        "probes' budget, else the search's best LR, else train.lr",
    )
    per_octave: int = Field(
        8, ge=1, le=64, description="lattice points per doubling: each bracket 2^(1/per_octave)"
    )
    factor: float = Field(
        4.0, gt=1, le=1000, description="coarse move while bracketing: a power of 2^(1/per_octave)"
    )
    lr_min: float = Field(1e-6, gt=0)
    lr_max: float = Field(100.0, gt=0)
    parallel_seeds: int = Field(
        1,
        ge=1,
        le=256,
        description="seeds bracketed at once: waves of this many, each round one probe per "
        "seed trained together; a wave's seeds start from the boundaries of the waves before",
    )
    within: float | None = Field(
        0.1,
        gt=0,
        le=10,
        description="usable-LR boundary: nats above the seed's loss at the tuned optimum a "
        "walk in 2^(1/4) steps may reach (null: no walk)",
    )
    walk_step: int | None = Field(
        None,
        ge=1,
        description="an evaluation step at which every walk point the usable stage trains is "
        "held: one whose val loss there, paired with its seed's start, lies more than "
        "walk_margin_above nats over the band's edge stops as above the band, one more than "
        "walk_margin_within under it as within; the rest train to the end "
        "(docs/early-stop.md); none: every point trains to the end",
    )
    walk_margin_within: float = Field(
        0.05,
        gt=0,
        le=10,
        description="nats under the band's edge (within) at walk_step beyond which a held walk "
        "point stops as within the band",
    )
    walk_margin_above: float = Field(
        0.1,
        gt=0,
        le=10,
        description="nats over the band's edge at walk_step beyond which a held walk point "
        "stops as above the band (wider: a gap near the edge shrinks by the end of a run)",
    )
    tokens: int | None = Field(None, ge=1, description="budget of a probe run; default train's")
    stop_step: int | None = Field(
        None,
        ge=1,
        description="hold every probe at this step of its budget: one that has not blown up by "
        "then counts as not diverged, and only the divergence edge is bracketed (the "
        "learned-at-all edge needs the whole budget and is not measured); every divergence in "
        "the committed real runs came by step 32 of 256 "
        "(docs/early-stop.md); none: every probe trains to the end",
    )
    margins: list[float] = Field(
        default_factory=lambda: [0.05, 0.1, 0.2, 0.3],
        min_length=1,
        description="collapse margins the quality boundary is re-derived at from stored runs",
    )

    @model_validator(mode="after")
    def _ordered(self) -> MaxLRConfig:
        _check_range(self.lr_min, self.lr_max, "max_lr.lr_min/lr_max")
        steps = math.log2(self.factor) * self.per_octave
        if abs(steps - round(steps)) > 1e-6:
            raise ValueError(
                f"max_lr.factor {self.factor:g} is not a whole number of lattice steps "
                f"(2^(1/{self.per_octave})); use e.g. 2, 4 or 8"
            )
        return self

    def coarse_steps(self) -> int:
        """Lattice steps per coarse move."""
        return round(math.log2(self.factor) * self.per_octave)


class DecideConfig(StrictSection):
    """``decide:``: matched seeds added to the leading comparison, ``step`` at a time, until
    every one of its comparisons is different or equivalent, or ``max_seeds`` is reached, or
    (``futility``) the seeds left cannot decide it (:mod:`ablate.core.sequential`)."""

    max_seeds: int = Field(
        ...,
        ge=3,
        description="the most seeds the leading comparison may take; it looks at len(seeds), "
        "+step, …, max_seeds and tests at α / (number of looks) at each",
    )
    step: int = Field(2, ge=1, description="seeds added between two looks")
    futility: bool = Field(
        False,
        description="from the second look on, stop once every undecided primary verdict needs, "
        "at its estimate and spread, more seeds than max_seeds leaves (it never says more than "
        "the looks would: an *inconclusive* on fewer seeds)",
    )
