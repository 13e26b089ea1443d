"""Reading an experiment file: YAML, variants merged into the base, environment checks,
convert, scale; every check of the file and its one-line :class:`ConfigError`.

:func:`load_experiment` reads the YAML (a key given twice is an error), validates the base and
every variant (:func:`ablate.core.overrides.apply_overrides` sets a variant's keys and refuses
an unknown one, :func:`ablate.core.overrides.expand_grid` names a grid's cells), checks what
the file needs from the machine (data files, logger packages, a token budget that buys a
step), checks across its sections (:mod:`ablate.core.checks`) and resolves ``convert:``.
What this reads is typed from here on: a run carries its ``RunConfig`` to the optimizer
without another validation. The few checks of the machine that need a package core must not
load (the model builds, the study storage opens, sbatch accepts the job) raise the same
one-line error where they meet it.
A ``scale:`` section is checked by resolving every size: :func:`size_experiment` derives a
size's experiment from the file as read, with the size's model keys in its base.
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ablate.core.checks import (
    check_claims,
    check_curve_stop,
    check_decide,
    check_probe_hold,
    check_walk_hold,
)
from ablate.core.config import NAME_PATTERN, RunConfig
from ablate.core.data_paths import check_data_files, resolve_paths
from ablate.core.errors import ConfigError
from ablate.core.experiment import ConvertConfig, ConvertPlan, Experiment, ExperimentFile
from ablate.core.norm_kinds import KIND_KEYS
from ablate.core.overrides import (
    apply_overrides,
    expand_grid,
    flatten_overrides,
    parse_settings,
    run_fingerprint,
    set_dotted,
    unread_key,
)
from ablate.core.section import SEED_LIMIT
from ablate.core.validation import format_validation

# logger name -> the packages that provide it (any one of them will do)
LOGGER_PACKAGES: dict[str, tuple[str, ...]] = {
    "tensorboard": ("tensorboard", "tensorboardX"),
    "mlflow": ("mlflow",),
    "wandb": ("wandb",),
}


def missing_logger_package(name: str) -> str | None:
    """None when ``name``'s logger can be used; else what to install, as words."""
    packages = LOGGER_PACKAGES[name]
    if any(importlib.util.find_spec(p) is not None for p in packages):
        return None
    return f"the {' or '.join(packages)} package (pip install {packages[-1]})"


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
        raise ConfigError(
            f"{path}: file not found (give the path to an experiment .yaml file)",
            code="file_not_found",
        )
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; an experiment file is YAML") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: YAML syntax error at {where}{problem}", code="yaml") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys, got {type(raw).__name__}")
    return raw


def build_run_config(raw: dict[str, Any], where: str) -> RunConfig:
    """Validate one run's raw sections into a RunConfig, or raise a one-line ConfigError."""
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as exc:
        raise format_validation(exc, where) from None


def _check_keys_read(keys: Iterable[str], configs: list[RunConfig], at: str) -> None:
    """Refuse a key (of the base, or a grid factor) that none of ``configs`` reads
    (:func:`unread_key`): it changes nothing."""
    for key in keys:
        unread = [unread_key(config, [key]) for config in configs]
        if configs and all(unread) and unread[0]:
            raise ConfigError(f"{at}{key}: changes nothing in any variant: {unread[0][1]}")


def _check_loggers(config: RunConfig, where: str) -> None:
    for name in config.runtime.loggers:
        missing = missing_logger_package(name)
        if missing:
            raise ConfigError(f"{where}: runtime.loggers: {name!r} needs {missing}")


LITGPT_EXTRA = "pip install -e '.[litgpt]'"


def _check_model_source(config: RunConfig, where: str) -> None:
    if config.model.source == "litgpt" and importlib.util.find_spec("litgpt") is None:
        raise ConfigError(
            f"{where}: model.source: litgpt needs the litgpt package, an optional extra "
            f"({LITGPT_EXTRA})"
        )


def _check_budget(config: RunConfig, where: str) -> None:
    if config.steps() < 1:
        raise ConfigError(
            f"{where}: train.tokens: {config.train.tokens} buys no step; it must be at least "
            f"train.batch_size * model.seq_len = {config.tokens_per_step()}",
            "train.tokens",
            "no_step",
        )
    if config.train.warmup_steps >= config.steps():
        raise ConfigError(
            f"{where}: train.warmup_steps: {config.train.warmup_steps} is not below the run's "
            f"{config.steps()} steps (train.tokens / (batch_size * seq_len)): the learning rate "
            "would never reach its peak; give fewer warmup steps or more tokens",
            "train.warmup_steps",
            "no_peak",
        )


