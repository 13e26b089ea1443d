"""Typed schema of an experiment file, its defaults, variant overrides and one-line errors.

An experiment file is YAML with a *base* (``data``, ``model``, ``train``, ``runtime``), a list of
``seeds`` and named ``variants``. Each variant is a mapping of dotted keys to values
(``model.norm.kind: rmsnorm``) applied to the base before validation, so any field can be
ablated. :func:`load_experiment` returns an :class:`Experiment` whose ``variants`` are fully
resolved :class:`RunConfig` objects; every problem raises :class:`ConfigError` with one line that
names the file, the key and what is allowed.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ablate.loggers import missing_logger_package

NormKind = Literal["layernorm", "rmsnorm", "dyt"]  # the names registered in ablate.norms
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

    Placements (see :class:`ablate.model.Block`): ``pre`` x + f(norm(x)); ``post``
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
    """The stability criterion (see :mod:`ablate.stability`): when a run diverged or collapsed."""

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
    """What :class:`ablate.probes.ModelProbe` measures, and how often (see the README)."""

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
    """Swap the norms of a finished variant's weights and keep training (see :mod:`ablate.convert`).

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


def _allowed_keys(model: type[BaseModel]) -> str:
    return ", ".join(model.model_fields)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (also inside ``X | None``), or None."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _section_model(parts: list[str], root: type[BaseModel] = RunConfig) -> type[BaseModel] | None:
    """The pydantic model that owns the key at ``parts`` (a dotted path), or None."""
    model: type[BaseModel] | None = root
    for part in parts:
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            return None
        model = _model_in(field.annotation)
    return model


def _describe_error(error: dict[str, Any]) -> str:
    """One readable clause for one pydantic error, naming the key and what is allowed."""
    loc = [str(p) for p in error["loc"]]
    key = ".".join(loc) or "(top level)"
    if error["type"] == "extra_forbidden":
        parent = loc[:-1]
        owner = (_section_model(parent) if parent else None) or _section_model(
            parent, ExperimentFile
        )
        allowed = _allowed_keys(owner) if owner is not None else "see the README"
        return f"{key}: unknown key; allowed: {allowed}"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "value_error":
        return message
    value = error.get("input")
    got = f"got {value!r}; " if value is not None and not isinstance(value, dict) else ""
    return f"{key}: {got}{message[0].lower()}{message[1:]}"


def _format_validation(exc: ValidationError, where: str) -> ConfigError:
    errors = exc.errors()
    first = _describe_error(errors[0])
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return ConfigError(f"{where}: {first}{more}")


def _value_prefix(parts: list[str]) -> str | None:
    """The dotted prefix of ``parts`` that names a plain value (``train.lr`` in
    ``train.lr.x``), or None when every prefix is a section."""
    for i in range(1, len(parts)):
        owner = _section_model(parts[: i - 1]) if i > 1 else RunConfig
        field = owner.model_fields.get(parts[i - 1]) if owner is not None else None
        if field is not None and _model_in(field.annotation) is None:
            return ".".join(parts[:i])
    return None


