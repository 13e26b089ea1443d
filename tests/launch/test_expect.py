"""The expected cost: a design run on the simulator, its runs and Slurm submissions counted."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import simulated_experiment, write_experiment

from ablate.cli import main
from ablate.core.cluster import SlurmConfig
from ablate.core.plan import plan_runs
from ablate.core.stages import study_runs
from ablate.launch.execute import Request
from ablate.launch.expect import CountingExecutor, simulate_design

SEARCH = {"n_trials": 3, "lr_min": 1e-3, "lr_max": 0.1, "warmup_max": 10}
MAX_LR = {"factor": 4.0, "lr_max": 10.0}


def test_queued_runs_are_served_by_the_tasks_already_running(tmp_path: Path) -> None:
    experiment = simulated_experiment(tmp_path, seeds=[0, 1, 2, 3, 4, 5])
    specs = plan_runs(experiment)  # 2 variants x 6 seeds
    slurm = SlurmConfig(array_parallelism=4, runs_per_task=2)
    counter = CountingExecutor(tmp_path / "results", slurm)
    counter.run(specs[:6])
    assert (counter.submissions, counter.tasks) == (1, 4)  # 6 runs over 4 slots, 2 a task
    counter.run(specs[:6])  # all stored: nothing is submitted
    assert (counter.submissions, counter.tasks) == (1, 4)
    counter.obtain(Request(specs[6]), wait=True)  # a trial or probe: a task still serving takes it
    assert (counter.submissions, counter.tasks) == (1, 4)
    counter.run(specs[7:])  # 5 more: one task's last run, then fresh tasks for 4
    assert (counter.submissions, counter.tasks) == (3, 6)
    idle = CountingExecutor(tmp_path / "idle", SlurmConfig(array_parallelism=4, task_idle_s=0))
    idle.run(specs[:2])
    idle.obtain(Request(specs[2]), wait=True)  # tasks that do not wait: a submission per call
    assert (idle.submissions, idle.tasks) == (2, 3)
    one_each = SlurmConfig(array_parallelism=4, runs_per_task=1)
    packed = CountingExecutor(tmp_path / "packed", one_each, slots=4)  # runs_per_device 4
    packed.run(specs[:6])
    assert (packed.submissions, packed.tasks) == (1, 2)  # 6 runs over two tasks' 8 slots
    packed.run(specs[6:])  # 6 more: 2 slots' runs left, then a fresh task's 4
    assert (packed.submissions, packed.tasks) == (2, 3)


@pytest.mark.usefixtures("unrendered_figures")
def test_the_design_counts_each_stage_within_its_cap(tmp_path: Path) -> None:
    experiment = simulated_experiment(tmp_path, search=SEARCH, max_lr=MAX_LR)
    design = simulate_design(experiment)
    for variant, cfg in experiment.variants.items():
        assert design.counts.counts[(variant, "main")] == 2
        assert design.counts.counts[(variant, "search")] == SEARCH["n_trials"]
        probes = design.counts.counts[(variant, "max_lr")]
        assert 2 <= probes <= study_runs(experiment, cfg, variant)["max_lr"][0]
    counts = design.counts.counts
    widest = max(2 * SEARCH["n_trials"], 4)  # the main A/B's 4 runs, or the 6 trials at once
    assert 4 <= design.tasks <= widest  # the tasks serve every stage: none for a probe
    assert design.submissions <= design.tasks < sum(counts.values())
    assert "**Divergence edge**" in "\n".join(design.summary)  # the Answer
    assert not (tmp_path / "results").exists()  # it ran in a folder of its own


@pytest.mark.usefixtures("unrendered_figures")
def test_validate_gives_the_expected_time_apart_from_the_most_and_slurm_tasks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slurm = {"launcher": "slurm", "slurm": {"cpus_per_task": 2, "array_parallelism": 2}}
    path = write_experiment(tmp_path / "e.yaml", runtime=slurm, max_lr=MAX_LR)
    assert main(["validate", str(path), "--time", "--simulate"]) == 0
    out = capsys.readouterr().out
    expected = next(line for line in out.splitlines() if line.startswith("expected wall time"))
    most = next(line for line in out.splitlines() if line.startswith("at most"))
    assert float(expected.split()[3]) <= float(most.split()[2])
    line = next(line for line in out.splitlines() if line.startswith("through Slurm"))
    assert "(runs_per_task 16, array_parallelism 2)" in line and "core-hours" in line
