"""The experiment-level sections of an experiment file, and the resolved :class:`Experiment`.

Besides the base run (:class:`ablate.core.config.RunConfig`) and its variants, a file may have a
``sweep``, a ``search``, a ``curve``, a ``max_lr`` and a ``decide`` section (the stages':
:mod:`ablate.core.stage_sections`), a ``convert``, a ``scale`` and an ``analysis`` section;
:class:`ExperimentFile` is the file's top level as written, :class:`Experiment` what
:func:`ablate.core.load.load_experiment` resolves it to.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ablate.core.claims import ClaimConfig
from ablate.core.config import RunConfig
from ablate.core.section import Seed, StrictSection
from ablate.core.stage_sections import (
    CurveConfig,
    DecideConfig,
    MaxLRConfig,
    SearchConfig,
    SweepConfig,
)


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
