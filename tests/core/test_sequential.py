"""When ``decide:`` looks, at which level, and which seeds it adds."""

from __future__ import annotations

from pathlib import Path

from conftest import write_experiment

from ablate.core.load import load_experiment
from ablate.core.sequential import decide_seeds, look_alpha, looks, reserved_seeds
from ablate.core.stage_sections import DecideConfig


def test_looks_step_from_the_start_and_end_at_the_maximum() -> None:
    assert looks(3, DecideConfig(max_seeds=9, step=2)) == [3, 5, 7, 9]
    assert looks(3, DecideConfig(max_seeds=10, step=3)) == [3, 6, 9, 10]
    assert looks(3, DecideConfig(max_seeds=4, step=5)) == [3, 4]
    assert look_alpha(4) == 0.0125


def test_added_seeds_come_above_every_seed_a_stage_uses(tmp_path: Path) -> None:
    path = write_experiment(
        tmp_path / "e.yaml",
        seeds=[0, 1, 2],
        decide={"max_seeds": 6},
        curve={"lr_min": 1e-3, "lr_max": 1e-2},
        sweep={"lr_min": 1e-3, "lr_max": 1e-2, "points": 2, "seeds": [9]},
    )
    experiment = load_experiment(path)
    assert reserved_seeds(experiment) == {0, 1, 2, 3, 4, 9}  # curve seeds 3, 4 and the sweep's
    assert decide_seeds(experiment) == [0, 1, 2, 10, 11, 12]
