"""One study shared by many processes on every storage: each trial runs once, a dead worker's trial
is retried once, a claimed run is waited for."""

from __future__ import annotations

import json
import platform
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import search_workers, storage_of_kind, study_trials, write_experiment

from ablate.core.errors import ConfigError
from ablate.core.load import load_experiment
from ablate.launch.execute import obtain
from ablate.launch.storage import check_storage_opens, storage_label


def _trained_trials(outputs: list[str]) -> list[int]:
    """Trial numbers as each worker printed them when it finished one (one line per trial)."""
    return [
        int(match)
        for output in outputs
        for match in re.findall(r"^search rmsnorm #(\d+):", output, flags=re.MULTILINE)
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "workers"), [("sqlite", 4), ("journal", 4), ("postgres", 4)])
def test_workers_share_one_study_each_trial_run_once(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str, workers: int
) -> None:
    requested = 8
    path = write_experiment(
        tmp_path / "e.yaml",
        variants={"rmsnorm": {"model.norm.kind": "rmsnorm"}},
        search={"n_trials": requested, "pruner": "none", "warmup_max": 5},
        runtime={"backend": "simulate"},  # the storages' sharing, with trials of milliseconds
    )
    url = storage_of_kind(kind, tmp_path, request)
    started = time.perf_counter()
    procs = search_workers(path, url, workers)  # no study yet: the workers race to create it
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    wall = time.perf_counter() - started
    assert all(p.returncode == 0 for p in procs), outputs
    trials = study_trials(url, "tiny.rmsnorm.search")
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    trained = _trained_trials(outputs)
    run_ids = [t.user_attrs["run_id"] for t in complete]
    stored = list((tmp_path / "results" / "tiny").glob("*/summary.json"))
    duplicates = len(trained) - len(set(trained))
    lost = len(set(trained) ^ {t.number for t in complete})
    print(
        f"{kind} x {workers}: trials requested {requested}, run {len(complete)}, "
        f"duplicates {duplicates}, lost {lost}, wall {wall:.1f} s"
    )
    assert duplicates == 0 and lost == 0
    # every trial done; at most one extra per other worker when they start one together
    assert len(trials) == len(complete) and requested <= len(complete) <= requested + workers - 1
    assert len(set(run_ids)) == len(run_ids) == len(stored)
    assert {p.parent.name for p in stored} == set(run_ids)
    assert all(json.loads(p.read_text())["group"] == "search" for p in stored)
    assert len({(t.params["lr"], t.params["warmup_steps"]) for t in complete}) == len(complete)
    assert not list((tmp_path / "results" / "tiny" / ".claims").iterdir())


def _holders(results: Path) -> dict[str, int | None]:
    """Each claim in ``results`` with the pid of the process that holds it."""
    return {
        claim.name: json.loads(claim.read_text() or "{}").get("pid")
        for claim in results.glob(".claims/*")
    }


