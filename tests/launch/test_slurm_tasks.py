"""How the Slurm launcher packs a stage's runs into the tasks of one array (no cluster needed;
the packed tasks themselves are tested on one in test_slurm.py)."""

from __future__ import annotations

import pytest
from conftest import tiny_config

from ablate.core.plan import RunSpec
from ablate.launch.slurm import pack


def _specs(n: int) -> list[RunSpec]:
    return [RunSpec("tiny", "layernorm", seed, tiny_config()) for seed in range(n)]


@pytest.mark.parametrize(
    ("runs", "parallel", "most", "sizes"),
    [
        (4, 64, 16, [1, 1, 1, 1]),  # fewer runs than slots: one each, all at once
        (4, 2, 16, [2, 2]),  # two slots: two tasks of two
        (5, 2, 16, [3, 2]),
        (136, 64, 16, [3] * 8 + [2] * 56),  # the default experiment on 64 slots
        (136, 4, 16, [16] + [15] * 8),  # over 16 a task: 9 tasks, not 4
        (1, 8, 1, [1]),
    ],
)
def test_runs_are_spread_over_the_slots_then_packed(
    runs: int, parallel: int, most: int, sizes: list[int]
) -> None:
    specs = _specs(runs)
    tasks = pack(specs, parallel, most)
    assert [len(task) for task in tasks] == sizes
    assert [spec for task in tasks for spec in task] == specs  # every run once, in order
