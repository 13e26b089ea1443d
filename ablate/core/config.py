"""Typed schema of an experiment file: every section, key and default, and the resolved Experiment.

An experiment file is YAML with a *base* (``data``, ``model``, ``train``, ``runtime``), a list of
``seeds`` and named ``variants``. Each variant is a mapping of dotted keys to values
(``model.norm.kind: rmsnorm``) applied to the base before validation, so any field can be
ablated. :func:`ablate.core.load.load_experiment` returns an :class:`Experiment` whose
``variants`` are fully resolved :class:`RunConfig` objects; every problem raises
:class:`ConfigError` with one line that names the file, the key and what is allowed
(:mod:`ablate.core.overrides` words those lines).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

NormKind = Literal["layernorm", "rmsnorm", "dyt"]  # the names registered in ablate.nn.norms
Placement = Literal["pre", "post", "sandwich", "deepnorm", "none"]
Precision = Literal["32", "bf16-mixed", "bf16-true"]
NormImpl = Literal["auto", "reference", "torch", "cpp"]

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
SEED_LIMIT = 2**32  # torch, numpy and the per-name init seeds all take seeds below this
Seed = Annotated[int, Field(ge=0, lt=SEED_LIMIT)]


class ConfigError(ValueError):
    """A problem with an experiment file, as one line: ``FILE: KEY: what is wrong; allowed``."""


class _Strict(BaseModel):
    """Base for every section: unknown keys are errors, values are checked on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class NormConfig(_Strict):
    """Which normalization, where it sits, and its numerics.

    Placements (see :class:`ablate.nn.model.Block`): ``pre`` x + f(norm(x)); ``post``
    norm(x + f(x)); ``sandwich`` (Sandwich-LN / Peri-LN) x + norm(f(norm(x))); ``deepnorm``
    norm(alpha x + f(x)) with DeepNet's alpha and beta; ``none``: no norm anywhere (a baseline;
    ``kind`` is then unused).
    """

    kind: NormKind = "layernorm"
    placement: Placement = "pre"
    eps: float = Field(1e-5, gt=0, lt=1)
    bias: bool | None = Field(
        None, description="learnable bias; default: true for layernorm and dyt, false for rmsnorm"
    )
    qk_norm: bool = Field(
        False, description="also normalize attention queries and keys per head (same kind)"
    )
    alpha_init: float = Field(0.5, gt=0, le=100, description="dyt: initial alpha of tanh(alpha x)")
    fp32_reduction: bool = Field(
        True, description="compute the statistics in fp32 when the input is bf16/fp16"
    )
    impl: NormImpl = Field(
        "auto",
        description="kernel: auto (fastest per device), reference, torch, cpp (RMSNorm, CPU)",
    )

    @model_validator(mode="after")
    def _default_bias(self) -> NormConfig:
        if self.bias is None:
            self.bias = self.kind != "rmsnorm"
        if self.impl == "cpp" and self.kind != "rmsnorm":
            raise ValueError(
                f"model.norm.impl: cpp is an RMSNorm kernel; for {self.kind} use auto, torch "
                "or reference"
            )
        return self


class DataConfig(_Strict):
    """Corpus, tokenization, split and batch-order seed."""

    source: Literal["builtin_text", "synthetic", "text_file", "tokens_file"] = "builtin_text"
    path: str | None = Field(None, description="file for text_file / tokens_file")
    val_path: str | None = Field(
        None, description="tokens_file: a separate validation file (val_fraction then unused)"
    )
    tokenizer: Literal["byte", "char"] = "byte"
    vocab_size: int | None = Field(
        None, ge=2, le=65536, description="tokens_file: vocabulary size (default: max id + 1)"
    )
    val_fraction: float = Field(0.1, gt=0, lt=0.5)
    seed: Seed | None = Field(None, description="seed of the batch order; default: the run's seed")
    synthetic_vocab: int = Field(64, ge=4, le=4096)
    synthetic_tokens: int = Field(200_000, ge=10_000, le=50_000_000)
    synthetic_branching: int = Field(4, ge=1, le=64)
    synthetic_seed: Seed = 1234

    @model_validator(mode="after")
    def _path_needed(self) -> DataConfig:
        if self.source in ("text_file", "tokens_file") and not self.path:
            raise ValueError(f"data.source {self.source} needs data.path (a local file)")
        if self.val_path and self.source != "tokens_file":
            raise ValueError(f"data.val_path: only for source tokens_file, not {self.source}")
        return self


