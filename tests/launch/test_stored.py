"""What a results folder holds of a plan: runs and their steps per stage, held runs too."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write_experiment

from ablate.core import store
from ablate.core.load import load_experiment
from ablate.launch.estimate import describe_plan
from ablate.launch.pipeline import run_experiment
from ablate.launch.stored import Stored, stored_counts, stored_lines


def test_runs_held_short_count_as_the_plans_with_the_steps_they_trained(
    tmp_path: Path, unrendered_figures: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ablate.training import timing  # describe_plan imports it when called

    monkeypatch.setattr(timing, "time_steps", lambda *args, **kwargs: 0.05)
    truth = {"variants": {"layernorm": {"opt_lr": 0.004}, "rmsnorm": {"opt_lr": 0.009}}}
    path = write_experiment(
        tmp_path / "e.yaml",
        runtime={"backend": "simulate", "simulate": {**truth, "run_sd": 0.005}},
        storage=f"journal:{tmp_path / 'studies.log'}",
        curve={"lr_min": 1e-3, "lr_max": 3e-2, "stop_step": 10, "stop_margin": 0.1},
        max_lr={"seeds": [0, 1], "stop_step": 8},
        decide={"max_seeds": 4, "step": 2},  # 2 seeds cannot decide: seeds 4 and 5 added
    )
    experiment = load_experiment(path)
    root = tmp_path / "results"
    result = run_experiment(experiment, root, tmp_path / "reports")
    runs = store.load_summaries(result.folder)
    held = runs[runs["steps"] < runs["planned_steps"]]
    assert set(held["group"]) == {"curve", "max_lr"}  # points stopped at 10, probes at 8
    stored = stored_counts(experiment, root)
    assert sum(stored.counts.values()) == len(runs)  # every run, held ones too
    assert sum(stored.steps.values()) == runs["steps"].sum()
    for variant in experiment.variants:
        mine = runs[(runs["variant"] == variant) & (runs["group"] == "max_lr")]
        for group in ("tuned", "crossover"):  # the file's seeds' runs; the rest decide:'s
            assert stored.counts[(variant, group)] == 2
        assert stored.counts[(variant, "decide")] == 4 and stored.steps[(variant, "decide")] == 80
        assert stored.steps[(variant, "max_lr")] == mine["steps"].sum()
        assert (variant, "max_lr") in stored.finished  # its probes all stored
    assert describe_plan(experiment, 1, 1, stored).runs == 0  # nothing left to train
    assert "(finished)" in stored_lines(experiment, root, stored)[0]
    expected = describe_plan(experiment, 1, 1, expected=stored)  # as the simulator counts
    assert expected.expected_runs == len(runs)
    per_stage: dict[str, int] = {}
    for (_, group), steps in stored.steps.items():
        per_stage[group] = per_stage.get(group, 0) + steps
    assert expected.expected_run_steps == per_stage
    assert sum(per_stage.values()) == runs["steps"].sum()
    as_whole = Stored(stored.counts, set(), {key: 0 for key in stored.steps})
    for run in runs.itertuples():  # the same runs, each at its whole budget
        as_whole.steps[(run.variant, run.group)] += run.planned_steps
    priced_whole = describe_plan(experiment, 1, 1, expected=as_whole)
    spared = runs["planned_steps"].sum() - runs["steps"].sum()  # by the holds
    assert priced_whole.expected_wall_time_s - expected.expected_wall_time_s == pytest.approx(
        spared * 0.05
    )
