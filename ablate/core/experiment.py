"""The experiment-level sections of an experiment file, and the resolved :class:`Experiment`.

Besides the base run (:class:`ablate.core.config.RunConfig`) and its variants, a file may have a
``sweep``, a ``search``, a ``curve``, a ``max_lr``, a ``convert`` and a ``scale`` section;
:class:`ExperimentFile` is the file's top level as written, :class:`Experiment` what
:func:`ablate.core.load.load_experiment` resolves it to.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ablate.core.claims import ClaimConfig
from ablate.core.config import RunConfig, Seed, StrictSection


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
    edge, up to ``extend`` octaves (:mod:`ablate.core.optimum` fits it)."""

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
    sampler_seed: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> CurveConfig:
        _check_range(self.lr_min, self.lr_max, "curve.lr_min/lr_max")
        if self.warmup_min > self.warmup_max:
            raise ValueError("curve.warmup_min must be <= curve.warmup_max")
        if self.warmup_trials and self.warmup_startup >= self.warmup_trials:
            raise ValueError(
                f"curve.warmup_startup ({self.warmup_startup}) must be below warmup_trials "
                f"({self.warmup_trials}): the sampler must get past its random start-up"
            )
        return self

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
        description="first probe; default the largest stable LR stored at the probes' budget, "
        "else the search's best LR, else train.lr",
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
    tokens: int | None = Field(None, ge=1, description="budget of a probe run; default train's")
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


class ConvertConfig(StrictSection):
    """Swap the norms of a finished variant's weights and keep training (:mod:`ablate.nn.convert`).

    For every seed, the source run's final weights are loaded twice: once unchanged (the
    ``continued`` control) and once with ``target``'s norms (``converted``); both then train
    ``tokens`` more on the same batches at a constant ``lr`` after ``warmup_steps``.
    """

    source: str = Field(description="the variant whose finished runs are converted")
    target: dict[str, Any] = Field(
        default_factory=lambda: {"model.norm.kind": "rmsnorm"},
        description="dotted model.norm.* overrides that make the converted model",
    )
    bias: Literal["fold", "drop"] = Field(
        "fold",
        description="a source bias the target lacks: fold into the next linear layer where "
        "that is exact, else drop; or always drop",
    )
    tokens: int = Field(ge=1, description="continued-training budget of each run")
    lr: float | None = Field(
        None,
        gt=0,
        le=100,
        description="default: where the source schedule ended (lr x min_lr_ratio)",
    )
    warmup_steps: int = Field(0, ge=0)
    eval_interval: int | None = Field(None, ge=1, description="default: the source's")
    seeds: list[Seed] | None = Field(None, min_length=1, description="default: the experiment's")


class SizeConfig(StrictSection):
    """One model size of a ``scale:`` section: the width, and optionally depth and heads."""

    d_model: int = Field(ge=1)
    n_layers: int | None = Field(None, ge=1, description="default: the base's")
    n_heads: int | None = Field(None, ge=1, description="default: the base's")
    name: str | None = Field(None, description="label; default d<d_model>[-l<n_layers>]")

    def label(self) -> str:
        """The size's name in folders and tables."""
        if self.name:
            return self.name
        return f"d{self.d_model}" + (f"-l{self.n_layers}" if self.n_layers else "")

    def model_values(self) -> dict[str, int]:
        """The ``model`` section's keys this size sets, with their values."""
        return self.model_dump(exclude={"name"}, exclude_none=True)


class ScaleConfig(StrictSection):
    """Every variant at every size, each size an experiment of its own (``<name>.<label>``)."""

    sizes: list[SizeConfig] = Field(min_length=2)
    tokens_per_parameter: float | None = Field(
        None,
        gt=0,
        description="each size's train.tokens = this x its parameter count; default: "
        "train.tokens at every size",
    )


class ConvertPlan(BaseModel):
    """A resolved ``convert:`` section: the two continued-training configs and the mapping."""

    model_config = ConfigDict(frozen=True)

    source: str
    seeds: list[int]
    bias: str
    control: RunConfig  # the source's model, continued
    converted: RunConfig  # the target's model, continued


MIN_EFFECT = 0.02  # nats: about RMSNorm's lead over LayerNorm at T5 scale (Narang et al., 2021)
SPIKE_WINDOW = 50  # steps: a spike is judged against their median


