"""Expanding an experiment into RunSpecs: one per variant x seed, each with a content-hash id.

A run's id is a hash of everything that defines what it computes: the variant name, the seed
and the resolved ``data``, ``model`` and ``train`` sections plus the accelerator. Worker and
thread counts are left out: they change speed and the order of float sums, not what is
computed (near the stability boundary that order can still move a loss by tenths of a nat:
docs/results.md). Rerunning an experiment therefore finds finished runs by id and skips them;
editing a field gives new ids.
A key added in a later version (:data:`LATER_KEYS`) counts only when set away from its default,
so upgrading ablate keeps the ids of stored runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ablate.core.config import RunConfig
from ablate.core.experiment import Experiment
from ablate.core.stage_sections import SweepConfig

SPEC_VERSION = 1
# Keys added after results were stored, left out of a run's identity while at these defaults,
# so the runs of earlier versions keep their ids (and are reused, not trained again).
LATER_KEYS: dict[tuple[str, str], Any] = {
    ("data", "val_path"): None,
    ("data", "bpe_vocab_size"): 1024,
    ("data", "test_fraction"): 0.0,
    ("data", "token_dtype"): "uint16",
    ("data", "header_magics"): [],
    ("data", "text_column"): "text",
    ("data", "tokenizer_file"): None,
    ("data", "eos_token"): None,
    ("model", "mlp"): "gelu",
    ("model", "position"): "learned",
    ("model", "linear_bias"): True,
    ("model", "source"): "ablate",
    ("model", "litgpt"): None,
    ("model", "factory"): None,
    ("model", "softcap_attn"): None,
    ("model", "softcap_output"): None,
    ("model.norm", "alpha_init_attn"): None,
    ("model.norm", "alpha_init_mlp"): None,
    ("model.norm", "alpha_init_final"): None,
    ("model.norm", "mix_post_layers"): 0,
    ("model.norm", "depth_scale"): False,
    ("train", "adam_eps"): 1e-8,
    ("train", "final_eval"): "windows",
    ("train", "z_loss"): 0.0,
}


def _section(name: str, values: dict[str, Any]) -> dict[str, Any]:
    """A config section as hashed: :data:`LATER_KEYS` at their defaults left out."""
    return {
        key: value
        for key, value in values.items()
        if (name, key) not in LATER_KEYS or LATER_KEYS[(name, key)] != value
    }


def model_as_used(cfg: RunConfig) -> dict[str, Any]:
    """The model section as hashed: the norm's unused keys at their defaults
    (:meth:`ablate.core.config.NormConfig.as_used`), its :data:`LATER_KEYS` at their defaults
    left out."""
    norm = _section("model.norm", cfg.model.norm.as_used())
    return {**cfg.model.model_dump(mode="json"), "norm": norm}


def _canonical(identity: dict[str, Any]) -> str:
    return json.dumps(identity, sort_keys=True, separators=(",", ":"))


def _digest(identity: dict[str, Any]) -> str:
    return _hash(_canonical(identity))


def _hash(canonical: str) -> str:
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


SEED_MARK = json.dumps("\x00seed\x00")  # a string no config holds, where the seed goes


def seed_run_ids(spec: RunSpec, seeds: Sequence[int]) -> list[str]:
    """The run id of ``spec`` at each of ``seeds`` (``replace(spec, seed=s).run_id``), the
    rest of its identity encoded once: a simulated study draws thousands of runs per LR."""
    canonical = _canonical({**spec.identity(), "seed": json.loads(SEED_MARK)})
    assert canonical.count(SEED_MARK) == 1
    return [_hash(canonical.replace(SEED_MARK, json.dumps(seed))) for seed in seeds]


@dataclass(frozen=True)
class RunSpec:
    """One training run: which experiment, variant and seed, under which resolved config."""

    experiment: str
    variant: str
    seed: int
    config: RunConfig
    group: str = "main"  # its stage: main, sweep, curve, tuned, crossover, usable, … (not hashed)
    init_from: str | None = None  # convert: run id of the source run whose weights start it
    bias_mapping: str | None = None  # convert: fold or drop (see ablate.nn.convert)

    @property
    def data_seed(self) -> int:
        """Seed of the batch order: ``data.seed`` if set, else the run's seed."""
        return self.config.data.seed if self.config.data.seed is not None else self.seed

    def identity(self) -> dict[str, Any]:
        """The fields hashed into the run id (a source run only for continued training)."""
        cfg = self.config
        identity = {
            "version": SPEC_VERSION,
            "variant": self.variant,
            "seed": self.seed,
            "data": _section("data", cfg.data.model_dump(mode="json")),
            "model": _section("model", model_as_used(cfg)),
            "train": _section("train", cfg.train.model_dump(mode="json")),
            "accelerator": cfg.runtime.accelerator,
        }
        if cfg.runtime.backend == "simulate":  # never the id of a trained run
            identity["simulate"] = cfg.runtime.simulate.identity()
        if cfg.runtime.processes() > 1:  # DDP reduces in another order: close, not bitwise
            identity["processes"] = cfg.runtime.processes()
        if self.init_from is not None:
            identity["init_from"] = {"run_id": self.init_from, "bias": self.bias_mapping}
        return identity

    @property
    def family(self) -> str:
        """12 hex digits over the identity without variant name, seed, LR and warmup: runs of
        one family differ only there, so their stability can be compared along the LR axis."""
        identity = self.identity()
        for key in ("variant", "seed"):
            identity.pop(key)
        identity["train"] = {
            k: v for k, v in identity["train"].items() if k not in ("lr", "warmup_steps")
        }
        return _digest(identity)

    @property
    def run_id(self) -> str:
        """12 hex digits of sha256 over the canonical JSON of :meth:`identity`."""
        return _digest(self.identity())

    def summary_keys(self) -> dict[str, Any]:
        """What a run's summary says about which run it is: experiment, run id, family,
        variant, seed, data seed, group, LR and warmup (the first summary keys)."""
        return {
            "experiment": self.experiment,
            "run_id": self.run_id,
            "family": self.family,
            "variant": self.variant,
            "seed": self.seed,
            "data_seed": self.data_seed,
            "group": self.group,
            "lr": self.config.train.lr,
            "warmup_steps": self.config.train.warmup_steps,
        }

    def to_json(self) -> dict[str, Any]:
        """The resolved run as stored in ``config.json``."""
        return {
            "experiment": self.experiment,
            "variant": self.variant,
            "seed": self.seed,
            "data_seed": self.data_seed,
            "run_id": self.run_id,
            "group": self.group,
            "init_from": self.init_from,
            "bias_mapping": self.bias_mapping,
            "config": self.config.model_dump(mode="json"),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunSpec:
        """Rebuild a RunSpec from :meth:`to_json`'s output."""
        return cls(
            experiment=data["experiment"],
            variant=data["variant"],
            seed=data["seed"],
            config=RunConfig.model_validate(data["config"]),
            group=data.get("group", "main"),
            init_from=data.get("init_from"),
            bias_mapping=data.get("bias_mapping"),
        )


def with_train(config: RunConfig, **fields: Any) -> RunConfig:
    """A copy of ``config`` with some ``train`` fields replaced (None: keep). Not validated
    again: the values come from sections validated at load (a search's range, a lattice, a
    stored optimum); a name that is no ``train`` key is a programming error (TypeError)."""
    changed = {k: v for k, v in fields.items() if v is not None}
    unknown = sorted(set(changed) - set(type(config.train).model_fields))
    if unknown:
        raise TypeError(f"with_train: no train key {', '.join(unknown)}")
    return config.model_copy(update={"train": config.train.model_copy(update=changed)})


def plan_runs(experiment: Experiment, seeds: list[int] | None = None) -> list[RunSpec]:
    """Every variant x seed (``seeds``, default the experiment's), seed-major so matched pairs
    complete together."""
    return [
        RunSpec(experiment.name, variant, seed, config)
        for seed in seeds or experiment.seeds
        for variant, config in experiment.variants.items()
    ]


def plan_lr_grid(experiment: Experiment, grid: SweepConfig, group: str) -> list[RunSpec]:
    """Every variant at every LR of ``grid`` for each of its seeds (default: the experiment's)."""
    return plan_lr_points(
        experiment, grid.lrs(), grid.seeds or experiment.seeds, grid.tokens, group
    )


def plan_lr_points(
    experiment: Experiment,
    lrs: list[float],
    seeds: list[int],
    tokens: int | None,
    group: str,
    warmup_steps: int | None = None,
) -> list[RunSpec]:
    """Every variant at every one of ``lrs`` on each of ``seeds``, at budget ``tokens`` (None:
    train's) and warmup ``warmup_steps`` (None: train's), seed-major."""
    return [
        RunSpec(
            experiment.name,
            variant,
            seed,
            with_train(config, lr=lr, tokens=tokens, warmup_steps=warmup_steps),
            group=group,
        )
        for seed in seeds
        for lr in lrs
        for variant, config in experiment.variants.items()
    ]


def plan_sweep(experiment: Experiment) -> list[RunSpec]:
    """The LR grid of ``sweep:`` (none without ``sweep:``)."""
    if experiment.sweep is None:
        return []
    return plan_lr_grid(experiment, experiment.sweep, "sweep")


def plan_curve(experiment: Experiment, grown: tuple[int, int] = (0, 0)) -> list[RunSpec]:
    """Every variant at every lattice LR of ``curve:`` (grown by ``grown`` octaves below and
    above its range) on the curve seeds, at the curve budget and at the warmup the tuned runs
    train at where the file declares one (``curve.warmup_steps``: the LR is chosen at the warmup
    it is trained at), else the file's (none without ``curve:``)."""
    cfg = experiment.curve
    if cfg is None:
        return []
    return plan_lr_points(
        experiment,
        cfg.lrs(*grown),
        experiment.curve_seeds(),
        cfg.tokens,
        "curve",
        cfg.warmup_steps,
    )


@dataclass(frozen=True)
class Settings:
    """A variant's chosen training settings: the LR and warmup its tuned runs train at."""

    lr: float
    warmup_steps: int

    def applied(self, config: RunConfig) -> RunConfig:
        """``config`` at these settings (:func:`with_train`)."""
        return with_train(config, lr=self.lr, warmup_steps=self.warmup_steps)


def plan_tuned(
    experiment: Experiment, best: dict[str, Settings], seeds: list[int] | None = None
) -> list[RunSpec]:
    """The tuned A/B: every variant with chosen settings at its own (``best[variant]``), on
    ``seeds`` (default the experiment's) at the full budget; seed-major like
    :func:`plan_runs`, so each seed's initial weights and batches are matched as there."""
    return [
        RunSpec(experiment.name, variant, seed, best[variant].applied(config), group="tuned")
        for seed in seeds or experiment.seeds
        for variant, config in experiment.variants.items()
        if best.get(variant)
    ]


def plan_crossover(
    experiment: Experiment, best: dict[str, Settings], seeds: list[int]
) -> list[RunSpec]:
    """The cross-over of the tuned A/B: each variant at the baseline's tuned settings and the
    baseline at each variant's, on ``seeds`` (the tuned A/B's), so
    every comparison is also made at one shared setting; none where the two settings are the
    same (that run is the tuned one)."""
    baseline = next(iter(experiment.variants))
    mine = best.get(baseline)
    specs = []
    for seed in seeds:
        for variant in experiment.variants:
            other = best.get(variant)
            if variant == baseline or not other or not mine or other == mine:
                continue
            for who, settings in ((variant, mine), (baseline, other)):
                trained = settings.applied(experiment.variants[who])
                specs.append(RunSpec(experiment.name, who, seed, trained, group="crossover"))
    return specs


def max_lr_family(experiment: Experiment, variant: str) -> str:
    """The run family of the variant's max-LR probes (its config at the ``max_lr`` budget,
    seed, LR and warmup aside): what a probe's verdict depends on besides LR and seed, and
    the runs a bracket is checked against."""
    cfg = experiment.max_lr
    assert cfg is not None
    config = with_train(experiment.variants[variant], tokens=cfg.tokens)
    return RunSpec(experiment.name, variant, 0, config).family


CONTROL, CONVERTED = "continued", "converted"


def plan_convert(experiment: Experiment) -> list[RunSpec]:
    """The ``convert:`` runs: per seed, the source run continued as is and converted."""
    plan = experiment.convert
    if plan is None:
        return []
    source = experiment.variants[plan.source]
    specs = []
    for seed in plan.seeds:
        source_id = RunSpec(experiment.name, plan.source, seed, source).run_id
        for variant, config in ((CONTROL, plan.control), (CONVERTED, plan.converted)):
            specs.append(
                RunSpec(
                    experiment.name,
                    variant,
                    seed,
                    config,
                    group="convert",
                    init_from=source_id,
                    bias_mapping=plan.bias,
                )
            )
    return specs
