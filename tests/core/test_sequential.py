"""When ``decide:`` looks, at which level, and which seeds it adds."""

from __future__ import annotations

from pathlib import Path

from conftest import write_experiment

from ablate.core.load import load_experiment
from ablate.core.sequential import decide_seeds, futile, look_alpha, looks, reserved_seeds
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


def test_futility_stops_from_the_second_look_where_no_undecided_verdict_fits_the_seeds_left() -> (
    None
):
    counts = [3, 5, 7, 9]
    assert futile([5], 2, counts) and futile([None], 3, counts)  # 4 and 2 seeds left
    assert not futile([4], 2, counts)  # 4 more: the last look could still decide it
    assert not futile([41], 1, counts)  # the first look projects from 3 seeds: never
    assert futile([41], 1, counts, first=1)
    assert not futile([41], 4, counts)  # the last look stops anyway, as "maximum"
    assert not futile([], 2, counts)  # nothing undecided, or one not estimable
    assert not futile([50, 2], 2, counts)  # one variant may still be decided