class ModelConfig(_Strict):
    """Decoder-only transformer shape; the norm is a sub-section."""

    d_model: int = Field(128, ge=8, le=8192)
    n_layers: int = Field(4, ge=1, le=128)
    n_heads: int = Field(4, ge=1, le=128)
    d_ff: int | None = Field(None, ge=8, description="MLP width; default 4 * d_model")
    seq_len: int = Field(128, ge=2, le=65536)
    dropout: float = Field(0.0, ge=0, lt=1)
    tie_weights: bool = True
    init_std: float = Field(0.02, gt=0, le=1)
    norm: NormConfig = Field(default_factory=NormConfig)

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelConfig:
        if self.d_model % self.n_heads:
            raise ValueError(
                f"model.d_model ({self.d_model}) must be divisible by model.n_heads "
                f"({self.n_heads})"
            )
        return self


class StabilityConfig(_Strict):
    """The stability criterion (:mod:`ablate.core.stability`): when a run diverged or collapsed."""

    threshold: float | None = Field(
        None,
        gt=0,
        description="train loss above this diverges; default: the run's start loss "
        "max(ln(vocab), loss of step 1) + divergence_margin",
    )
    divergence_margin: float = Field(
        0.5, ge=0, le=100, description="default threshold: this far above the start loss"
    )
    after_warmup: bool = True
    window: int = Field(
        5, ge=1, le=1000, description="steps averaged before comparing with the threshold"
    )
    floor: Literal["unigram", "initial"] = Field(
        "unigram",
        description="what a run must beat: the corpus's unigram cross-entropy, or ln(vocab)",
    )
    final_margin: float = Field(
        0.1, ge=0, description="collapsed if the final val loss >= floor - final_margin"
    )


class ProbeConfig(_Strict):
    """What :class:`ablate.training.probes.ModelProbe` measures, and how often (docs/probes.md)."""

    interval: int = Field(
        25, ge=0, description="optimizer steps between probe steps (0 disables the probes)"
    )
    attention: bool = Field(
        True, description="also compute each layer's largest attention logit (one extra QK^T)"
    )


class TrainConfig(_Strict):
    """Optimizer, schedule, budget, precision and evaluation cadence."""

    batch_size: int = Field(32, ge=1, le=65536)
    tokens: int = Field(600_000, ge=1, description="token budget: steps = tokens // (batch*seq)")
    lr: float = Field(1e-3, gt=0, le=100)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    warmup_steps: int = Field(20, ge=0)
    schedule: Literal["cosine", "constant"] = "cosine"
    weight_decay: float = Field(0.1, ge=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    grad_clip: float | None = Field(1.0, gt=0, description="max grad norm; null disables")
    precision: Precision = "32"
    eval_interval: int = Field(25, ge=1, description="optimizer steps between evaluations")
    eval_batches: int = Field(8, ge=1, le=10_000)
    stability: StabilityConfig = Field(default_factory=StabilityConfig)
    probes: ProbeConfig = Field(default_factory=ProbeConfig)


LoggerName = Literal["tensorboard", "mlflow", "wandb"]


class RuntimeConfig(_Strict):
    """Where and how runs execute; does not change results (except accelerator)."""

    accelerator: Literal["cpu", "auto", "cuda"] = "cpu"
    workers: int | None = Field(None, ge=1, le=256, description="default: chosen for the machine")
    threads: int | None = Field(None, ge=1, le=1024, description="torch threads per worker")
    loggers: list[LoggerName] = Field(
        default_factory=list,
        description="Lightning loggers besides CSV (always on): tensorboard, mlflow, wandb",
    )
    log_every_n_steps: int = Field(10, ge=1, le=100_000, description="logger cadence")
    save_weights: bool = Field(
        True, description="store each finished main run's final weights (model.pt) for convert:"
    )
    heartbeat_s: int = Field(
        30,
        ge=1,
        le=3600,
        description="search on an RDB storage: a trial's worker records a heartbeat this often; "
        "one silent for 3x this long is failed and retried",
    )
    trial_retries: int = Field(
        3, ge=0, le=100, description="how often a trial whose worker died is retried"
    )
    devices: int = Field(
        1, ge=1, le=1024, description="processes (CPU) or GPUs per node that train one run (DDP)"
    )
    strategy: Literal["auto", "ddp_spawn"] = Field(
        "auto",
        description="Lightning strategy; auto: one process, or ddp_spawn for several devices",
    )
    num_nodes: int = Field(1, ge=1, le=1024, description="machines that train one run together")

    def processes(self) -> int:
        """Processes that train one run together (the DDP world size)."""
        return self.devices * self.num_nodes


class RunConfig(_Strict):
    """Everything one training run needs, after a variant's overrides."""

    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)

    @model_validator(mode="after")
    def _batch_splits_evenly(self) -> RunConfig:
        world = self.runtime.processes()
        if self.train.batch_size % world:
            raise ValueError(
                f"train.batch_size ({self.train.batch_size}) must split evenly among the "
                f"{world} processes of runtime.devices x runtime.num_nodes"
            )
        return self

    def steps(self) -> int:
        """Optimizer steps that the token budget buys at this batch and sequence size."""
        return self.train.tokens // self.tokens_per_step()

    def tokens_per_step(self) -> int:
        """Tokens consumed by one optimizer step."""
        return self.train.batch_size * self.model.seq_len


