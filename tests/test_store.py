"""Atomic writes, completeness, and loading runs into pandas."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from ablate.core import store


def test_atomic_json_leaves_no_temporary_and_maps_nan_to_null(tmp_path: Path) -> None:
    path = tmp_path / "a" / "s.json"
    store.write_json_atomic(path, {"x": math.nan, "y": [1.0, math.inf], "z": "ok"})
    assert json.loads(path.read_text()) == {"x": None, "y": [1.0, None], "z": "ok"}
    assert [p.name for p in path.parent.iterdir()] == ["s.json"]
    assert path.stat().st_mode & 0o777 == 0o666 & ~store.current_umask()  # like open() would


def _fake_run(
    exp_dir: Path, run_id: str, status: str | None, variant: str = "a", seed: int = 0
) -> Path:
    run_dir = exp_dir / run_id
    store.write_json_atomic(run_dir / "config.json", {"variant": variant, "seed": seed})
    if status is not None:
        store.write_json_atomic(
            run_dir / "summary.json",
            {
                "run_id": run_id,
                "variant": variant,
                "seed": seed,
                "status": status,
                "final_val_loss": 2.0,
            },
        )
        store.write_frame_atomic(
            run_dir / "metrics.csv", pd.DataFrame({"step": [1, 2], "train_loss": [3.0, 2.5]})
        )
    return run_dir


def test_only_finished_and_diverged_runs_count(tmp_path: Path) -> None:
    exp = tmp_path / "exp"
    done = _fake_run(exp, "r1", "finished")
    diverged = _fake_run(exp, "r2", "diverged", seed=1)
    interrupted = _fake_run(exp, "r3", "interrupted", seed=2)
    crashed = _fake_run(exp, "r4", None, seed=3)  # killed before its summary
    assert store.is_done(done) and store.is_done(diverged)
    assert not store.is_done(interrupted) and not store.is_done(crashed)
    assert list(store.load_summaries(exp)["run_id"]) == ["r1", "r2"]
    everything = store.load_summaries(exp, include_incomplete=True)
    assert list(everything["status"]) == ["finished", "diverged", "interrupted", "incomplete"]
    metrics = store.load_metrics(exp)
    assert list(metrics["run_id"]) == ["r1", "r1", "r2", "r2"] and "variant" in metrics


def test_reset_run_dir_clears_a_half_written_run(tmp_path: Path) -> None:
    run_dir = _fake_run(tmp_path, "r", None)
    (run_dir / "metrics.csv").write_text("step\n1\n")
    store.reset_run_dir(run_dir)
    assert run_dir.is_dir() and list(run_dir.iterdir()) == []


def test_empty_experiment_gives_an_empty_frame_with_the_contract_columns(tmp_path: Path) -> None:
    frame = store.load_summaries(tmp_path / "nothing")
    assert frame.empty and {"variant", "seed", "status", "final_val_loss"} <= set(frame.columns)
    assert store.read_manifest(tmp_path / "nothing")["variants"] == []


def test_load_results_gives_runs_metrics_and_probes(tmp_path: Path) -> None:
    import ablate

    exp = tmp_path / "exp"
    _fake_run(exp, "r1", "finished")
    _fake_run(exp, "r2", None, seed=1)
    probes = pd.DataFrame(
        {"step": [1], "quantity": ["resid_rms"], "site": ["blocks.0"], "layer": [0], "value": [1.5]}
    )
    store.write_frame_atomic(exp / "r1" / "probes.csv", probes)
    results = ablate.load_results(exp)
    assert list(results.runs["run_id"]) == ["r1"]
    assert list(results.metrics["run_id"]) == ["r1", "r1"]
    assert results.probes[["run_id", "variant", "value"]].values.tolist() == [["r1", "a", 1.5]]
    everything = ablate.load_results(exp, include_incomplete=True)
    assert list(everything.runs["status"]) == ["finished", "incomplete"]


def test_pending_state_of_a_planned_run(tmp_path: Path) -> None:
    exp = tmp_path / "exp"
    assert store.pending_state(exp / "never") == "not started"
    failed = _fake_run(exp, "r1", "failed")
    assert store.pending_state(failed) == "failed"
    running = _fake_run(exp, "r2", None)
    store.write_json_atomic(running / "status.json", {"status": "running", "pid": os.getpid()})
    assert store.pending_state(running) == "running"
    exited = subprocess.Popen(["true"])
    exited.wait()  # reaped: no process has this pid now
    store.write_json_atomic(running / "status.json", {"status": "running", "pid": exited.pid})
    assert store.pending_state(running) == "stopped (its process is gone)"
    other = {"status": "running", "pid": 1, "hostname": "elsewhere"}
    store.write_json_atomic(running / "status.json", other)
    assert store.pending_state(running) == "running on elsewhere"


def _claim_by(exp_dir: Path, run_id: str, pid: int, hostname: str) -> None:
    path = store.claim_path(exp_dir, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": pid, "hostname": hostname}))


def test_claims_of_live_and_remote_holders_are_honoured_dead_ones_taken_over(
    tmp_path: Path,
) -> None:
    me = {"pid": os.getpid(), "hostname": platform.node()}
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        _claim_by(tmp_path, "live", sleeper.pid, me["hostname"])
        with pytest.raises(store.RunClaimed, match=f"pid {sleeper.pid} on {me['hostname']}"):
            store.claim_run(tmp_path, "live")
    finally:
        sleeper.kill()
        sleeper.wait()
    store.claim_run(tmp_path, "live")  # its holder is dead now
    assert json.loads(store.claim_path(tmp_path, "live").read_text()) == me
    _claim_by(tmp_path, "remote", 1, "elsewhere")
    with pytest.raises(store.RunClaimed, match="on elsewhere"):
        store.claim_run(tmp_path, "remote")
    store.claim_run(tmp_path, "remote", take_over=True)  # Optuna found its worker dead
    assert json.loads(store.claim_path(tmp_path, "remote").read_text()) == me
    _claim_by(tmp_path, "other", 1, "elsewhere")
    store.release_run(tmp_path, "other")  # not ours: stays
    store.release_run(tmp_path, "live")
    assert sorted(p.name for p in (tmp_path / store.CLAIMS).iterdir()) == ["other", "remote"]