class AnalysisConfig(StrictSection):
    """The report's analysis plan: its margins, its family-wise error and how the family
    shares it (:mod:`ablate.report.plan`, :mod:`ablate.report.verdict`)."""

    min_effect: float = Field(
        MIN_EFFECT,
        gt=0,
        description="the margin of a loss estimand (nats): a difference is equivalent within "
        "±min_effect, exceeds it, or is told how many seeds deciding it needs; default 0.02, "
        "about RMSNorm's lead over LayerNorm at T5 scale (Narang et al., 2021)",
    )
    lr_margin: float = Field(
        1.5,
        gt=1,
        description="the margin of an LR ratio (usable LR, divergence edge): equivalent "
        "within ×/÷lr_margin",
    )
    speed_margin: float = Field(
        1.05,
        gt=1,
        description="the margin of the training speed ratio: equivalent within ×/÷speed_margin",
    )
    alpha: float = Field(
        0.05,
        gt=0,
        lt=0.5,
        description="the report's family-wise error: the chance of any false verdict in it",
    )
    primary_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="the share of alpha the primary estimands (quality at matched settings) "
        "spend; the secondary ones share the rest equally",
    )
    not_estimable: float = Field(
        100.0,
        gt=1,
        description="a ratio or LR interval wider than this factor is not estimable: the "
        "report prints no number for it",
    )
    spike_factor: float | None = Field(
        None,
        gt=1,
        le=1e6,
        description="count gradient-norm spikes in the main runs: steps whose grad norm exceeds "
        "this many times the median of the spike_window steps before; null: not counted",
    )
    spike_window: int = Field(
        SPIKE_WINDOW, ge=5, le=100_000, description="steps whose median a spike is measured against"
    )


class DecideConfig(StrictSection):
    """``decide:``: matched seeds added to the leading comparison, ``step`` at a time, until
    every one of its comparisons is different or equivalent, or ``max_seeds`` is reached
    (:mod:`ablate.core.sequential`)."""

    max_seeds: int = Field(
        ...,
        ge=3,
        description="the most seeds the leading comparison may take; it looks at len(seeds), "
        "+step, …, max_seeds and tests at α / (number of looks) at each",
    )
    step: int = Field(2, ge=1, description="seeds added between two looks")


class ExperimentFile(StrictSection):
    """The top level of an experiment file, before variants are resolved."""

    name: str | None = None
    description: str = ""
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    variants: dict[str, dict[str, Any]] = Field(default_factory=dict)
    grid: dict[str, list[Any]] = Field(
        default_factory=dict, description="dotted key -> levels; every combination is a variant"
    )
    data: dict[str, Any] = Field(default_factory=dict)
    model: dict[str, Any] = Field(default_factory=dict)
    train: dict[str, Any] = Field(default_factory=dict)
    runtime: dict[str, Any] = Field(default_factory=dict)
    sweep: SweepConfig | None = None
    search: SearchConfig | None = None
    curve: CurveConfig | None = None
    max_lr: MaxLRConfig | None = None
    convert: ConvertConfig | None = None
    scale: ScaleConfig | None = None
    analysis: AnalysisConfig = Field(default_factory=AnalysisConfig)
    decide: DecideConfig | None = None
    claims: list[ClaimConfig] = Field(
        default_factory=list, description="published claims the main runs test"
    )
    storage: str | None = Field(
        None, description="Optuna storage URL; default sqlite in the results folder"
    )


class Experiment(BaseModel):
    """A validated experiment: its name, seeds and one resolved RunConfig per variant."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    path: str
    seeds: list[int]
    variants: dict[str, RunConfig]
    overrides: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="variant -> the dotted keys it sets"
    )
    base: RunConfig
    sweep: SweepConfig | None = None
    search: SearchConfig | None = None
    curve: CurveConfig | None = None
    max_lr: MaxLRConfig | None = None
    convert: ConvertPlan | None = None
    scale: ScaleConfig | None = None
    analysis: AnalysisConfig = Field(default_factory=AnalysisConfig)
    decide: DecideConfig | None = None
    claims: list[ClaimConfig] = Field(default_factory=list)
    file: dict[str, Any] = Field(
        default_factory=dict, description="the file's top level as read (sizes derive from it)"
    )
    storage: str | None = None
    grid: dict[str, list[Any]] = Field(default_factory=dict, description="factor -> levels")
    factors: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="grid variant -> {factor key: level}"
    )
    command_line: dict[str, Any] = Field(
        default_factory=dict, description="dotted key -> the value --set or --seeds gave it"
    )

    def curve_seeds(self) -> list[int]:
        """The curve's seeds: ``curve.seeds``, else the two above the largest of ``seeds``."""
        assert self.curve is not None
        return self.curve.seeds or [max(self.seeds) + 1, max(self.seeds) + 2]

    def search_seed(self) -> int:
        """The run seed of every search trial: ``search.seed``, else one above the largest of
        ``seeds``, so the tuned comparison is scored on seeds the search did not select on."""
        if self.search is not None and self.search.seed is not None:
            return self.search.seed
        return max(self.seeds) + 1
