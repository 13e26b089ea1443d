"""The plan's cost: the estimate against what the committed reports measured."""

from __future__ import annotations

import pandas as pd
from conftest import REPO

from ablate.core.load import load_experiment
from ablate.launch.estimate import (
    EXPERIMENT_FIXED_S,
    RUN_SETUP_S,
    STAGE_START_S,
    describe_plan,
    fixed_costs,
)


def test_fixed_costs_count_a_pool_start_per_stage() -> None:
    smoke = load_experiment(REPO / "experiments" / "smoke.yaml")  # main, search, tuned, max_lr
    assert fixed_costs(smoke) == 4 * STAGE_START_S + EXPERIMENT_FIXED_S
    plain = load_experiment(REPO / "experiments" / "lr_stability.yaml")
    assert plain.search is None and plain.convert is None
    stages = 1 + (plain.max_lr is not None)
    assert fixed_costs(plain) == stages * STAGE_START_S + EXPERIMENT_FIXED_S


def test_default_experiment_run_time_within_2x_of_the_committed_runs() -> None:
    experiment = load_experiment(REPO / "experiments" / "ln_vs_rms.yaml")
    plan = describe_plan(experiment, workers=2, threads=1)
    measured = pd.read_csv(REPO / "reports" / "ln_vs_rms" / "runs.csv")
    main = measured[measured["group"] == "main"].groupby("variant")["wall_time_s"].mean()
    for row in plan.table.itertuples():
        ratio = row.est_run_time_s / main[row.variant]
        assert 0.5 <= ratio <= 2.0, (row.variant, row.est_run_time_s, main[row.variant])
    assert plan.runs * RUN_SETUP_S / 2 < plan.fixed_s < plan.wall_time_s
