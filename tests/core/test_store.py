"""Completeness, loading runs into pandas, pending states, claims and the stored studies."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from ablate.core import folders, store
from ablate.core.folders import ExperimentFolder, RunFolder
from ablate.core.manifest import Manifest
from ablate.core.studies import BestTrial, SearchResult, StoredStudies


def _fake_run(
    exp_dir: Path, run_id: str, status: str | None, variant: str = "a", seed: int = 0
) -> Path:
    run = folders.RunFolder(exp_dir / run_id)
    folders.write_json_atomic(run.config, {"variant": variant, "seed": seed})
    if status is not None:
        folders.write_json_atomic(
            run.summary,
            {
                "run_id": run_id,
                "variant": variant,
                "seed": seed,
                "status": status,
                "final_val_loss": 2.0,
            },
        )
        folders.write_frame_atomic(
            run.metrics, pd.DataFrame({"step": [1, 2], "train_loss": [3.0, 2.5]})
        )
    return run.path


def test_only_finished_and_diverged_runs_count(tmp_path: Path) -> None:
    exp = tmp_path / "exp"
    done = _fake_run(exp, "r1", "finished")
    diverged = _fake_run(exp, "r2", "diverged", seed=1)
    interrupted = _fake_run(exp, "r3", "interrupted", seed=2)
    crashed = _fake_run(exp, "r4", None, seed=3)  # killed before its summary
    assert RunFolder(done).is_done() and RunFolder(diverged).is_done()
    assert not RunFolder(interrupted).is_done() and not RunFolder(crashed).is_done()
    assert list(store.load_summaries(ExperimentFolder(exp))["run_id"]) == ["r1", "r2"]
    everything = store.load_summaries(ExperimentFolder(exp), include_incomplete=True)
    assert list(everything["status"]) == ["finished", "diverged", "interrupted", "incomplete"]
    metrics = store.load_metrics(ExperimentFolder(exp))
    assert list(metrics["run_id"]) == ["r1", "r1", "r2", "r2"] and "variant" in metrics


def test_empty_experiment_gives_an_empty_frame_with_the_contract_columns(tmp_path: Path) -> None:
    frame = store.load_summaries(ExperimentFolder(tmp_path / "nothing"))
    assert frame.empty and list(frame.columns) == list(store.SUMMARY_KEYS)
    assert store.read_manifest(ExperimentFolder(tmp_path / "nothing")).variants == []


def test_load_results_gives_runs_metrics_and_probes(tmp_path: Path) -> None:
    import ablate

    exp = tmp_path / "exp"
    _fake_run(exp, "r1", "finished")
    _fake_run(exp, "r2", None, seed=1)
    probes = pd.DataFrame(
        {"step": [1], "quantity": ["resid_rms"], "site": ["blocks.0"], "layer": [0], "value": [1.5]}
    )
    folders.write_frame_atomic(folders.RunFolder(exp / "r1").probes, probes)
    results = ablate.load_results(exp)
    assert list(results.runs["run_id"]) == ["r1"]
    assert list(results.metrics["run_id"]) == ["r1", "r1"]
    assert results.probes[["run_id", "variant", "value"]].values.tolist() == [["r1", "a", 1.5]]
    everything = ablate.load_results(exp, include_incomplete=True)
    assert list(everything.runs["status"]) == ["finished", "incomplete"]


def test_pending_state_of_a_planned_run(tmp_path: Path) -> None:
    exp = ExperimentFolder(tmp_path / "exp")
    assert store.pending_state(exp.run("never")) == "not started"
    failed = folders.RunFolder(_fake_run(exp.path, "r1", "failed"))
    assert store.pending_state(failed) == "failed"
    running = folders.RunFolder(_fake_run(exp.path, "r2", None))
    folders.write_json_atomic(running.status, {"status": "running", "pid": os.getpid()})
    assert store.pending_state(running) == "running"
    exited = subprocess.Popen(["true"])
    exited.wait()  # reaped: no process has this pid now
    folders.write_json_atomic(running.status, {"status": "running", "pid": exited.pid})
    assert store.pending_state(running) == "stopped (its process is gone)"
    other = {"status": "running", "pid": 1, "hostname": "elsewhere"}
    folders.write_json_atomic(running.status, other)
    assert store.pending_state(running) == "running on elsewhere"


def _claim_by(exp_dir: Path, run_id: str, pid: int, hostname: str) -> None:
    path = ExperimentFolder(exp_dir).claim(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": pid, "hostname": hostname}))


def test_a_claim_is_never_seen_without_its_owner_and_an_ownerless_one_is_stale(
    tmp_path: Path,
) -> None:
    exp = ExperimentFolder(tmp_path)
    # an older ablate created the claim empty and then wrote it: a SIGKILL between the two
    # left an empty claim that every later process honoured ("pid None on an unknown host")
    empty = exp.claim("killed")
    empty.parent.mkdir(parents=True)
    empty.write_text("")
    store.claim_run(exp, "killed")
    me = {"pid": os.getpid(), "hostname": platform.node()}
    assert json.loads(empty.read_text()) == me
    store.claim_run(exp, "fresh")  # written whole, then linked: no half-written claim
    assert json.loads(exp.claim("fresh").read_text()) == me
    assert not list(tmp_path.glob(".claim-*.tmp"))  # this process's own copy is gone


def test_claims_of_live_and_remote_holders_are_honoured_dead_ones_taken_over(
    tmp_path: Path,
) -> None:
    exp = ExperimentFolder(tmp_path)
    me = {"pid": os.getpid(), "hostname": platform.node()}
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        _claim_by(tmp_path, "live", sleeper.pid, me["hostname"])
        with pytest.raises(store.RunClaimed, match=f"pid {sleeper.pid} on {me['hostname']}"):
            store.claim_run(exp, "live")
    finally:
        sleeper.kill()
        sleeper.wait()
    store.claim_run(exp, "live")  # its holder is dead now
    assert json.loads(exp.claim("live").read_text()) == me
    _claim_by(tmp_path, "remote", 1, "elsewhere")
    with pytest.raises(store.RunClaimed, match="on elsewhere"):
        store.claim_run(exp, "remote")
    store.claim_run(exp, "remote", take_over=True)  # Optuna found its worker dead
    assert json.loads(exp.claim("remote").read_text()) == me
    _claim_by(tmp_path, "other", 1, "elsewhere")
    store.release_run(exp, "other")  # not ours: stays
    store.release_run(exp, "live")
    assert sorted(p.name for p in exp.claim("x").parent.iterdir()) == ["other", "remote"]


def test_studies_round_trip_and_an_unchanged_write_keeps_the_time_stamp(tmp_path: Path) -> None:
    exp = ExperimentFolder(tmp_path)
    assert store.read_studies(exp) == StoredStudies()  # none ran
    result = SearchResult("e.a.search", [], 1, 1, 0, 1, BestTrial(0.01, 5, 2.5, "r1"), None)
    studies = StoredStudies(
        search={"a": result}, experiment="e", storage="s", criterion="stable", search_seed=0
    )
    store.write_studies(exp, studies)
    path = exp.stability
    os.utime(path, (1, 1))
    store.write_studies(exp, studies)
    read = store.read_studies(exp)
    assert path.stat().st_mtime == 1 and read.search == {"a": result} and read.criterion == "stable"
    store.write_studies(exp, replace(studies, criterion="changed"))
    assert path.stat().st_mtime > 1 and store.read_studies(exp).criterion == "changed"


def test_an_experiment_folder_is_one_with_a_plan_or_a_run(tmp_path: Path) -> None:
    exp = ExperimentFolder(tmp_path)
    assert not store.is_experiment(exp)
    _fake_run(tmp_path, "r1", None)
    assert store.is_experiment(exp)
    (tmp_path / "r1" / "config.json").unlink()
    assert not store.is_experiment(exp)
    store.write_manifest(exp, Manifest("x", [], [0]))
    assert store.is_experiment(exp) and store.read_manifest(exp).name == "x"


def _claim_after(root: str, barrier: Any, take_over: bool, out: Any, done: Any) -> None:
    barrier.wait()  # every claimer at once
    try:
        store.claim_run(ExperimentFolder(Path(root)), "run", take_over)
        out.put(os.getpid())
    except store.RunClaimed:
        out.put(None)
    done.wait(30)  # alive until every racer has tried: an exited owner holds nothing


def test_processes_racing_for_a_dead_holders_claim_leave_it_to_exactly_one(
    tmp_path: Path,
) -> None:
    # each found the dead holder and removed "its" claim: the second removed the first's
    # fresh one, and two processes trained the same run (about half of these rounds before)
    ctx = mp.get_context("fork")
    for round_ in range(10):
        root = tmp_path / str(round_)
        dead = subprocess.Popen(["true"])
        dead.wait()
        _claim_by(root, "run", dead.pid, platform.node())
        barrier, out, done = ctx.Barrier(6), ctx.Queue(), ctx.Event()
        racers = [
            ctx.Process(target=_claim_after, args=(str(root), barrier, i == 0, out, done))
            for i in range(6)  # the first as a retried trial's (take_over)
        ]
        for racer in racers:
            racer.start()
        owners = [pid for pid in (out.get(timeout=30) for _ in racers) if pid is not None]
        done.set()
        for racer in racers:
            racer.join()
        assert len(owners) == 1, f"round {round_}: {len(owners)} processes hold the claim"
        holder = json.loads(ExperimentFolder(root).claim("run").read_text())
        assert holder["pid"] == owners[0]


def test_a_killed_process_not_yet_reaped_holds_nothing(tmp_path: Path) -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        _claim_by(tmp_path, "run", child.pid, platform.node())
        child.kill()
        deadline = time.monotonic() + 5
        while store.process_alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)  # a zombie until waited for: dead for the claim
        store.claim_run(ExperimentFolder(tmp_path), "run")
        assert child.poll() == -signal.SIGKILL  # reaped only now
    finally:
        child.kill()
        child.wait()


def test_a_claimed_run_starts_empty_with_its_config_and_is_released_however_it_ends(
    tmp_path: Path,
) -> None:
    from conftest import tiny_config

    from ablate.core.plan import RunSpec

    spec = RunSpec("e", "a", 0, tiny_config())
    run = folders.ExperimentFolder.of(tmp_path, "e").run(spec.run_id)
    run.path.mkdir(parents=True)
    run.metrics.write_text("left by a killed run\n")
    with pytest.raises(RuntimeError, match="boom"), store.claimed_run(tmp_path, spec) as held:
        assert held == run and not run.metrics.exists()  # emptied
        assert json.loads(run.config.read_text()) == spec.to_json()
        claim = folders.ExperimentFolder.of(tmp_path, "e").claim(spec.run_id)
        assert json.loads(claim.read_text())["pid"] == os.getpid()
        raise RuntimeError("boom")
    assert not claim.exists()
    with store.claimed_run(tmp_path, spec):  # released: this process claims it again
        folders.write_json_atomic(run.summary, {"status": "finished"})
    with pytest.raises(store.RunClaimed, match="finished meanwhile"):
        with store.claimed_run(tmp_path, spec):
            pass