def _variant_config(
    base_raw: dict[str, Any], overrides: dict[str, Any], where: str, base_dir: Path
) -> RunConfig:
    """The validated RunConfig of one variant: base plus its dotted overrides, all checks."""
    merged = apply_overrides(base_raw, overrides, where)
    merged["data"] = resolve_paths(merged["data"], base_dir, where)
    config = build_run_config(merged, where)
    check_data_files(config, where)
    _check_budget(config, where)
    _check_loggers(config, where)
    _check_model_source(config, where)
    return config


CONVERTIBLE = {"kind", "bias", "fp32_reduction", "impl", *KIND_KEYS}


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
    if source.model.source != "ablate":
        raise ConfigError(
            f"{where}: convert.source: {section.source!r} is a model.source: "
            f"{source.model.source} model; conversion maps ablate's own model only"
        )
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


SIMULATED_SUFFIX = "-simulated"  # --backend simulate: the experiment's results and report apart


def load_experiment(
    path: str | Path,
    backend: str | None = None,
    launcher: str | None = None,
    settings: Sequence[str] = (),
) -> Experiment:
    """Read, validate and resolve an experiment file; raise ConfigError on any problem.

    ``settings`` (``--set KEY=VALUE``, ``--seeds``) set dotted keys of the file before anything
    else reads it, each value parsed as the file's YAML is: the run ids follow the resolved
    config as for an edit of the file, and the experiment records what was set.
    ``backend`` (``--backend``) replaces the file's ``runtime.backend``; switching a file to the
    simulator also names the experiment ``<name>-simulated``, so its runs, studies and report
    never mix with the trained ones. ``launcher`` (``--launcher``) replaces the file's
    ``runtime.launcher`` (where runs execute changes no run id)."""
    path = Path(path)
    raw = _read_yaml(path)
    command_line = parse_settings(settings)
    for dotted, value in command_line.items():
        set_dotted(raw, dotted, value)
    if isinstance(raw, dict) and (backend or launcher):
        runtime = raw.get("runtime") if isinstance(raw.get("runtime"), dict) else {}
        if backend is not None:
            if runtime.get("backend", "train") != backend and backend == "simulate":
                raw["name"] = f"{raw.get('name') or path.stem}{SIMULATED_SUFFIX}"
            runtime = {**runtime, "backend": backend}
        if launcher is not None:
            runtime = {**runtime, "launcher": launcher}
        raw["runtime"] = runtime
    where = f"{path} with --set {' '.join(settings)}" if settings else str(path)
    return resolve_experiment(raw, path, where, command_line)


def resolve_experiment(
    raw: dict[str, Any], path: Path, where: str, command_line: dict[str, Any] | None = None
) -> Experiment:
    """Validate and resolve a file's top level (``where`` starts every error line);
    ``command_line``: the keys ``--set`` and ``--seeds`` set, recorded with the plan."""
    try:
        top = ExperimentFile.model_validate(raw)
    except ValidationError as exc:
        raise format_validation(exc, where) from None
    name = top.name or path.stem
    if not NAME_PATTERN.match(name):
        raise ConfigError(f"{where}: name: {name!r} is not allowed; use letters, digits, _ . -")
    if len(set(top.seeds)) != len(top.seeds):
        raise ConfigError(
            f"{where}: seeds: {top.seeds} has duplicates; give distinct integers",
            "seeds",
            "repeats",
        )
    if any(not 0 <= seed < SEED_LIMIT - 1 for seed in top.seeds):  # the search's is one above
        raise ConfigError(
            f"{where}: seeds: {top.seeds}: seeds must be integers >= 0 and < 2**32 - 1",
            "seeds",
            "less_than",
        )
    base_raw = {
        "data": resolve_paths(top.data, path.parent, where),
        "model": top.model,
        "train": top.train,
        "runtime": top.runtime,
    }
    base = build_run_config(base_raw, where)
    check_data_files(base, where)
    factors = expand_grid(top.grid, where)
    named = {str(k): v for k, v in top.variants.items()}
    clash = sorted(set(named) & set(factors))
    if clash:
        raise ConfigError(
            f"{where}: variants.{clash[0]}: the grid makes a variant of that name too",
            f"variants.{clash[0]}",
            "name_taken",
        )
    variant_raws = {**factors, **named}  # grid first: its first combination is the baseline
    if not variant_raws:
        raise ConfigError(
            f"{where}: variants: none given; name at least one under variants: or grid: "
            "(the base alone is variants: {base: {}})",
            "variants",
            "empty",
        )
    variants: dict[str, RunConfig] = {}
    resolved_overrides: dict[str, dict[str, Any]] = {}
    seen: dict[str, str] = {}
    for vname, overrides in variant_raws.items():
        label = f"grid ({vname})" if vname in factors else f"variants.{vname}"
        at = f"{where}: {label}"
        if not NAME_PATTERN.match(str(vname)):
            raise ConfigError(f"{at}: variant names use letters, digits, _ . - only")
        if not isinstance(overrides, dict):
            raise ConfigError(f"{at}: must be a mapping of dotted keys to values")
        overrides = flatten_overrides(overrides)
        config = _variant_config(base_raw, overrides, at, path.parent)
        unread = None if vname in factors else unread_key(config, overrides)
        if unread:
            raise ConfigError(f"{at}: {unread[0]}: changes nothing here: {unread[1]}")
        fingerprint = run_fingerprint(config)
        if fingerprint in seen:
            raise ConfigError(
                f"{at}: resolves to the same run as {seen[fingerprint]}; each variant must "
                "change something (placement none has no norm: its kind does not matter)",
                label,
                "same_run",
            )
        seen[fingerprint] = label
        variants[str(vname)] = config
        resolved_overrides[str(vname)] = overrides
    base_keys = flatten_overrides({"model": top.model, "train": top.train})
    _check_keys_read(base_keys, list(variants.values()), f"{where}: ")
    grid_keys = dict.fromkeys(key for levels in factors.values() for key in levels)
    _check_keys_read(grid_keys, [variants[v] for v in factors], f"{where}: grid.")
    convert = _convert_plan(top.convert, variants, top.seeds, where) if top.convert else None
    experiment = Experiment(
        name=name,
        description=top.description,
        path=str(path),
        seeds=top.seeds,
        variants=variants,
        overrides=resolved_overrides,
        base=base,
        sweep=top.sweep,
        search=top.search,
        curve=top.curve,
        max_lr=top.max_lr,
        convert=convert,
        scale=top.scale,
        analysis=top.analysis,
        decide=top.decide,
        claims=top.claims,
        file=raw,
        storage=top.storage,
        grid=top.grid,
        factors=factors,
        command_line=command_line or {},
    )
    if top.scale is not None:
        check_scale(experiment, where)
    if top.decide is not None:
        check_decide(experiment, where)
    if experiment.curve is not None and experiment.curve.stop_step is not None:
        check_curve_stop(experiment, where)
    if experiment.max_lr is not None and experiment.max_lr.stop_step is not None:
        check_probe_hold(experiment, where)
    if experiment.max_lr is not None and experiment.max_lr.walk_step is not None:
        check_walk_hold(experiment, where)
    check_claims(experiment, where)
    return experiment