def _check_range(low: float, high: float, what: str) -> None:
    if not low < high:
        raise ValueError(f"{what}: the minimum ({low:g}) must be below the maximum ({high:g})")


class SweepConfig(_Strict):
    """A log-spaced learning-rate grid run for every variant and seed: final loss against LR."""

    lr_min: float = Field(1e-4, gt=0, le=100)
    lr_max: float = Field(1e-1, gt=0, le=100)
    points: int = Field(7, ge=2, le=200)
    seeds: list[Seed] | None = Field(None, min_length=1, description="default: the experiment's")
    tokens: int | None = Field(None, ge=1, description="budget of a sweep run; default train's")

    @model_validator(mode="after")
    def _ordered(self) -> SweepConfig:
        _check_range(self.lr_min, self.lr_max, "sweep.lr_min/lr_max")
        return self

    def lrs(self) -> list[float]:
        """The grid: ``points`` learning rates evenly spaced in log from lr_min to lr_max."""
        ratio = (self.lr_max / self.lr_min) ** (1 / (self.points - 1))
        return [self.lr_min * ratio**i for i in range(self.points)]


class SearchConfig(_Strict):
    """An Optuna study per variant over learning rate (log) and warmup; objective: val loss."""

    n_trials: int = Field(20, ge=1, le=100_000)
    timeout_s: float | None = Field(None, gt=0)
    lr_min: float = Field(1e-4, gt=0, le=100)
    lr_max: float = Field(1.0, gt=0, le=100)
    warmup_min: int = Field(0, ge=0)
    warmup_max: int = Field(100, ge=0)
    sampler: Literal["tpe", "random"] = "tpe"
    sampler_seed: int = Field(0, ge=0)
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
        return self


class MaxLRConfig(_Strict):
    """Bracketing search for the largest LR that is stable for every one of ``seeds``."""

    seeds: list[Seed] | None = Field(None, min_length=1, description="default: the experiment's")
    start: float | None = Field(None, gt=0, description="first probe; default train.lr")
    factor: float = Field(4.0, gt=1, le=1000, description="coarse step while bracketing")
    precision: float = Field(2**0.25, gt=1, le=100, description="final bracket ratio")
    lr_min: float = Field(1e-6, gt=0)
    lr_max: float = Field(100.0, gt=0)
    tokens: int | None = Field(None, ge=1, description="budget of a probe run; default train's")

    @model_validator(mode="after")
    def _ordered(self) -> MaxLRConfig:
        _check_range(self.lr_min, self.lr_max, "max_lr.lr_min/lr_max")
        return self


class ConvertConfig(_Strict):
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


class ConvertPlan(BaseModel):
    """A resolved ``convert:`` section: the two continued-training configs and the mapping."""

    model_config = ConfigDict(frozen=True)

    source: str
    seeds: list[int]
    bias: str
    control: RunConfig  # the source's model, continued
    converted: RunConfig  # the target's model, continued


class ExperimentFile(_Strict):
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
    max_lr: MaxLRConfig | None = None
    convert: ConvertConfig | None = None
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
    max_lr: MaxLRConfig | None = None
    convert: ConvertPlan | None = None
    storage: str | None = None
    grid: dict[str, list[Any]] = Field(default_factory=dict, description="factor -> levels")
    factors: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="grid variant -> {factor key: level}"
    )

    def search_seed(self) -> int:
        """The run seed of every search trial: ``search.seed``, else one above the largest of
        ``seeds``, so the tuned comparison is scored on seeds the search did not select on."""
        if self.search is not None and self.search.seed is not None:
            return self.search.seed
        return max(self.seeds) + 1
