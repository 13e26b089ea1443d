"""What a plan will cost before it runs: parameters counted, step time measured.

:func:`describe_plan` checks the inputs first (:func:`ablate.launch.preflight.check_inputs`),
then builds each variant's model once, times a few real optimizer
steps at the thread count the executor will use (or reads the step time stored on this
machine: :mod:`ablate.launch.step_times`), and turns that into an estimate of every run's
time and of the whole experiment's wall time: at most (every study stage at its cap) and, given
the run counts the design reaches on the simulator (:mod:`ablate.launch.expect`), expected.
Fixed costs are added as measured on a 2-core CPU: each run's set-up (model, Trainer, files),
each stage's pool start (workers forked from a server that imported torch and Lightning at the
first), and the start-up and report of the experiment. A step's time is the fastest of a few
(other work on the machine slows some of them); the machine's load while they were timed is
kept, so the estimate can say when it was busy.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ablate.core.config import RunConfig
from ablate.core.experiment import Experiment
from ablate.core.stages import planned_groups, planned_runs
from ablate.launch.preflight import check_inputs
from ablate.launch.progress import StepsLeft
from ablate.launch.step_times import StepTime, now, stored_step_times, time_key
from ablate.launch.stored import Stored, stored_counts
from ablate.launch.workers import torch_threads

if TYPE_CHECKING:
    from ablate.training.data import Corpus

RUN_SETUP_S = 0.5  # per run: building the model and the Trainer, writing the run's files
STAGE_START_S = 4.0  # per stage: starting the pool (or importing Lightning in this process)
EXPERIMENT_FIXED_S = 6.0  # start-up (imports, corpora, plan) and writing the report


@dataclass(frozen=True)
class PlanEstimate:
    """One row per variant, and the experiment's estimated wall time with ``workers`` workers:
    at most (``runs``: every stage at its cap) and, where the expected counts were given,
    expected (``expected_runs``); ``train_s`` the expected (else maximal) seconds of training
    summed over runs, for core-hours; ``load`` the machine's 1-minute load average when the
    steps were timed."""

    table: pd.DataFrame
    runs: int
    workers: int
    wall_time_s: float
    fixed_s: float  # the part of wall_time_s that is not training steps
    expected_runs: int | None
    expected_run_steps: dict[str, int] | None  # per group, a held run's to its stop
    expected_wall_time_s: float | None
    train_s: float
    load: float
    timed: dict[str, StepTime]  # step times measured by this call, by :func:`time_key`
    untimed: int  # distinct models with no step time (not timed, none stored): not priced
    run_steps: dict[str, int]  # per group, at most, over the variants: runs left x their steps


def estimate_run_time(cfg: RunConfig, step_time_s: float, val_tokens: int = 0) -> float:
    """Training steps plus evaluations (a forward pass costs about a third of a step), the
    last over the whole split of ``val_tokens`` where ``train.final_eval`` is ``split``."""
    steps = cfg.steps()
    evals = steps // cfg.train.eval_interval + 1
    batches = evals * cfg.train.eval_batches
    if cfg.train.final_eval == "split":
        batches += val_tokens // (cfg.model.seq_len * cfg.train.batch_size)
    return step_time_s * (steps + batches / 3)


def step_key(cfg: RunConfig, corpus: Corpus) -> str:
    """What a step's cost depends on: the model, its vocabulary, batch and precision (a grid
    over LR and warmup has one key for all its cells)."""
    train = cfg.train
    return f"{cfg.model.model_dump_json()}|{corpus.vocab_size}|{train.batch_size}|{train.precision}"


def describe_plan(
    experiment: Experiment,
    workers: int,
    threads: int,
    stored: Stored | None = None,
    expected: Stored | None = None,
    time_now: bool = True,
) -> PlanEstimate:
    """Per variant: runs by group (at most), steps, parameters, step time, estimated time;
    with ``stored`` (:func:`~ablate.launch.stored.stored_counts`) only the runs still to train
    are counted and timed; with ``expected`` (the runs the design trains on the simulator,
    counted as a store's: a run held short at the steps it trained) the expected wall time
    beside the maximal one. Steps are timed now (``time_now``) or read from the step times
    stored on this machine (:mod:`ablate.launch.step_times`); a model with neither has no
    price (NaN). Torch is imported here, not with the module: a run counting
    its steps left (:func:`steps_to_train`) on the simulator never loads it."""
    import torch

    from ablate.nn.model import count_parameters
    from ablate.nn.sources import build_model
    from ablate.training.timing import time_steps

    held = stored or Stored({}, set())
    corpora = check_inputs(experiment)
    rows = []
    likely_runs, likely_s = 0, 0.0
    likely_steps: dict[str, int] = {}  # expected run-steps per group, over the variants
    measured: dict[str, tuple[int, StepTime | None]] = {}  # one build per distinct model
    timed: dict[str, StepTime] = {}
    cached = {} if time_now else stored_step_times()
    left: dict[str, int] = {}  # runs left to train per group, over the variants
    run_steps: dict[str, int] = {}  # and their steps
    with torch_threads(threads):
        for name, cfg in experiment.variants.items():
            corpus = corpora[name]
            key = step_key(cfg, corpus)
            if key not in measured:
                model = build_model(cfg.model, corpus.vocab_size, seed=0)
                stored_as = time_key(key, threads, torch.__version__)
                if time_now:
                    load = os.getloadavg()[0]
                    timed[stored_as] = StepTime(time_steps(model, cfg, corpus), load, now())
                measured[key] = (
                    count_parameters(model),
                    timed.get(stored_as) or cached.get(stored_as),
                )
            parameters, found = measured[key]
            step_time = found.step_s if found else math.nan
            extra = runs_left(experiment, name, cfg, held)
            for group, (n, steps) in extra.items():
                left[group] = left.get(group, 0) + n
                run_steps[group] = run_steps.get(group, 0) + n * steps
            seeds = extra.pop("main")[0]
            run_time = estimate_run_time(cfg, step_time, len(corpus.val)) + RUN_SETUP_S
            extra_time = stages_time(extra, step_time)
            if expected is not None:
                likely = expected_left(expected, held, name, list(extra))
                likely_runs += seeds + sum(n for n, _ in likely.values())
                for group, s in {
                    "main": seeds * cfg.steps(),
                    **{g: s for g, (_, s) in likely.items()},
                }.items():
                    likely_steps[group] = likely_steps.get(group, 0) + s
                likely_s += run_time * seeds + sum(
                    s * step_time + n * RUN_SETUP_S for n, s in likely.values()
                )
            rows.append(
                {
                    "variant": name,
                    "norm": f"{cfg.model.norm_placement()}-{cfg.model.norm_kind()}",
                    "seeds": seeds,
                    "steps": cfg.steps(),
                    "tokens_per_run": cfg.steps() * cfg.tokens_per_step(),
                    "parameters": parameters,
                    "step_time_ms": step_time * 1e3,
                    "est_run_time_s": run_time,
                    **{f"{group}_runs": n for group, (n, _) in extra.items()},
                    "est_variant_time_s": run_time * seeds + extra_time,
                }
            )
    table = pd.DataFrame(rows)
    runs = int(table["seeds"].sum()) + int(
        table[[c for c in table if c.endswith("_runs")]].fillna(0).to_numpy().sum()
    )
    parallel = max(1, min(workers, runs))
    # a pool starts only for a stage with runs left to train
    training = {group for group, n in left.items() if n > 0} if stored is not None else None
    fixed = fixed_costs(experiment, training)
    most_s = float(table["est_variant_time_s"].sum())
    wall = most_s / parallel + fixed
    likely_wall = None
    if expected is not None:
        likely_wall = likely_s / max(1, min(workers, likely_runs)) + fixed
    return PlanEstimate(
        table,
        runs,
        workers,
        wall,
        fixed + runs * RUN_SETUP_S / parallel,
        likely_runs if expected is not None else None,
        likely_steps if expected is not None else None,
        likely_wall,
        likely_s if expected is not None else most_s,
        max((t.load for _, t in measured.values() if t), default=0.0),
        timed,
        sum(1 for _, t in measured.values() if t is None),
        run_steps,
    )


def expected_left(
    expected: Stored, held: Stored, variant: str, stages: list[str]
) -> dict[str, tuple[int, int]]:
    """Per study stage of ``variant``: (runs, run-steps) of those the design trains on the
    simulator (``expected``, a held run's steps to its stop) that ``held`` does not hold."""
    return {
        stage: (
            held.remaining(variant, stage, expected.counts.get((variant, stage), 0)),
            held.steps_remaining(variant, stage, expected.steps.get((variant, stage), 0)),
        )
        for stage in stages
    }


def stages_time(stages: dict[str, tuple[int, int]], step_time_s: float) -> float:
    """Seconds of the study stages' runs: {stage: (runs, steps per run)} at ``step_time_s``."""
    return sum(n * (steps * step_time_s + RUN_SETUP_S) for n, steps in stages.values())


def fixed_costs(experiment: Experiment, training: set[str] | None = None) -> float:
    """Seconds of wall time outside the runs: a pool start per stage (of ``training`` only,
    when given: the stages with runs left), and the experiment's start-up and report."""
    stages = [g for g in planned_groups(experiment) if g != "sweep"]  # sweep: in main's pool
    if training is not None:
        stages = [g for g in stages if g in training]
    return len(stages) * STAGE_START_S + EXPERIMENT_FIXED_S


def steps_to_train(experiment: Experiment, results_dir: Path) -> StepsLeft:
    """The steps every stage may still train with what ``results_dir`` holds, each stage at
    its maximum (:func:`~ablate.core.stages.planned_runs`), and the steps of one run per
    (variant, stage): what :class:`~ablate.launch.progress.ExperimentPace` counts down."""
    held = stored_counts(experiment, results_dir)
    total, steps_of = 0, {}
    for name, cfg in experiment.variants.items():
        for stage, (runs, steps) in runs_left(experiment, name, cfg, held).items():
            steps_of[(name, stage)] = steps
            total += runs * steps
    return total, steps_of


def runs_left(
    experiment: Experiment, variant: str, cfg: RunConfig, held: Stored
) -> dict[str, tuple[int, int]]:
    """Per stage of one variant, main first: (runs still to train given ``held``, steps per
    run); each study stage at its maximum (:func:`~ablate.core.stages.planned_runs`)."""
    stages = planned_runs(experiment, cfg, variant)
    return {
        stage: (held.remaining(variant, stage, n), steps) for stage, (n, steps) in stages.items()
    }
