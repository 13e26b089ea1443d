"""The Slurm launcher against a real single-node Slurm (``slurm_cluster``): the same results as
a local run, a cancelled job retried, a restarted controller that follows its queued jobs, and
bad input that fails once with its line. Skipped where Slurm is missing, unless
``ABLATE_REQUIRE_SLURM`` is set (CI)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import TINY, ablate_process, study_trials, write_experiment

from ablate.cli import main
from ablate.core.folders import ExperimentFolder
from ablate.core.load import load_experiment
from ablate.core.plan import plan_runs
from ablate.core.store import load_summaries
from ablate.launch.slurm_jobs import reported_step
from ablate.launch.status import (
    Waiting,
    run_states,
    status_lines,
    status_table,
    submitted,
    waiting_line,
    waiting_stages,
)
from ablate.launch.workers import torch_threads
from ablate.training.run import execute_run

pytestmark = [pytest.mark.usefixtures("slurm_cluster"), pytest.mark.slow]
POLL = {"poll_s": 0.2, "result_wait_s": 1.0}  # the test cluster's jobs end in about a second


def simulated_file(
    tmp_path: Path, slurm: dict[str, Any] | None = None, pace_s: float = 0.0, **extra: Any
) -> Path:
    """The tiny experiment on the simulator (two variants x two seeds), its runs as Slurm
    jobs of one CPU polled every 0.2 s, each lasting ``pace_s``; ``slurm`` sets further keys
    of runtime.slurm."""
    runtime = {
        "backend": "simulate",
        "launcher": "slurm",
        "simulate": {"pace_s": pace_s},
        "slurm": {**POLL, "cpus_per_task": 1, **(slurm or {})},
    }
    return write_experiment(tmp_path / "e.yaml", runtime=runtime, **extra)


def run_ablate(path: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """``ablate run`` of ``path`` in its folder, waited for."""
    process = ablate_process("run", str(path), *args, cwd=path.parent)
    out, _ = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess(process.args, process.returncode, out, "")


def jobs_of(path: Path, name: str = "tiny") -> dict[str, dict[str, Any]]:
    """The launcher's record of each run's last job, by run id."""
    runs = ExperimentFolder.of(path.parent / "results", name).slurm_jobs
    return {p.stem: json.loads(p.read_text()) for p in runs.glob("*.json")}


def submitted_arrays(path: Path, name: str = "tiny") -> set[str]:
    """The job arrays submitted for the experiment: submitit keeps a folder per task."""
    logs = ExperimentFolder.of(path.parent / "results", name).slurm_logs
    return {task.name.split("_")[0] for task in logs.iterdir() if task.is_dir()}


def waiting_now(folder: ExperimentFolder) -> list[Waiting]:
    """What ``ablate status`` says a controller waits on now."""
    jobs, label = submitted(folder)
    states = run_states(folder, jobs)
    return waiting_stages(status_table(states), states, label)


def final_losses(results: Path, name: str = "tiny") -> dict[str, float]:
    """Every stored run's final val loss, by run id."""
    runs = load_summaries(ExperimentFolder.of(results, name))
    return dict(zip(runs["run_id"], runs["final_val_loss"], strict=True))


def test_a_simulated_experiment_through_slurm_stores_what_the_local_run_stores(
    tmp_path: Path,
) -> None:
    search = {"n_trials": 2, "lr_min": 1e-3, "lr_max": 0.1, "warmup_max": 10, "parallel_trials": 2}
    # a curve whose far points stop at step 10: held, stopped or reopened between jobs
    curve = {"lr_min": 1e-3, "lr_max": 0.1, "per_octave": 1, "extend": 0, "stop_step": 10}
    journal = f"journal:{tmp_path / 'studies.log'}"  # the storage that works on NFS too
    path = simulated_file(tmp_path, search=search, curve=curve, storage=journal)
    done = run_ablate(path)
    assert done.returncode == 0, done.stdout
    local_dir = tmp_path / "local"
    local_dir.mkdir()
    local = write_experiment(
        local_dir / "e.yaml", runtime={"backend": "simulate"}, search=search, curve=curve
    )
    results, report = str(local_dir / "results"), str(local_dir / "report")
    assert main(["run", str(local), "--results-dir", results, "--report-dir", report]) == 0
    slurm_losses = final_losses(tmp_path / "results")
    assert slurm_losses == final_losses(local_dir / "results")  # same run ids, same bits
    runs = load_summaries(ExperimentFolder.of(tmp_path / "results", "tiny"))
    assert set(runs.loc[runs["group"] == "curve", "status"]) == {"finished", "pruned"}
    jobs = jobs_of(path)
    assert set(jobs) == set(slurm_losses)  # every run was taken by a task, once
    assert all(job["attempt"] == 1 for job in jobs.values())
    first = re.search(r"submitted 4 task\(s\) to Slurm as job (\d+) for 4 queued", done.stdout)
    assert first is not None, done.stdout  # main A/B: a task a run
    searched = runs.loc[runs["group"] == "search", "run_id"]
    arrays = {jobs[run_id]["job_id"].split("_")[0] for run_id in searched}
    assert arrays == {first[1]}, done.stdout  # and its tasks served the searches too
    for trial in study_trials(journal, "tiny.layernorm.search"):  # reported from each job
        assert trial.state.name == "COMPLETE" and trial.intermediate_values


