"""The curve's early stop: paired gaps above the best point, the points beyond the margin, a
run's value at the step, and the file's check that the step is an evaluation."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from conftest import write_experiment

from ablate.core import folders
from ablate.core.early_stop import (
    PointStop,
    gaps,
    held_at,
    points_to_stop,
    result_of,
    stop_of,
    value_at,
)
from ablate.core.errors import ConfigError
from ablate.core.folders import ExperimentFolder
from ablate.core.load import load_experiment
from ablate.core.plan import plan_runs
from ablate.core.record import RunRecord
from ablate.core.stability import StopKind


def test_gaps_are_paired_by_seed_from_the_lowest_mean() -> None:
    values = {
        0.001: {0: 3.0, 1: 3.4},
        0.002: {0: 2.5, 1: 2.9},  # the best: mean 2.7
        0.004: {0: 2.6, 1: 2.8},  # mean 2.7 too, paired gap 0.0
        0.008: {1: 3.25},  # shares seed 1 only: 3.25 - 2.9
    }
    found = gaps(values)
    assert found == pytest.approx({0.001: 0.5, 0.002: 0.0, 0.004: 0.0, 0.008: 0.35})
    assert points_to_stop(values, 0.4) == [PointStop(0.001, pytest.approx(0.5))]
    assert [p.lr for p in points_to_stop(values, 0.3)] == [0.001, 0.008]
    assert math.isnan(gaps({0.001: {0: 2.0}, 0.002: {1: 3.0}})[0.002])  # no seed shared
    assert points_to_stop({0.001: {0: 2.0}, 0.002: {1: 3.0}}, 0.1) == []


def _record(**fields: object) -> RunRecord:
    base = {key: None for key in RunRecord.__dataclass_fields__}
    return RunRecord(**{**base, "initial_loss": 5.5, "extra": {}, **fields})  # type: ignore[arg-type]


def test_a_runs_value_is_its_clipped_val_loss_at_the_step(tmp_path: Path) -> None:
    run = ExperimentFolder.of(tmp_path, "e").run("abc")
    run.path.mkdir(parents=True)
    frame = pd.DataFrame({"step": [1, 2, 3, 4], "val_loss": [None, 4.0, None, 6.0]})
    folders.write_frame_atomic(run.metrics, frame)
    assert value_at(run, _record(), 2) == 4.0
    assert value_at(run, _record(), 4) == 5.5  # above ℓ0: counted as ℓ0
    assert value_at(run, _record(), 3) == 5.5  # no evaluation there
    assert value_at(run, _record(diverged_step=2), 2) == 5.5  # diverged by then
    assert value_at(run, _record(diverged_step=3), 2) == 4.0


def test_a_held_spec_is_the_same_run_paused_at_the_step(tmp_path: Path) -> None:
    spec = plan_runs(load_experiment(write_experiment(tmp_path / "e.yaml")))[0]
    held = held_at(spec, 10)
    assert held.run_id == spec.run_id and held.config.runtime.pause_step == 10
    assert spec.config.runtime.pause_step is None
    stop = stop_of(PointStop(0.001, 0.31), 10, 0.2)
    assert (stop.kind, stop.step, stop.loss, stop.threshold) == (StopKind.FAR_ABOVE, 10, 0.31, 0.2)
    assert replace(held, config=spec.config) == spec


@pytest.mark.parametrize("step", [5, 20, 30])  # not an evaluation (every 10), or not before 20
def test_a_stop_step_that_is_no_evaluation_before_the_end_is_refused(
    tmp_path: Path, step: int
) -> None:
    path = write_experiment(tmp_path / "e.yaml", curve={"stop_step": step})
    with pytest.raises(ConfigError) as refused:
        load_experiment(path)
    assert (refused.value.key, refused.value.code) == ("curve.stop_step", "no_step")
    ok = write_experiment(tmp_path / "ok.yaml", curve={"stop_step": 10})
    assert load_experiment(ok).curve.stop_step == 10


def test_a_run_held_short_is_the_result_only_of_a_spec_held_at_its_step(tmp_path: Path) -> None:
    spec = plan_runs(load_experiment(write_experiment(tmp_path / "e.yaml")))[0]
    run = ExperimentFolder.of(tmp_path, spec.experiment).run(spec.run_id)
    run.path.mkdir(parents=True)
    for status in ("paused", "pruned"):  # held there, or stopped there by the curve
        run.write_record(_record(status=status, group="curve", steps=10))
        assert result_of(run, held_at(spec, 10)) is not None
        assert result_of(run, held_at(spec, 20)) is None  # the file's step changed
        assert result_of(run, spec) is None  # trained whole: another stage, or no early stop
    run.write_record(_record(status="pruned", group="search", steps=10))  # a search's pruner
    assert result_of(run, spec) is not None
    run.write_record(_record(status="finished", group="curve", steps=20))
    assert result_of(run, spec) is not None and result_of(run, held_at(spec, 10)) is not None
    run.write_record(_record(status="failed", group="curve", steps=10))
    assert result_of(run, held_at(spec, 10)) is None


@pytest.mark.parametrize(
    ("max_lr", "code"),
    [
        ({"walk_step": 5}, "no_step"),  # no evaluation (every 10)
        ({"walk_step": 20}, "no_step"),  # not before the last step
        ({"walk_step": 10, "within": None}, "no_walk"),  # nothing to hold
    ],
)
def test_a_walk_hold_without_an_evaluation_before_the_end_or_a_walk_is_refused(
    tmp_path: Path, max_lr: dict[str, object], code: str
) -> None:
    path = write_experiment(tmp_path / "e.yaml", max_lr=max_lr)
    with pytest.raises(ConfigError) as refused:
        load_experiment(path)
    assert (refused.value.key, refused.value.code) == ("max_lr.walk_step", code)
    ok = write_experiment(tmp_path / "ok.yaml", max_lr={"walk_step": 10})
    assert load_experiment(ok).max_lr.walk_step == 10
