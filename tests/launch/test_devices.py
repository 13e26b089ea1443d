"""Several runs on one GPU: each pool worker sees its own GPU in turn, and a runs_per_device
whose runs would not fit is refused as bad input before anything trains, locally and by a
Slurm task. Tested without a GPU: the device names are given, and the memory measurement is
given as stored (a Slurm task's slots on the test cluster: test_slurm.py)."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest
from conftest import tiny_config, write_experiment

from ablate.cli import main
from ablate.core.cluster import SlurmConfig
from ablate.core.errors import ConfigError
from ablate.core.folders import ExperimentFolder
from ablate.core.load import load_experiment
from ablate.core.plan import RunSpec
from ablate.launch import preflight, resources, slurm_executor, slurm_task
from ablate.launch.devices import VISIBLE, Measured, fit_error, shape_key, take_device
from ablate.launch.execute import Request
from ablate.launch.resources import Resources
from ablate.launch.slurm_queue import Queued, RunQueue
from ablate.launch.workers import run_parallel


def test_each_worker_takes_the_next_gpu_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VISIBLE, raising=False)
    slots = mp.get_context("spawn").Value("i", 0)
    taken = []
    for _ in range(5):
        taken.append(take_device(("2", "5"), slots))
        assert os.environ[VISIBLE] == taken[-1]  # what torch will see in this worker
    assert taken == ["2", "5", "2", "5", "2"]


def _visible(meeting: str, workers: int) -> str:
    """The GPU this worker sees, once ``workers`` workers hold a job each (a barrier of files:
    no worker takes a second job)."""
    folder = Path(meeting)
    (folder / str(os.getpid())).touch()
    deadline = time.monotonic() + 60
    while len(list(folder.iterdir())) < workers and time.monotonic() < deadline:
        time.sleep(0.02)
    return os.environ[VISIBLE]


def test_a_pool_on_two_gpus_puts_two_workers_on_each(tmp_path: Path) -> None:
    res = Resources(workers=4, threads=1, gpus=("0", "1"))
    seen = run_parallel(_visible, [(str(tmp_path), 4)] * 4, res, imports=())
    assert len(list(tmp_path.iterdir())) == 4  # four workers, one job each
    assert sorted(seen) == ["0", "0", "1", "1"]
    assert VISIBLE not in os.environ or os.environ[VISIBLE] not in ("0", "1")  # this process


def test_runs_that_do_not_fit_are_refused_with_how_many_would() -> None:
    measured = Measured(run_mb=3 * 1024, free_mb=10 * 1024)
    assert fit_error(3, measured, "0") is None  # 9 GiB of 10
    error = fit_error(4, measured, "1")
    assert error == (
        "runtime.runs_per_device: 4 runs of about 3.00 GiB each (a measured step's peak plus "
        "0.50 GiB of CUDA context) need 12.0 GiB on GPU 1, which has 10.0 GiB free; "
        "at most 3 fit"
    )


def test_a_run_shape_is_what_decides_its_memory(tmp_path: Path) -> None:
    exp = load_experiment(write_experiment(tmp_path / "e.yaml"))
    cfg = exp.variants["layernorm"]
    assert shape_key(cfg) == shape_key(
        cfg.model_copy(update={"train": cfg.train.model_copy(update={"lr": 1.0})})
    )
    bigger = cfg.train.model_copy(update={"batch_size": 2 * cfg.train.batch_size})
    assert shape_key(cfg) != shape_key(cfg.model_copy(update={"train": bigger}))
    assert shape_key(cfg) != shape_key(exp.variants["rmsnorm"])


@pytest.mark.parametrize(
    ("runtime", "fragment"),
    [
        ({"runs_per_device": 2}, "on CPU, runs at once are runtime.workers"),
        (
            {"runs_per_device": 2, "accelerator": "auto", "devices": 2},
            "a run of 2 processes (runtime.devices x runtime.num_nodes) takes whole GPUs",
        ),
    ],
)
def test_runs_per_device_packs_only_one_gpu_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture, runtime: dict, fragment: str
) -> None:
    path = write_experiment(tmp_path / "e.yaml", runtime=runtime)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and "runtime.runs_per_device: 2" in err and len(err.splitlines()) == 1


def test_a_pool_whose_runs_would_not_fit_its_gpu_is_refused_before_anything_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    path = write_experiment(
        tmp_path / "e.yaml", runtime={"accelerator": "auto", "runs_per_device": 4}
    )
    exp = load_experiment(path)
    monkeypatch.setattr(resources, "gpu_ids", lambda accelerator: ("0",))  # one GPU, said to be
    for cfg in exp.variants.values():  # measured: 3 GiB a run, 10 GiB free
        monkeypatch.setitem(preflight._MEASURED, shape_key(cfg), Measured(3 * 1024, 10 * 1024))
    results = tmp_path / "results"
    reports = tmp_path / "reports"
    assert (
        main(["run", str(path), "--results-dir", str(results), "--report-dir", str(reports)]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("need 12.0 GiB on GPU 0, which has 10.0 GiB free; at most 3 fit")
    assert not list(results.glob("tiny/*/summary.json"))  # nothing trained, nothing stored


def test_a_slurm_task_whose_slots_would_not_fit_refuses_and_its_controller_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task checks the runs queued when it starts on its first GPU (as a local pool does)
    and writes its refusal to the queue; the controller reads it at its next look, cancels its
    tasks and raises the line as bad input. Without a GPU: the device is named and its
    measurement given as stored."""
    cfg = tiny_config(**{"runtime.accelerator": "auto", "runtime.runs_per_device": 4})
    folder = ExperimentFolder.of(tmp_path / "results", "tiny")
    queue = RunQueue(folder.slurm_queue)
    queue.put(Queued(Request(RunSpec("tiny", "layernorm", 0, cfg))))
    monkeypatch.setattr(slurm_task, "gpu_ids", lambda accelerator: ("3",))  # torch sees one
    monkeypatch.setitem(preflight._MEASURED, shape_key(cfg), Measured(3 * 1024, 10 * 1024))
    line = slurm_task.packed_fit_error(queue)
    assert line is not None and line.endswith("on GPU 3, which has 10.0 GiB free; at most 3 fit")
    fits = cfg.model_copy(update={"runtime": cfg.runtime.model_copy(update={"runs_per_device": 3})})
    queue.put(Queued(Request(RunSpec("tiny", "layernorm", 0, fits))))  # the same run id
    assert slurm_task.packed_fit_error(queue) is None
    queue.refuse(line)
    executor = slurm_executor.SlurmExecutor(tmp_path / "results", None, SlurmConfig(), per_device=4)
    with pytest.raises(ConfigError, match="at most 3 fit"):
        executor._staff(folder, queue, print)
    assert queue.workers() == []
    slurm_executor.open_queue(folder)  # the next controller: its tasks check again
    assert queue.refusal() is None


def test_a_task_is_one_slot_unless_runs_per_device_packs_its_gpus() -> None:
    assert SlurmConfig(gpus_per_task=4).task_slots(1) == 1  # a run (or DDP) per task
    assert SlurmConfig(gpus_per_task=4).task_slots(2) == 8
    assert SlurmConfig().task_slots(3) == 3  # GPUs from a gres: at least one
