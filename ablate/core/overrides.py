"""How a variant derives from the base: dotted overrides, grid levels, differences, fingerprints.

A variant names dotted keys (``model.norm.kind: rmsnorm``); :func:`apply_overrides` sets exactly
those on a copy of the base and words every unknown key as one line naming what is allowed;
:func:`expand_grid` turns a ``grid:`` into named variants; :func:`differences` and
:func:`run_fingerprint` say what two resolved configs differ in and whether they are one run.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
from collections.abc import Iterable
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from ablate.core.config import ConfigError, RunConfig
from ablate.core.experiment import Experiment, ExperimentFile


def _allowed_keys(model: type[BaseModel]) -> str:
    return ", ".join(model.model_fields)


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (also inside ``X | None``), or None."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _has_key(section: type[BaseModel], key: str) -> bool:
    """Whether ``key`` may be set in ``section``: one of its fields, or any key in a section
    open to other keys (``model.litgpt``, whose keys are litgpt's)."""
    return key in section.model_fields or section.model_config.get("extra") == "allow"


def _section_model(parts: list[str], root: type[BaseModel] = RunConfig) -> type[BaseModel] | None:
    """The pydantic model that owns the key at ``parts`` (a dotted path), or None."""
    model: type[BaseModel] | None = root
    for part in parts:
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            return None
        model = model_in(field.annotation)
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
        allowed = _allowed_keys(owner) if owner is not None else "see docs/experiments.md"
        return f"{key}: unknown key; allowed: {allowed}"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "value_error":
        return message
    value = error.get("input")
    got = f"got {value!r}; " if value is not None and not isinstance(value, dict) else ""
    return f"{key}: {got}{message[0].lower()}{message[1:]}"


def format_validation(exc: ValidationError, where: str) -> ConfigError:
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
        if field is not None and model_in(field.annotation) is None:
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
        if owner is None or not _has_key(owner, parts[-1]):
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


DERIVED = {"model.norm.bias": "model.norm.kind"}  # a default that follows another key's value


def flatten(node: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config dict as ``{dotted key: value}``."""
    flat: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def flat_config(config: RunConfig) -> dict[str, Any]:
    """Every resolved key of ``config`` as ``{dotted key: value}``; a key the norm's kind does
    not read shows its default (it changes nothing)."""
    dump = config.model_dump(mode="json")
    dump["model"]["norm"] = config.model.norm.as_used()
    return flatten(dump)


# what a norm comparison may change: the norm's own keys (ablate's, and litgpt's norm class);
# runtime keys change where and how fast a run goes, not what it computes
NORM_KEYS = ("model.norm.", "model.litgpt.norm_class_name")
NOT_COMPUTED = ("runtime.",)


def beyond_the_norm(
    baseline: dict[str, Any], other: dict[str, Any], declared: Iterable[str] = ()
) -> list[str]:
    """Flat keys in which ``other`` differs from ``baseline`` outside the norm, the runtime and
    the ``declared`` keys (a grid's factors): empty for a pure norm comparison."""
    keys = [*baseline, *(key for key in other if key not in baseline)]
    allowed = (*NORM_KEYS, *NOT_COMPUTED)
    return [
        key
        for key in keys
        if baseline.get(key) != other.get(key)
        and not key.startswith(allowed)
        and key not in set(declared)
    ]


def impure_variants(experiment: Experiment) -> dict[str, list[str]]:
    """Per variant whose config differs from the baseline (first) variant's beyond the norm
    and the grid's declared factors, those keys."""
    configs = {name: flat_config(cfg) for name, cfg in experiment.variants.items()}
    baseline = next(iter(configs.values()), {})
    found = {
        name: beyond_the_norm(baseline, flat, experiment.grid) for name, flat in configs.items()
    }
    return {name: keys for name, keys in found.items() if keys}


def impurity_lines(impure: dict[str, list[str]], baseline: str) -> list[str]:
    """One warning line per variant that changes more than the norm."""
    return [
        f"warning: {name} differs from {baseline} beyond the norm ({', '.join(keys)}): "
        "not a pure norm comparison"
        for name, keys in impure.items()
    ]


def differences(base: RunConfig, other: RunConfig) -> dict[str, tuple[Any, Any]]:
    """``{dotted key: (base value, other value)}`` for every resolved key that differs."""
    a, b = flat_config(base), flat_config(other)
    keys = [*a, *(key for key in b if key not in a)]  # a litgpt field one side sets, the other not
    return {key: (a.get(key), b.get(key)) for key in keys if a.get(key) != b.get(key)}


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


MAX_GRID_CELLS = 10_000  # a grid beyond this is refused (docs/experiments.md)


def expand_grid(grid: dict[str, list[Any]], where: str) -> dict[str, dict[str, Any]]:
    """Every combination of the grid's levels as ``{variant name: {dotted key: level}}``.

    Names join the levels' names with ``.`` in the order the keys are written
    (``layernorm.post``); the first combination is the report's baseline.
    """
    cells = math.prod(len(levels) for levels in grid.values()) if grid else 0
    if cells > MAX_GRID_CELLS:
        raise ConfigError(
            f"{where}: grid: {cells:,} combinations; at most {MAX_GRID_CELLS:,} (each is a "
            "variant, trained once per seed): split it into several files"
        )
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


def difference_lines(experiment: Experiment) -> list[str]:
    """Per variant, every resolved key in which it differs from the base (``base -> variant``);
    a key the variant does not name is marked (only a kind's own default bias may follow)."""
    lines = ["what each variant changes against the base:"]
    for name, config in experiment.variants.items():
        named = set(experiment.overrides.get(name, {}))
        changes = [
            f"{key}: {old!r} -> {new!r}{_why_changed(key, named, DERIVED)}"
            for key, (old, new) in differences(experiment.base, config).items()
        ]
        lines.append(f"  {name}: {'; '.join(changes) or 'nothing (the base itself)'}")
    return lines


def _why_changed(key: str, named: set[str], derived: dict[str, str]) -> str:
    if key in named:
        return ""
    return f" (follows {derived[key]})" if key in derived else " (not named by the variant)"
