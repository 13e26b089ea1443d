"""The same behaviour tests over every registered launcher (``runtime.launcher``), as Optuna runs
one suite over its storages: each launcher's executor stores every run once, returns what it
stored, reuses it on a second call and on ``obtain``, travels to a worker process, and tells
``ablate status`` of its jobs; a launcher that needs a service gets it from its fixture
(``slurm``: the single-node cluster, skipped where Slurm is missing unless CI requires it).
Runs are simulated (milliseconds each) under every launcher, and trained by the local backend
under the local one, so the trainer's executor meets the same contract (Slurm's trained runs
equal local ones bit for bit in tests/launch/test_slurm.py)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from conftest import write_experiment

from ablate.core.folders import ExperimentFolder
from ablate.core.launchers import launcher_names
from ablate.core.load import load_experiment
from ablate.core.plan import RunSpec, plan_runs
from ablate.launch.backends import make_executor
from ablate.launch.execute import Executor, Request
from ablate.launch.launchers import every_launcher, launcher, resources_for
from ablate.launch.status import run_states

SERVICES = {"slurm": "slurm_cluster"}  # a launcher's fixture, where it needs one
# the executors live in this process, which does not end between tests: their tasks would wait
# task_idle_s for more runs, holding the test cluster's cores from the next test's
POLL = {"poll_s": 0.2, "result_wait_s": 1.0, "cpus_per_task": 1, "task_idle_s": 0}


CASES = [(name, "simulate") for name in launcher_names()] + [("local", "train")]


@pytest.fixture(
    params=[
        pytest.param(case, id="-".join(case), marks=[pytest.mark.trains] * (case[1] == "train"))
        for case in CASES
    ]
)
def case(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(launcher, backend): each registered launcher simulating, and the local one training;
    the launcher's service started where it needs one."""
    name, backend = request.param
    if name in SERVICES:
        request.getfixturevalue(SERVICES[name])
    return str(name), str(backend)


def _specs(tmp_path: Path, case: tuple[str, str]) -> tuple[list[RunSpec], Path]:
    """The tiny experiment's 4 runs under this launcher and backend, and its results root."""
    name, backend = case
    runtime: dict[str, Any] = {"backend": backend, "launcher": name, "slurm": POLL}
    experiment = load_experiment(write_experiment(tmp_path / "e.yaml", runtime=runtime))
    return plan_runs(experiment), tmp_path / "results"


def _executor(specs: list[RunSpec], root: Path) -> Executor:
    return make_executor(specs[0].config.runtime, root, workers=1, threads=1)


def test_every_run_is_stored_once_and_what_is_stored_is_returned(
    tmp_path: Path, case: tuple[str, str]
) -> None:
    specs, root = _specs(tmp_path, case)
    summaries = _executor(specs, root).run(specs + specs[:1])  # a repeated spec is one run
    assert sorted(s.run_id for s in summaries) == sorted(s.run_id for s in specs)
    folder = ExperimentFolder.of(root, "tiny")
    for summary in summaries:
        assert summary == folder.run(summary.run_id).read_record()
        assert summary.status == "finished"


def test_a_second_call_and_obtain_reuse_the_stored_runs(
    tmp_path: Path, case: tuple[str, str]
) -> None:
    specs, root = _specs(tmp_path, case)
    executor = _executor(specs, root)
    first = {s.run_id: s for s in executor.run(specs)}
    folder = ExperimentFolder.of(root, "tiny")
    written = {run_id: folder.run(run_id).summary.stat().st_mtime_ns for run_id in first}
    again = {s.run_id: s for s in executor.run(specs)}
    assert again == first
    assert executor.obtain(Request(specs[0]), wait=True) == first[specs[0].run_id]
    assert {r: folder.run(r).summary.stat().st_mtime_ns for r in first} == written


def test_the_executor_travels_to_a_worker_without_its_terminal(
    tmp_path: Path, case: tuple[str, str]
) -> None:
    specs, root = _specs(tmp_path, case)
    executor = _executor(specs, root)
    copy = pickle.loads(pickle.dumps(executor))
    assert copy.root == executor.root and type(copy) is type(executor)
    assert getattr(copy, "console", None) is None


def test_status_hears_of_the_launcher_s_jobs_and_the_runs_are_done(
    tmp_path: Path, case: tuple[str, str]
) -> None:
    specs, root = _specs(tmp_path, case)
    _executor(specs, root).run(specs)
    folder = ExperimentFolder.of(root, "tiny")
    jobs = launcher(case[0]).jobs(folder)
    assert set(jobs) <= {s.run_id for s in specs}
    assert all(job.state in (None, "queued", "running", "ended") for job in jobs.values())
    assert {s.state for s in run_states(folder)} == {"done"}


def test_each_launcher_says_how_many_go_at_once(tmp_path: Path, case: tuple[str, str]) -> None:
    specs, _ = _specs(tmp_path, case)
    runtime = specs[0].config.runtime
    chosen = resources_for(runtime, 3)
    assert 1 <= chosen.workers <= 3 and chosen.threads >= 1
    assert launcher(case[0]).resources(runtime, 3) in (None, chosen)


def test_the_config_and_the_registry_know_the_same_launchers(tmp_path: Path) -> None:
    assert list(every_launcher()) == launcher_names() and launcher_names()[0] == "local"
    assert {"local", "slurm"} <= set(launcher_names())  # ablate's own, from pyproject.toml
    path = write_experiment(tmp_path / "e.yaml", runtime={"launcher": "kubernetes"})
    with pytest.raises(ValueError) as refused:
        load_experiment(path)
    allowed = ", ".join(repr(n) for n in launcher_names())
    assert str(refused.value) == (
        f"{path}: runtime.launcher: got 'kubernetes'; input should be one of {allowed}"
    )
