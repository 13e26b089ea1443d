"""The max-LR stage's start: the largest stable LR among the runs the plan holds, whatever
else the store holds (a walk's point trained ahead on a free worker, an earlier plan's run)."""

from __future__ import annotations

from pathlib import Path

from conftest import simulated_experiment

from ablate.core import store
from ablate.core.folders import ExperimentFolder
from ablate.core.plan import RunSpec, Settings
from ablate.launch.simulator import SimulatedExecutor
from ablate.launch.stages.max_lr import stored_stable_starts


def test_the_probes_start_at_the_largest_stable_lr_the_plan_holds(tmp_path: Path) -> None:
    experiment = simulated_experiment(tmp_path, max_lr={"seeds": [0]})
    variant = experiment.variants["layernorm"]
    specs = [
        RunSpec(experiment.name, "layernorm", 0, Settings(lr, 3).applied(variant), group="usable")
        for lr in (0.002, 0.004)
    ]
    ran = SimulatedExecutor(tmp_path / "results").run(specs)
    assert all(r.stable for r in ran)
    runs = store.load_summaries(ExperimentFolder.of(tmp_path / "results", experiment.name))
    low, high = (s.run_id for s in specs)
    assert stored_stable_starts(experiment, runs, {low, high}) == {"layernorm": 0.004}
    assert stored_stable_starts(experiment, runs, {low}) == {"layernorm": 0.002}  # 0.004 unplanned
    assert stored_stable_starts(experiment, runs, set()) == {}
