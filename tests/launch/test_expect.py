"""The expected cost: a design run on the simulator, its runs and Slurm submissions counted."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import simulated_experiment, write_experiment

from ablate.cli import main
from ablate.core.cluster import SlurmConfig
from ablate.core.plan import plan_runs, study_runs
from ablate.launch.expect import CountingExecutor, simulate_design

SEARCH = {"n_trials": 3, "lr_min": 1e-3, "lr_max": 0.1, "warmup_max": 10}
MAX_LR = {"factor": 4.0, "lr_max": 10.0}


def test_a_stage_call_with_runs_to_train_is_one_array_packed_into_tasks(tmp_path: Path) -> None:
    experiment = simulated_experiment(tmp_path, seeds=[0, 1, 2])
    specs = plan_runs(experiment)  # 2 variants x 3 seeds
    counter = CountingExecutor(tmp_path / "results", SlurmConfig(array_parallelism=4))
    counter.run(specs)
    assert (counter.submissions, counter.tasks) == (1, 4)  # 6 runs over 4 slots
    counter.run(specs)  # all stored: nothing is submitted
    assert (counter.submissions, counter.tasks) == (1, 4)
    extra = plan_runs(experiment, seeds=[3])[0]
    counter.obtain(extra, wait=True)  # a trial or probe: a job of its own
    counter.obtain(extra, wait=True)  # stored now
    assert (counter.submissions, counter.tasks) == (2, 5)


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
    assert design.tasks == sum(counts.values())  # 64 slots: a task per run of every array
    obtained = sum(n for (_, stage), n in counts.items() if stage in ("search", "max_lr"))
    assert obtained + 2 <= design.submissions < design.tasks  # main's and tuned's arrays
    assert "Max stable LR" in "\n".join(design.summary)
    assert not (tmp_path / "results").exists()  # it ran in a folder of its own


@pytest.mark.usefixtures("unrendered_figures")
def test_validate_gives_the_expected_time_apart_from_the_most_and_slurm_tasks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slurm = {"launcher": "slurm", "slurm": {"cpus_per_task": 2, "array_parallelism": 2}}
    path = write_experiment(tmp_path / "e.yaml", runtime=slurm, max_lr=MAX_LR)
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    expected = next(line for line in out.splitlines() if line.startswith("expected wall time"))
    most = next(line for line in out.splitlines() if line.startswith("at most"))
    assert float(expected.split()[3]) <= float(most.split()[2])
    line = next(line for line in out.splitlines() if line.startswith("through Slurm"))
    assert "(runs_per_task 16, array_parallelism 2)" in line and "core-hours" in line
