"""How a variant derives from the base: dotted overrides, grid levels, differences, fingerprints.

A variant names dotted keys (``model.norm.kind: rmsnorm``), spelled out key by key by
:func:`flatten_overrides` (:func:`apply_overrides` sets them on the base, and
refuses an unknown one); a ``grid:`` level is named by :func:`level_name`; :func:`differences`
and :func:`run_fingerprint` say what two resolved configs differ in and whether they are one run;
:func:`unread_key` finds a key a config names but does not read (a no-op variant);
:func:`expand_grid` names every cell of a grid; :func:`parse_settings` and :func:`set_dotted`
read and apply ``--set KEY=VALUE``.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

import yaml

from ablate.core.config import RunConfig
from ablate.core.errors import ConfigError
from ablate.core.experiment import Experiment
from ablate.core.norm_kinds import KINDS
from ablate.core.schema import allowed_keys, has_key, section_model, value_prefix


def flatten_overrides(overrides: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Overrides as dotted keys: a mapping under a key that names a section is spelled out key
    by key (``{model: {norm: {kind: x}}}`` and ``{model.norm: {kind: x}}`` both become
    ``{model.norm.kind: x}``), so a variant changes exactly the keys it names and never
    replaces a whole section. A mapping under a plain value stays (and is refused later)."""
    flat: dict[str, Any] = {}
    for key, value in overrides.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and section_model(dotted.split(".")) is not None:
            flat.update(flatten_overrides(value, f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


def unread_key(config: RunConfig, keys: Iterable[str]) -> tuple[str, str] | None:
    """The first of the dotted ``keys`` that ``config`` does not read, and why: a norm key where
    placement none leaves no norm, a key its norm kind does not read, ``fp32_reduction`` at
    precision 32 (nothing in bf16/fp16 to reduce); None when it reads them all."""
    norm = config.model.norm
    for key in keys:
        name = key.removeprefix("model.norm.")
        if name == key:
            continue
        if norm.placement == "none" and not norm.qk_norm and name not in ("placement", "qk_norm"):
            return key, "placement none has no norm (nor qk_norm) to set it on"
        if name in KINDS[norm.kind].unused():
            readers = ", ".join(k.name for k in KINDS.values() if name in k.reads)
            return key, f"norm kind {norm.kind} does not read it (read by: {readers})"
        if name == "fp32_reduction" and config.train.precision == "32":
            return key, "at train.precision 32 there is no bf16/fp16 input to reduce in fp32"
    return None


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


# what a norm comparison may change: the norm's own keys (ablate's, and litgpt's norm class) and
# the stabilisers compared with norms (z-loss, logit soft-capping); runtime keys change where
# and how fast a run goes, not what it computes
NORM_KEYS = ("model.norm.", "model.litgpt.norm_class_name", "train.z_loss", "model.softcap_")
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


def apply_overrides(base: dict[str, Any], overrides: dict[str, Any], where: str) -> dict[str, Any]:
    """Return a copy of ``base`` with each key of ``overrides`` set, nested mappings merged key
    by key (:func:`flatten_overrides`); unknown keys fail."""
    result = copy.deepcopy(base)
    for dotted, value in flatten_overrides(overrides).items():
        parts = str(dotted).split(".")
        owner = section_model(parts[:-1])
        value_at = value_prefix(parts)
        if value_at:
            raise ConfigError(
                f"{where}: override key {dotted!r} does not exist; {value_at} is a value, "
                "not a section"
            )
        if owner is None or not has_key(owner, parts[-1]):
            section = ".".join(parts[:-1])
            allowed = allowed_keys(owner) if owner is not None else allowed_keys(RunConfig)
            raise ConfigError(
                f"{where}: override key {dotted!r} does not exist; "
                f"allowed under {section or '(top level)'}: {allowed}",
                str(dotted),
                "extra_forbidden",
                tuple(allowed.split(", ")),
            )
        node = result
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{where}: {'.'.join(parts[:-1])}: must be a mapping")
            node = child
        node[parts[-1]] = value
    return result


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
            raise ConfigError(
                f"{where}: grid.{key}: give a non-empty list of levels", f"grid.{key}", "empty"
            )
        names = [level_name(key, v) for v in levels]
        if len(set(names)) != len(names):
            raise ConfigError(
                f"{where}: grid.{key}: levels {levels} repeat; give distinct values",
                f"grid.{key}",
                "repeats",
            )
    combos = itertools.product(*grid.values()) if grid else []
    keys = list(grid)
    return {
        ".".join(level_name(k, v) for k, v in zip(keys, combo, strict=True)): dict(
            zip(keys, combo, strict=True)
        )
        for combo in combos
    }


def parse_settings(settings: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as {dotted key: value}, each value parsed as YAML (``0.003``,
    ``[0, 1]``, ``null``); a malformed one is a one-line error."""
    found: dict[str, Any] = {}
    for setting in settings:
        key, sep, text = setting.partition("=")
        key = key.strip()
        if not sep or not key or not all(key.split(".")):
            raise ConfigError(
                f"--set {setting!r}: give KEY=VALUE with a dotted key, e.g. train.lr=0.003"
            )
        try:
            found[key] = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ConfigError(f"--set {setting!r}: the value is not YAML") from None
    return found


def set_dotted(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``dotted`` (``train.lr``) in the file's mapping, creating sections on the way."""
    node = raw
    parts = dotted.split(".")
    for depth, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            where = ".".join(parts[: depth + 1])
            raise ConfigError(f"--set {dotted}: {where} is a value in the file, not a section")
        node = child
    node[parts[-1]] = value
