"""The plan's cost: run counts per stage, fixed costs, one timing per distinct model."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, tiny_config, write_experiment

from ablate.core.load import load_experiment
from ablate.launch.estimate import (
    EXPERIMENT_FIXED_S,
    RUN_SETUP_S,
    STAGE_START_S,
    describe_plan,
    estimate_run_time,
    fixed_costs,
)


def test_fixed_costs_count_a_pool_start_per_stage() -> None:
    smoke = load_experiment(REPO / "experiments" / "smoke.yaml")
    stages = ("main", "search", "tuned", "crossover", "usable", "max_lr")
    assert fixed_costs(smoke) == len(stages) * STAGE_START_S + EXPERIMENT_FIXED_S
    plain = load_experiment(REPO / "experiments" / "lr_stability.yaml")
    assert plain.search is None and plain.convert is None
    stages = 1 + (plain.max_lr is not None)
    assert fixed_costs(plain) == stages * STAGE_START_S + EXPERIMENT_FIXED_S


def test_the_default_experiment_estimate_has_every_variant_and_its_fixed_costs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # how close the estimate comes to measured wall times is a figure, not an assertion: it
    # depends on the machine and its load (ablate validate prints it beside runs.csv). The
    # step time is given here (the next test times real steps of the tiny model)
    from ablate.training import timing  # describe_plan imports it when called

    monkeypatch.setattr(timing, "time_steps", lambda *args, **kwargs: 0.05)
    experiment = load_experiment(REPO / "experiments" / "ln_vs_rms.yaml")
    plan = describe_plan(experiment, workers=2, threads=1)
    assert list(plan.table["variant"]) == list(experiment.variants)
    assert plan.table["step_time_ms"].tolist() == pytest.approx([50.0] * len(plan.table))
    steps_and_setup = plan.table["steps"] * 0.05 + RUN_SETUP_S  # evaluations come on top
    assert (plan.table["est_run_time_s"] > steps_and_setup).all()
    assert plan.runs * RUN_SETUP_S / 2 < plan.fixed_s < plan.wall_time_s


def test_a_grid_over_lr_and_warmup_times_its_one_model_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ablate.training import timing

    grid = {"train.lr": [1e-3, 2e-3, 3e-3], "train.warmup_steps": [0, 2]}
    experiment = load_experiment(write_experiment(tmp_path / "g.yaml", grid=grid))
    timed = []
    real = timing.time_steps
    monkeypatch.setattr(timing, "time_steps", lambda *a, **k: timed.append(1) or real(*a, **k))
    plan = describe_plan(experiment, workers=1, threads=1)
    assert len(plan.table) == 6 + 2 and len(timed) == 2  # grid cells share the LayerNorm model


def test_a_final_evaluation_on_the_whole_split_adds_its_batches_forward_only() -> None:
    windows = tiny_config()  # 20 steps of 4 x 16 tokens, 3 evaluations of 2 batches
    split = tiny_config(**{"train.final_eval": "split"})
    assert estimate_run_time(windows, 1.0, 6400) == pytest.approx(20 + 3 * 2 / 3)
    assert estimate_run_time(split, 1.0, 6400) == pytest.approx(20 + (3 * 2 + 100) / 3)


def test_with_a_store_only_the_runs_left_are_counted_and_timed(
    tmp_path: Path, unrendered_figures: None
) -> None:
    from ablate.launch.pipeline import run_experiment
    from ablate.launch.stored import stored_counts, stored_lines

    curve = {"seeds": [3, 4], "lr_min": 1e-3, "lr_max": 4e-3, "warmup_trials": 2}
    path = write_experiment(
        tmp_path / "e.yaml",
        runtime={"backend": "simulate"},
        curve={**curve, "warmup_startup": 1},
        max_lr={"factor": 2.0},
    )
    experiment = load_experiment(path)
    fresh = describe_plan(experiment, 1, 1)
    root = tmp_path / "results"
    run_experiment(experiment, root, tmp_path / "reports")
    stored = stored_counts(experiment, root)
    assert stored.counts[("layernorm", "main")] == 2 and stored.counts[("rmsnorm", "curve")] >= 8
    assert stored.counts[("layernorm", "warmup")] == 4  # 2 trials on 2 curve seeds
    # the max-LR studies finished, and with them every stage before them
    assert {(v, "max_lr") for v in ("layernorm", "rmsnorm")} <= stored.finished
    assert ("rmsnorm", "usable") in stored.finished and ("layernorm", "curve") in stored.finished
    left = describe_plan(experiment, 1, 1, stored)
    assert fresh.runs > 100 and left.runs == 0  # the max-LR bound is moot once it finished
    assert left.wall_time_s < fresh.wall_time_s / 10
    line = stored_lines(experiment, root)[0]
    assert "main 4 of 4, curve " in line and "max_lr " in line and "(finished)" in line
    moved = load_experiment(path, settings=["train.lr=0.0021"])  # a study key: runs still used
    assert describe_plan(moved, 1, 1, stored_counts(moved, root)).runs == 4  # main retrains