def flatten_overrides(overrides: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Overrides as dotted keys: a mapping under a key that names a section is spelled out key
    by key (``{model: {norm: {kind: x}}}`` and ``{model.norm: {kind: x}}`` both become
    ``{model.norm.kind: x}``), so a variant changes exactly the keys it names and never
    replaces a whole section. A mapping under a plain value stays (and is refused later)."""
    flat: dict[str, Any] = {}
    for key, value in overrides.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and _section_model(dotted.split(".")) is not None:
            flat.update(flatten_overrides(value, f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


def apply_overrides(base: dict[str, Any], overrides: dict[str, Any], where: str) -> dict[str, Any]:
    """Return a copy of ``base`` with each key of ``overrides`` set, nested mappings merged key
    by key (:func:`flatten_overrides`); unknown keys fail."""
    result = copy.deepcopy(base)
    for dotted, value in flatten_overrides(overrides).items():
        parts = str(dotted).split(".")
        owner = _section_model(parts[:-1])
        value_prefix = _value_prefix(parts)
        if value_prefix:
            raise ConfigError(
                f"{where}: override key {dotted!r} does not exist; {value_prefix} is a value, "
                "not a section"
            )
        if owner is None or parts[-1] not in owner.model_fields:
            section = ".".join(parts[:-1])
            allowed = _allowed_keys(owner) if owner is not None else _allowed_keys(RunConfig)
            raise ConfigError(
                f"{where}: override key {dotted!r} does not exist; "
                f"allowed under {section or '(top level)'}: {allowed}"
            )
        node = result
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{where}: {'.'.join(parts[:-1])}: must be a mapping")
            node = child
        node[parts[-1]] = value
    return result


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error (PyYAML
    would silently keep the last: a second variant of the same name would replace the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                mark = key_node.start_mark
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (also given above)", mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"{path}: file not found (give the path to an experiment .yaml file)")
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; an experiment file is YAML") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: YAML syntax error at {where}{problem}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys, got {type(raw).__name__}")
    return raw


def _resolve_paths(section: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """Make ``data.path`` absolute relative to the experiment file's folder."""
    path = section.get("path")
    if isinstance(path, str) and path and not Path(path).is_absolute():
        section = {**section, "path": str((base_dir / path).resolve())}
    return section


def build_run_config(raw: dict[str, Any], where: str) -> RunConfig:
    """Validate one run's raw sections into a RunConfig, or raise a one-line ConfigError."""
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as exc:
        raise _format_validation(exc, where) from None


def _check_data_file(config: RunConfig, where: str) -> None:
    data = config.data
    if data.path is not None and data.source in ("text_file", "tokens_file"):
        if not Path(data.path).is_file():
            raise ConfigError(f"{where}: data.path: file not found: {data.path}")


def _check_loggers(config: RunConfig, where: str) -> None:
    for name in config.runtime.loggers:
        missing = missing_logger_package(name)
        if missing:
            raise ConfigError(f"{where}: runtime.loggers: {name!r} needs {missing}")


def _check_budget(config: RunConfig, where: str) -> None:
    if config.steps() < 1:
        raise ConfigError(
            f"{where}: train.tokens: {config.train.tokens} buys no step; it must be at least "
            f"train.batch_size * model.seq_len = {config.tokens_per_step()}"
        )


def _variant_config(
    base_raw: dict[str, Any], overrides: dict[str, Any], where: str, base_dir: Path
) -> RunConfig:
    """The validated RunConfig of one variant: base plus its dotted overrides, all checks."""
    merged = apply_overrides(base_raw, overrides, where)
    merged["data"] = _resolve_paths(merged["data"], base_dir)
    config = build_run_config(merged, where)
    _check_data_file(config, where)
    _check_budget(config, where)
    _check_loggers(config, where)
    return config


DERIVED = {"model.norm.bias": "model.norm.kind"}  # a default that follows another key's value


def flat_config(config: RunConfig) -> dict[str, Any]:
    """Every resolved key of ``config`` as ``{dotted key: value}``."""

    def walk(node: dict[str, Any], prefix: str) -> dict[str, Any]:
        flat: dict[str, Any] = {}
        for key, value in node.items():
            if isinstance(value, dict):
                flat.update(walk(value, f"{prefix}{key}."))
            else:
                flat[f"{prefix}{key}"] = value
        return flat

    return walk(config.model_dump(mode="json"), "")


def differences(base: RunConfig, other: RunConfig) -> dict[str, tuple[Any, Any]]:
    """``{dotted key: (base value, other value)}`` for every resolved key that differs."""
    a, b = flat_config(base), flat_config(other)
    return {key: (a[key], b[key]) for key in a if a[key] != b[key]}


def unexplained_differences(
    base: RunConfig, other: RunConfig, overrides: dict[str, Any]
) -> list[str]:
    """Keys in which ``other`` differs from ``base`` that ``overrides`` neither names nor
    implies (a kind's own default bias follows the kind): empty for a fair variant."""
    named = set(flatten_overrides(overrides))
    return [
        key
        for key in differences(base, other)
        if key not in named and DERIVED.get(key) not in named
    ]


def run_fingerprint(config: RunConfig) -> str:
    """What makes two configs the same run: everything but runtime, and the norm only if used."""
    dump = config.model_dump(mode="json", exclude={"runtime"})
    norm = dump["model"]["norm"]
    if norm["placement"] == "none" and not norm["qk_norm"]:
        dump["model"]["norm"] = {"placement": "none"}
    return json.dumps(dump, sort_keys=True)


def level_name(key: str, value: Any) -> str:
    """A readable, path-safe name of a grid level: ``rmsnorm``, ``warmup_steps-40``, ``no_bias``."""
    last = key.rsplit(".", 1)[-1]
    if isinstance(value, bool):
        return last if value else f"no_{last}"
    if isinstance(value, str):
        return re.sub(r"[^A-Za-z0-9_.-]", "_", value) or f"{last}-empty"
    if isinstance(value, float):
        return f"{last}-{value:g}"
    return f"{last}-{value}"


def expand_grid(grid: dict[str, list[Any]], where: str) -> dict[str, dict[str, Any]]:
    """Every combination of the grid's levels as ``{variant name: {dotted key: level}}``.

    Names join the levels' names with ``.`` in the order the keys are written
    (``layernorm.post``); the first combination is the report's baseline.
    """
    for key, levels in grid.items():
        if not levels:
            raise ConfigError(f"{where}: grid.{key}: give a non-empty list of levels")
        names = [level_name(key, v) for v in levels]
        if len(set(names)) != len(names):
            raise ConfigError(f"{where}: grid.{key}: levels {levels} repeat; give distinct values")
    combos = itertools.product(*grid.values()) if grid else []
    keys = list(grid)
    return {
        ".".join(level_name(k, v) for k, v in zip(keys, combo, strict=True)): dict(
            zip(keys, combo, strict=True)
        )
        for combo in combos
    }


CONVERTIBLE = {"kind", "bias", "eps", "fp32_reduction", "impl", "alpha_init"}


def _convert_plan(
    section: ConvertConfig, variants: dict[str, RunConfig], seeds: list[int], where: str
) -> ConvertPlan:
    """Resolve ``convert:``: the control and the converted continued-training configs."""
    if section.source not in variants:
        raise ConfigError(
            f"{where}: convert.source: {section.source!r} is not a variant; "
            f"allowed: {', '.join(variants)}"
        )
    for key in section.target:
        parts = str(key).split(".")
        if parts[:2] != ["model", "norm"] or len(parts) != 3 or parts[2] not in CONVERTIBLE:
            raise ConfigError(
                f"{where}: convert.target: {key!r} cannot change in a conversion; allowed: "
                + ", ".join(f"model.norm.{k}" for k in sorted(CONVERTIBLE))
            )
    source = variants[section.source]
    target_raw = apply_overrides(
        source.model_dump(mode="json"), section.target, f"{where}: convert.target"
    )
    if "model.norm.bias" not in section.target:  # the target kind's own default
        target_raw["model"]["norm"].pop("bias")
    target = build_run_config(target_raw, f"{where}: convert.target")
    if target.model == source.model:
        raise ConfigError(f"{where}: convert.target: changes nothing in {section.source}'s norm")
    train = {
        "tokens": section.tokens,
        "lr": section.lr or source.train.lr * source.train.min_lr_ratio,
        "warmup_steps": section.warmup_steps,
        "schedule": "constant",
        "eval_interval": section.eval_interval or source.train.eval_interval,
    }
    control = build_run_config(_with_train_raw(source, train), f"{where}: convert (control run)")
    converted = build_run_config(_with_train_raw(target, train), f"{where}: convert")
    _check_budget(control, f"{where}: convert.tokens")
    return ConvertPlan(
        source=section.source,
        seeds=section.seeds or seeds,
        bias=section.bias,
        control=control,
        converted=converted,
    )


def _with_train_raw(config: RunConfig, train: dict[str, Any]) -> dict[str, Any]:
    raw = config.model_dump(mode="json")
    raw["train"] = {**raw["train"], **train}
    return raw


def load_experiment(path: str | Path) -> Experiment:
    """Read, validate and resolve an experiment file; raise ConfigError on any problem."""
    path = Path(path)
    raw = _read_yaml(path)
    try:
        top = ExperimentFile.model_validate(raw)
    except ValidationError as exc:
        raise _format_validation(exc, str(path)) from None
    name = top.name or path.stem
    if not NAME_PATTERN.match(name):
        raise ConfigError(f"{path}: name: {name!r} is not allowed; use letters, digits, _ . -")
    if len(set(top.seeds)) != len(top.seeds):
        raise ConfigError(f"{path}: seeds: {top.seeds} has duplicates; give distinct integers")
    if any(not 0 <= seed < SEED_LIMIT - 1 for seed in top.seeds):  # the search's is one above
        raise ConfigError(
            f"{path}: seeds: {top.seeds}: seeds must be integers >= 0 and < 2**32 - 1"
        )
    base_raw = {
        "data": _resolve_paths(top.data, path.parent),
        "model": top.model,
        "train": top.train,
        "runtime": top.runtime,
    }
    base = build_run_config(base_raw, str(path))
    _check_data_file(base, str(path))
    factors = expand_grid(top.grid, str(path))
    named = {str(k): v for k, v in top.variants.items()}
    clash = sorted(set(named) & set(factors))
    if clash:
        raise ConfigError(f"{path}: variants.{clash[0]}: the grid makes a variant of that name too")
    variant_raws = {**factors, **named}  # grid first: its first combination is the baseline
    if not variant_raws:
        raise ConfigError(
            f"{path}: variants: none given; name at least one under variants: or grid: "
            "(the base alone is variants: {base: {}})"
        )
    variants: dict[str, RunConfig] = {}
    resolved_overrides: dict[str, dict[str, Any]] = {}
    seen: dict[str, str] = {}
    for vname, overrides in variant_raws.items():
        label = f"grid ({vname})" if vname in factors else f"variants.{vname}"
        where = f"{path}: {label}"
        if not NAME_PATTERN.match(str(vname)):
            raise ConfigError(f"{where}: variant names use letters, digits, _ . - only")
        if not isinstance(overrides, dict):
            raise ConfigError(f"{where}: must be a mapping of dotted keys to values")
        overrides = flatten_overrides(overrides)
        config = _variant_config(base_raw, overrides, where, path.parent)
        fingerprint = run_fingerprint(config)
        if fingerprint in seen:
            raise ConfigError(
                f"{where}: resolves to the same run as {seen[fingerprint]}; each variant must "
                "change something (placement none has no norm: its kind does not matter)"
            )
        seen[fingerprint] = label
        variants[str(vname)] = config
        resolved_overrides[str(vname)] = overrides
    convert = _convert_plan(top.convert, variants, top.seeds, str(path)) if top.convert else None
    return Experiment(
        name=name,
        description=top.description,
        path=str(path),
        seeds=top.seeds,
        variants=variants,
        overrides=resolved_overrides,
        base=base,
        sweep=top.sweep,
        search=top.search,
        max_lr=top.max_lr,
        convert=convert,
        storage=top.storage,
        grid=top.grid,
        factors=factors,
    )