def wait_for(predicate: Any, timeout: float = 60, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something true; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def running_tasks() -> list[str]:
    """The array tasks squeue shows as running."""
    shown = subprocess.run(
        ["squeue", "--noheader", "--array", "--states=RUNNING", "--format=%i"],
        capture_output=True,
        text=True,
    )
    return shown.stdout.split()


def test_a_task_with_three_slots_trains_three_at_once_and_loses_only_those_it_trains(
    tmp_path: Path,
) -> None:
    """runs_per_device 3 on a task bound to one GPU (named by a setup line: the test cluster
    has none, and simulated runs use none) trains three of the eight runs at once, each slot
    a process seeing that GPU, each slot taking its next run once its first is stored
    (array_parallelism 1: one task). Cancelled while its slots train their second runs, only
    those three are queued again; the three it stored are kept as they were, not trained
    again, and a fresh task trains them with the two it never took."""
    runtime = {
        "backend": "simulate",
        "launcher": "slurm",
        "accelerator": "auto",
        "runs_per_device": 3,
        "simulate": {"pace_s": 3.0},
        "slurm": {**POLL, "array_parallelism": 1, "setup": ["export CUDA_VISIBLE_DEVICES=7"]},
    }
    path = write_experiment(tmp_path / "e.yaml", seeds=[0, 1, 2, 3], runtime=runtime)
    controller = ablate_process("run", str(path), cwd=tmp_path)
    folder = ExperimentFolder.of(tmp_path / "results", "tiny")

    def stored_runs() -> dict[str, bytes]:
        return {run.run_id: run.summary.read_bytes() for run in folder.runs() if run.read_record()}

    wait_for(lambda: len(jobs_of(path)) == 3, timeout=90, what="three runs taken")
    array = next(iter(jobs_of(path).values()))["job_id"].split("_")[0]
    waiting = waiting_now(folder)  # three slots of one task train; five runs wait
    assert waiting == [Waiting("main", 3, 5, "Slurm job", array, 1)], status_lines(folder)
    assert not stored_runs()
    wait_for(
        lambda: len(stored_runs()) == 3 and len(jobs_of(path)) == 6,
        timeout=90,
        what="three runs stored and three more taken",
    )
    taken, stored = jobs_of(path), stored_runs()
    first = {job["job_id"] for job in taken.values()}
    assert len(first) == 1  # one task ...
    assert sorted(taken[run_id]["slot"] for run_id in stored) == [0, 1, 2]  # ... three slots
    assert {job["gpu"] for job in taken.values()} == {"7"}
    subprocess.run(["scancel", wait_for(running_tasks, what="the task")[0]], check=True)
    out, _ = controller.communicate(timeout=120)
    assert controller.returncode == 0, out
    jobs = jobs_of(path)
    assert len(submitted_arrays(path)) == 2, out  # the first task, then one fresh task
    assert sorted(job["attempt"] for job in jobs.values()) == [1] * 5 + [2] * 3  # 3 queued again
    assert all(jobs[run_id] == taken[run_id] for run_id in stored)  # kept, not trained again
    never = set(jobs) - set(taken)  # queued when the task was cut: the fresh task took them
    assert len(never) == 2 and all(jobs[run_id]["job_id"] not in first for run_id in never)
    runs = stored_runs()
    assert len(runs) == 8 and all(runs[run_id] == summary for run_id, summary in stored.items())


def test_a_restarted_controller_follows_its_queued_jobs_instead_of_submitting_them_again(
    tmp_path: Path,
) -> None:
    path = simulated_file(tmp_path, pace_s=5.0)
    first = ablate_process("run", str(path), cwd=tmp_path)
    wait_for(lambda: len(jobs_of(path)) == 2, timeout=90, what="two runs taken by tasks")
    first.send_signal(signal.SIGINT)
    out, _ = first.communicate(timeout=60)
    assert first.returncode == 130, out
    array = next(iter(jobs_of(path).values()))["job_id"].split("_")[0]
    folder = ExperimentFolder.of(tmp_path / "results", "tiny")
    assert waiting_now(folder) == [Waiting("main", 2, 2, "Slurm job", array, 2)]
    before = waiting_line(waiting_now(folder)[0])
    status = ablate_process("status", "results/tiny", cwd=tmp_path).communicate(timeout=60)[0]
    # the tasks go on meanwhile: on a busy machine the first two runs may end while it reads
    assert status.splitlines()[-1] in {before, waiting_line(waiting_now(folder)[0])}, status
    again = run_ablate(path)
    assert again.returncode == 0, again.stdout
    assert submitted_arrays(path) == {array}  # its tasks went on: nothing went to Slurm twice
    jobs = jobs_of(path)
    assert {job["job_id"].split("_")[0] for job in jobs.values()} == {array}
    assert all(job["attempt"] == 1 for job in jobs.values())
    assert len(load_summaries(ExperimentFolder(tmp_path / "results" / "tiny"))) == 4


def test_a_partition_sbatch_refuses_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = simulated_file(tmp_path, slurm={"partition": "nope"})
    refused = run_ablate(path)
    assert refused.returncode == 2
    lines = refused.stdout.strip().splitlines()
    assert lines[-1].startswith("ablate run: error: runtime.slurm: sbatch refused the job: ")
    assert "nope" in lines[-1] or "partition" in lines[-1], refused.stdout


def test_a_job_whose_setup_fails_fails_once_with_its_line(tmp_path: Path) -> None:
    path = simulated_file(
        tmp_path, slurm={"setup": ["echo 'module: no such module' >&2", "exit 3"]}
    )
    failed = run_ablate(path)
    assert failed.returncode == 1, failed.stdout
    lines = [line for line in failed.stdout.splitlines() if "module: no such module" in line]
    assert len(lines) == 4, failed.stdout  # one line per run, none resubmitted
    assert all(job["attempt"] == 1 for job in jobs_of(path).values())


@pytest.mark.trains
def test_a_task_that_raises_on_its_node_fails_once_with_its_exception_line(
    tmp_path: Path,
) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the norm is the question and the seed is the answer. " * 400)
    moved = "mv -f corpus.txt corpus.gone 2>/dev/null || true"  # gone from the node's view
    path = write_experiment(
        tmp_path / "e.yaml",
        seeds=[0],
        variants={"layernorm": {"model.norm.kind": "layernorm"}},
        data={"source": "text_file", "path": "corpus.txt"},
        runtime={"launcher": "slurm", "slurm": {**POLL, "setup": [moved]}},
    )
    failed = run_ablate(path, timeout=300)
    assert failed.returncode == 1, failed.stdout
    lines = [line for line in failed.stdout.splitlines() if " raised: " in line]
    # the wording is the point: the node's exception line, naming the file it missed
    assert len(lines) == 1 and "corpus.txt" in lines[0], failed.stdout
    assert all(job["attempt"] == 1 for job in jobs_of(path).values())


@pytest.mark.trains
def test_a_packed_task_cancelled_mid_run_resumes_its_runs_from_their_checkpoints_bit_for_bit(
    tmp_path: Path,
) -> None:
    """Two trained runs side by side in one task (runs_per_device 2 on a GPU a setup line
    names; on the test cluster they train on its CPU), a thread each (the task's
    cpus_per_task). scancel (SIGTERM) cuts the task once both have a checkpoint; the task
    submitted again resumes each there, and each stores what the run trained whole and alone
    here stores."""
    steps, every = 1000, 200  # about 2.5 s of training, a checkpoint every 0.5 s
    slurm = {**POLL, "cpus_per_task": 1, "setup": ["export CUDA_VISIBLE_DEVICES=0"]}
    packed = {"threads": 1, "accelerator": "auto", "runs_per_device": 2}
    runtime = {**packed, "launcher": "slurm", "checkpoint_steps": every, "slurm": slurm}
    train = {**TINY["train"], "tokens": 4 * 16 * steps, "eval_interval": 500}
    path = write_experiment(tmp_path / "e.yaml", seeds=[0], runtime=runtime, train=train)
    controller = ablate_process("run", str(path), cwd=tmp_path)
    folder = ExperimentFolder.of(tmp_path / "results", "tiny")

    def both_checkpointed() -> list[Any]:
        runs = [run for run in folder.runs() if run.checkpoint.exists()]
        return runs if len(runs) == 2 else []

    runs = wait_for(both_checkpointed, timeout=120, what="a checkpoint of each run")
    subprocess.run(["scancel", wait_for(running_tasks, what="the running task")[0]], check=True)
    out, _ = controller.communicate(timeout=240)
    assert controller.returncode == 0, out
    jobs = jobs_of(path)
    assert sorted(job["attempt"] for job in jobs.values()) == [2, 2], out  # queued again, once
    assert sorted(job["slot"] for job in jobs.values()) == [0, 1]  # side by side in one task
    assert len({job["job_id"] for job in jobs.values()}) == 1
    with torch_threads(1):  # each alone, in this process, with what a slot's CPU gives it
        whole = {
            spec.run_id: execute_run(spec, tmp_path / "whole")
            for spec in plan_runs(load_experiment(path))
        }
    for run in runs:
        record = run.read_record()
        assert record is not None and record.status == "finished"
        resumed = record.extra["resumed_from_step"]
        assert resumed % every == 0 and every <= resumed < steps
        assert not run.checkpoint.exists()
        assert record.torch_threads == 1  # the task's cpus_per_task, not the node's
        alone = whole[record.run_id]
        assert (record.final_val_loss, record.final_train_loss) == (
            alone.final_val_loss,
            alone.final_train_loss,
        )
        expected = pd.read_csv(
            ExperimentFolder.of(tmp_path / "whole", "tiny").run(alone.run_id).metrics
        )
        stored = pd.read_csv(run.metrics)
        for column in ("step", "train_loss", "grad_norm", "val_loss"):
            assert stored[column].equals(expected[column]), column
        step, loss = reported_step(folder, record.run_id)  # the task reported it for display
        assert every <= step <= steps and loss > 0


def test_a_job_cancelled_mid_run_is_resubmitted_and_nothing_is_lost_or_twice(
    tmp_path: Path,
) -> None:
    """scancel of the task training a search trial's run (``ablate search`` through Slurm):
    the run is queued again and stored once, the trial waits for it, and the study's trials
    are those of the same search run locally and uncut."""
    search = {"n_trials": 2, "lr_min": 1e-3, "lr_max": 0.1, "warmup_max": 10, "pruner": "none"}
    one = {"layernorm": {"model.norm.kind": "layernorm"}}
    journal = f"journal:{tmp_path / 'studies.log'}"
    path = simulated_file(
        tmp_path, pace_s=2.0, seeds=[0], search=search, variants=one, storage=journal
    )
    controller = ablate_process("search", str(path), cwd=tmp_path)

    def second_trial_running() -> bool:
        try:
            trials = study_trials(journal, "tiny.layernorm.search")
        except KeyError:  # the study is not created yet
            return False
        return any(t.number == 1 and t.state.name == "RUNNING" for t in trials)

    wait_for(second_trial_running, timeout=120, what="the second search trial")
    time.sleep(0.5)  # into its run
    subprocess.run(["scancel", wait_for(running_tasks, what="its task")[0]], check=True)
    out, _ = controller.communicate(timeout=240)
    assert controller.returncode == 0, out
    # the wording is the point here: the controller says why a run is queued again
    assert "cancelled: queueing run" in out
    assert sorted(job["attempt"] for job in jobs_of(path).values()) == [1, 2]
    runs = load_summaries(ExperimentFolder(tmp_path / "results" / "tiny"))
    assert len(runs) == 2 and set(runs["status"]) == {"finished"}  # each run stored once
    uncut = tmp_path / "uncut"
    uncut.mkdir()
    local_journal = f"journal:{uncut / 'studies.log'}"
    local = write_experiment(
        uncut / "e.yaml",
        runtime={"backend": "simulate"},
        seeds=[0],
        search=search,
        variants=one,
        storage=local_journal,
    )
    assert main(["search", str(local), "--results-dir", str(uncut / "results")]) == 0
    name = "tiny.layernorm.search"
    trials = {
        url: [(t.number, t.state.name, t.params, t.value) for t in study_trials(url, name)]
        for url in (journal, local_journal)
    }
    assert trials[journal] == trials[local_journal] and len(trials[journal]) == 2