SIZE_KEYS = ("model.d_model", "model.n_layers", "model.n_heads")
STUDY_SECTIONS = ("sweep", "search", "curve", "max_lr")


def check_scale(experiment: Experiment, where: str) -> None:
    """A ``scale:`` section that every size can be resolved from, or one line naming the key."""
    scale = experiment.scale
    assert scale is not None
    if experiment.convert is not None:
        raise ConfigError(f"{where}: scale: cannot be combined with convert:; run it per size")
    if experiment.base.model.source != "ablate":
        raise ConfigError(
            f"{where}: scale: sizes set model.d_model/n_layers/n_heads of ablate's own model; "
            f"model.source is {experiment.base.model.source}"
        )
    for variant, overrides in experiment.overrides.items():
        for key in SIZE_KEYS:
            if key in overrides:
                raise ConfigError(
                    f"{where}: variants.{variant}: {key}: the scale: section sets it per size; "
                    "a variant may not"
                )
    if scale.tokens_per_parameter is not None:
        for section in STUDY_SECTIONS:
            if getattr(getattr(experiment, section), "tokens", None) is not None:
                raise ConfigError(
                    f"{where}: {section}.tokens: under scale.tokens_per_parameter every "
                    "size's budget follows its train.tokens; leave it unset"
                )
    labels = [size.label() for size in scale.sizes]
    for i, label in enumerate(labels):
        if not NAME_PATTERN.match(label):
            raise ConfigError(
                f"{where}: scale.sizes[{i}].name: {label!r}: use letters, digits, _ . -"
            )
        if labels.index(label) != i:
            raise ConfigError(f"{where}: scale.sizes[{i}]: {label!r} is given twice")
        size_experiment(experiment, i)  # every size must resolve


def size_experiment(experiment: Experiment, index: int, tokens: int | None = None) -> Experiment:
    """The experiment of ``scale.sizes[index]``, named ``<name>.<label>``: the file with the
    size's model keys in its base (and ``tokens`` as train.tokens when given), without scale."""
    assert experiment.scale is not None
    size = experiment.scale.sizes[index]
    raw = copy.deepcopy(experiment.file)
    raw.pop("scale")
    raw["name"] = f"{experiment.name}.{size.label()}"
    raw.setdefault("model", {}).update(size.model_values())
    if tokens is not None:
        raw.setdefault("train", {})["tokens"] = tokens
    where = f"{experiment.path}: scale.sizes[{index}] ({size.label()})"
    return resolve_experiment(raw, Path(experiment.path), where, experiment.command_line)