def _kill_first_trainer(results: Path, procs: list[subprocess.Popen]) -> str:
    """SIGKILL a worker half a second into a run it still holds; return that run's id.

    A run that diverges early ends in less than the half second, so the claim is read again
    before the kill, and the run is the claim the killed worker leaves behind."""
    pids = {p.pid: p for p in procs}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        seen = {name: pid for name, pid in _holders(results).items() if pid in pids}
        if seen:
            time.sleep(0.5)  # well inside the run (it lasts 2 s): its trial sent heartbeats
            held = {name: pid for name, pid in _holders(results).items() if seen.get(name) == pid}
            if held:
                pid = next(iter(held.values()))
                pids[pid].send_signal(signal.SIGKILL)
                pids[pid].wait()
                left = [n for n, holder in _holders(results).items() if holder == pid]
                assert len(left) == 1, left
                return left[0]
        time.sleep(0.05)
    raise AssertionError("no worker held a claim for half a second within 120 s")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_trial_of_a_killed_worker_is_retried_once(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    requested = 5
    path = write_experiment(
        tmp_path / "e.yaml",
        variants={"rmsnorm": {"model.norm.kind": "rmsnorm"}},
        search={"n_trials": requested, "pruner": "none", "warmup_max": 5},
        # a simulated run lasts 2 s, so the kill lands inside one; silent for 3 s: dead
        runtime={"heartbeat_s": 1, "backend": "simulate", "simulate": {"pace_s": 2.0}},
    )
    url = storage_of_kind(kind, tmp_path, request)
    procs = search_workers(path, url, 3)
    killed_run = _kill_first_trainer(tmp_path / "results" / "tiny", procs)
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [-signal.SIGKILL, 0, 0], "\n----\n".join(outputs)  # shown whole
    trials = study_trials(url, "tiny.rmsnorm.search")
    failed = [t for t in trials if t.state.name == "FAIL"]
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(failed) == 1 and failed[0].user_attrs["run_id"] == killed_run
    retries = [t for t in complete if t.system_attrs.get("failed_trial") == failed[0].number]
    assert len(retries) == 1 and retries[0].params == failed[0].params
    assert retries[0].user_attrs["run_id"] == killed_run
    trained = _trained_trials(outputs)
    assert sorted(trained) == sorted(t.number for t in complete)  # none twice, none lost
    assert requested <= len(complete) <= requested + 2 and len(trials) == len(complete) + 1
    run_ids = {t.user_attrs["run_id"] for t in complete}
    stored = {
        p.parent.name: json.loads(p.read_text())
        for p in (tmp_path / "results" / "tiny").glob("*/summary.json")
    }
    assert stored.keys() == run_ids and len(run_ids) == len(complete)
    assert all(s["status"] in {"finished", "diverged"} for s in stored.values())
    assert not list((tmp_path / "results" / "tiny" / ".claims").iterdir())


@pytest.mark.trains
def test_a_run_claimed_by_a_live_process_is_waited_for(tmp_path: Path) -> None:
    from conftest import tiny_config

    from ablate.core.folders import ExperimentFolder
    from ablate.core.plan import RunSpec
    from ablate.training import run  # noqa: F401  imported now: obtain then claims at once

    spec = RunSpec("tiny", "layernorm", 0, tiny_config(), group="max_lr")
    exp_dir = tmp_path / "tiny"
    claim = ExperimentFolder(exp_dir).claim(spec.run_id)
    claim.parent.mkdir(parents=True)
    holder = subprocess.Popen(["sleep", "30"])  # stands for another worker training the run
    claim.write_text(json.dumps({"pid": holder.pid, "hostname": platform.node()}))
    # that worker dies (and is reaped: a zombie still has a pid): its claim becomes stale
    timer = threading.Timer(1.5, lambda: (holder.kill(), holder.wait()))
    timer.start()
    said: list[str] = []
    started = time.monotonic()
    try:
        summary = obtain(spec, tmp_path, wait=True, say=said.append)
    finally:
        timer.cancel()
        holder.kill()
        holder.wait()
    assert time.monotonic() - started >= 1.5
    assert said == [
        f"waiting: run {spec.run_id} is being trained by pid {holder.pid} on {platform.node()}"
    ]
    assert summary.status == "finished" and summary.run_id == spec.run_id
    assert not claim.exists()


def test_a_storage_that_cannot_be_opened_is_bad_input_before_anything_trains(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from ablate.cli import main

    url = "postgresql://u:secret@127.0.0.1:1/nodb"  # nothing listens on port 1
    path = write_experiment(tmp_path / "tiny.yaml", storage=url, search={"n_trials": 2})
    results = tmp_path / "results"
    assert main(["run", str(path), "--results-dir", str(results)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and storage_label(url) in err[0]
    assert storage_label(url) == "postgresql://u:***@127.0.0.1:1/nodb"
    assert urlsplit(url).password not in err[0]  # the password is never printed
    with pytest.raises(ConfigError) as refused:
        check_storage_opens(load_experiment(path), results, None)
    assert (refused.value.key, refused.value.code) == ("storage", "storage_unopened")
    assert not results.exists()  # nothing trained, nothing written
    assert main(["search", str(path), "--results-dir", str(results)]) == 2
    assert not results.exists()
