"""Optuna studies on a tiny model: diverged trials scored, resumption, sharing a storage."""

from __future__ import annotations

import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from conftest import TINY, write_experiment

from ablate.core.load import load_experiment
from ablate.core.stability import criterion_text
from ablate.launch import max_lr, storage, studies
from ablate.launch.execute import obtain
from ablate.launch.max_lr import run_max_lr
from ablate.launch.pipeline import Context, run_studies_only
from ablate.launch.search import run_search
from ablate.launch.storage import storage_url

L0 = math.log(256)


# The tiny model learns little in 20 steps: these tests of the studies' mechanics judge its runs
# against ℓ0 (floor: initial), so that LRs near 0.01 count as stable as they did before the
# unigram floor; the floor itself is tested in test_stability and test_pipeline.
LENIENT = {"train": {**TINY["train"], "stability": {"floor": "initial"}}}


def _experiment(tmp_path: Path, **sections):
    return load_experiment(write_experiment(tmp_path / "e.yaml", **{**LENIENT, **sections}))


def _trials(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=storage.open_storage(url)).trials


def test_huge_learning_rates_are_scored_not_crashed(tmp_path: Path) -> None:
    exp = _experiment(
        tmp_path,
        search={"n_trials": 3, "lr_min": 5.0, "lr_max": 10.0, "pruner": "none", "warmup_max": 2},
    )
    exp_tiny = exp.model_copy(update={"variants": {"layernorm": exp.variants["layernorm"]}})
    url = storage_url(exp_tiny, tmp_path / "results")
    study = run_search(exp_tiny, "layernorm", tmp_path / "results", url, say=lambda _: None)
    trials = study.trials
    assert len(trials) == 3 and all(t.state.name == "COMPLETE" for t in trials)
    assert all(t.user_attrs["stable"] is False for t in trials)
    assert all(t.value == pytest.approx(L0) for t in trials)  # min(loss, ℓ0)
    assert all(5.0 <= t.params["lr"] <= 10.0 for t in trials)


def test_search_resumes_without_redoing_trials(tmp_path: Path) -> None:
    root = tmp_path / "results"
    first = _experiment(tmp_path, search={"n_trials": 2, "pruner": "none", "warmup_max": 5})
    url = storage_url(first, root)
    run_search(first, "rmsnorm", root, url, say=lambda _: None)
    before = {t.number: (t.params, t.value) for t in _trials(url, "tiny.rmsnorm.search")}
    more = _experiment(tmp_path, search={"n_trials": 4, "pruner": "none", "warmup_max": 5})
    run_search(more, "rmsnorm", root, url, say=lambda _: None)
    run_search(more, "rmsnorm", root, url, say=lambda _: None)  # already complete: no trial
    after = _trials(url, "tiny.rmsnorm.search")
    assert len(after) == 4 and {t.number: (t.params, t.value) for t in after[:2]} == before
    run_ids = [t.user_attrs["run_id"] for t in after]
    assert len(set(run_ids)) == 4 and all(
        (root / "tiny" / r / "summary.json").exists() for r in run_ids
    )


def test_max_lr_resumed_after_interruption_redoes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sections = {"max_lr": {"seeds": [0], "start": 0.01, "factor": 4.0, "lr_max": 50.0}}
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    ref_exp = _experiment(ref_dir, **sections)
    ref_root = ref_dir / "results"
    reference = run_max_lr(
        ref_exp, "rmsnorm", ref_root, storage_url(ref_exp, ref_root), say=lambda _: None
    )
    exp = _experiment(tmp_path, **sections)
    root = tmp_path / "results"
    url = storage_url(exp, root)
    real_probe = max_lr.probe_stability
    calls: list[float] = []

    def interrupted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(args[2])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_probe(*args, **kwargs)

    monkeypatch.setattr(max_lr, "probe_stability", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_max_lr(exp, "rmsnorm", root, url, say=lambda _: None)
    monkeypatch.setattr(max_lr, "probe_stability", real_probe)
    runs_before = {p.parent.name for p in root.glob("tiny/*/summary.json")}
    resumed = run_max_lr(exp, "rmsnorm", root, url, say=lambda _: None)
    assert [p["reused"] for p in resumed["probes"][:2]] == [True, True]
    assert not any(p["reused"] for p in resumed["probes"][2:])
    assert resumed["bracket"] == reference["bracket"]
    assert resumed["runs_total"] == reference["runs_total"]
    assert resumed["runs"] == reference["runs_total"] - 2  # the two stored probes were not rerun
    complete = [t for t in _trials(url, "tiny.rmsnorm.max_lr") if t.state.name == "COMPLETE"]
    assert len({t.params["lr"] for t in complete}) == len(complete) == len(resumed["probes"])
    runs_after = {p.parent.name for p in root.glob("tiny/*/summary.json")}
    assert len(runs_before) == 2  # the two probes stored before the interruption ...
    assert len(runs_after - runs_before) == resumed["runs"]  # ... kept; only the rest trained


def test_max_lr_probes_are_reused_only_under_the_same_budget_and_seeds(tmp_path: Path) -> None:
    root = tmp_path / "results"
    sections = {"seeds": [0], "start": 0.01, "factor": 8.0, "precision": 8.0, "lr_max": 50.0}
    first = _experiment(tmp_path, max_lr=sections)
    url = storage_url(first, root)
    quiet = {"say": lambda _: None}
    done = run_max_lr(first, "rmsnorm", root, url, **quiet)
    again = run_max_lr(first, "rmsnorm", root, url, **quiet)
    assert all(p["reused"] for p in again["probes"]) and again["bracket"] == done["bracket"]
    longer = _experiment(tmp_path, max_lr={**sections, "tokens": 4 * 16 * 30})
    fresh = run_max_lr(longer, "rmsnorm", root, url, **quiet)
    assert not any(p["reused"] for p in fresh["probes"]) and fresh["runs"] >= 1
    more_seeds = _experiment(tmp_path, max_lr={**sections, "seeds": [0, 1]})
    assert not run_max_lr(more_seeds, "rmsnorm", root, url, **quiet)["probes"][0]["reused"]
    replayed = studies.stored_result("max_lr", first, "rmsnorm", root, url)  # a rerun: no pool
    assert replayed["bracket"] == done["bracket"] and replayed["runs"] == 0
    unrun = _experiment(tmp_path, max_lr={**sections, "tokens": 4 * 16 * 40})
    assert studies.stored_result("max_lr", unrun, "rmsnorm", root, url) is None


def test_a_max_lr_study_reads_in_the_dashboard_as_its_bracket(tmp_path: Path) -> None:
    sections = {"seeds": [0], "start": 0.01, "factor": 8.0, "precision": 8.0, "lr_max": 50.0}
    exp = _experiment(tmp_path, max_lr=sections)
    root = tmp_path / "results"
    url = storage_url(exp, root)
    found = run_max_lr(exp, "rmsnorm", root, url, say=lambda _: None)
    low, high = found["bracket"]
    assert low is not None and high is not None
    study = optuna.load_study(study_name=found["study"], storage=storage.open_storage(url))
    assert study.best_trial.params["lr"] == pytest.approx(low)  # best: the largest stable LR
    assert study.metric_names == [max_lr.PROBE_METRIC]
    assert study.user_attrs == {"largest_stable_lr": low, "smallest_unstable_lr": high}
    stable = {p["lr"]: p["stable"] for p in found["probes"]}
    for trial in study.trials:
        lr = trial.params["lr"]
        assert trial.value == (-lr if stable[lr] else 0.0)
        assert trial.distributions["lr"].high >= 50.0  # the section's range, not one point


def test_run_studies_writes_stability_json(tmp_path: Path) -> None:
    exp = _experiment(
        tmp_path,
        search={"n_trials": 2, "pruner": "none", "warmup_max": 3},
        max_lr={"seeds": [0, 1], "start": 0.05, "factor": 8.0, "precision": 2.0},
    )
    root = tmp_path / "results"
    ctx = Context(exp, root, tmp_path / "reports", workers=1, threads=1)
    result = run_studies_only(ctx)
    stored = json.loads((root / "tiny" / "stability.json").read_text())
    assert stored["max_lr"].keys() == stored["search"].keys() == {"layernorm", "rmsnorm"}
    assert stored["search_seed"] == 2  # one above the experiment's seeds [0, 1]
    for variant, found in stored["max_lr"].items():
        low, high = found["bracket"]
        assert low is not None and high is not None and high / low <= 2.0 + 1e-9
        assert found["runs_total"] == sum(p["runs"] for p in found["probes"])
        failed = {s for p in found["probes"] if not p["stable"] for s in p["failed_seeds"]}
        assert found["failed_seeds"] == sorted(failed) and failed
        trials = stored["search"][variant]["trial_table"]
        assert found["checked_runs"] >= found["runs_total"] + len(trials)  # probes and trials
        assert found["monotone"] == (found["contradictions"] == [])
    assert result["max_lr"]["rmsnorm"]["bracket"] == stored["max_lr"]["rmsnorm"]["bracket"]
    assert stored["criterion"] == criterion_text(exp.base.train.stability)


def _storage(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A fresh storage URL of ``kind``: sqlite, journal or postgres (the suite's own server)."""
    if kind == "postgres":
        return request.getfixturevalue("postgres").new_database()
    return (
        f"sqlite:///{tmp_path / 'study.db'}"
        if kind == "sqlite"
        else f"journal:{tmp_path / 'j.log'}"
    )


def _search_workers(path: Path, url: str, workers: int) -> list[subprocess.Popen]:
    """``workers`` separate ``ablate search`` processes on one storage, started together."""
    return [
        subprocess.Popen(
            [sys.executable, "-m", "ablate.cli", "search", str(path), "--storage", url]
            + ["--workers", "1", "--threads", "1"],
            cwd=path.parent,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(workers)
    ]


def _trained_trials(outputs: list[str]) -> list[int]:
    """Trial numbers as each worker printed them when it finished one (one line per trial)."""
    return [
        int(match)
        for output in outputs
        for match in re.findall(r"^search rmsnorm #(\d+):", output, flags=re.MULTILINE)
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "workers"), [("sqlite", 4), ("journal", 4), ("postgres", 1), ("postgres", 4)]
)
def test_workers_share_one_study_each_trial_run_once(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str, workers: int
) -> None:
    requested = 8
    path = write_experiment(
        tmp_path / "e.yaml",
        variants={"rmsnorm": {"model.norm.kind": "rmsnorm"}},
        search={"n_trials": requested, "pruner": "none", "warmup_max": 5},
    )
    url = _storage(kind, tmp_path, request)
    started = time.perf_counter()
    procs = _search_workers(path, url, workers)  # no study yet: the workers race to create it
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    wall = time.perf_counter() - started
    assert all(p.returncode == 0 for p in procs), outputs
    trials = _trials(url, "tiny.rmsnorm.search")
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


def _kill_first_trainer(results: Path, procs: list[subprocess.Popen]) -> str:
    """SIGKILL the worker that trains the first run seen running; return that run's id."""
    pids = {p.pid: p for p in procs}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for status_file in results.glob("*/status.json"):
            status = json.loads(status_file.read_text() or "{}")
            if status.get("status") == "running" and status.get("pid") in pids:
                time.sleep(0.5)  # well inside the run: its trial has sent heartbeats
                pids[status["pid"]].send_signal(signal.SIGKILL)
                return status_file.parent.name
        time.sleep(0.05)
    raise AssertionError("no worker started a run within 120 s")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_trial_of_a_killed_worker_is_retried_once(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    requested = 5
    path = write_experiment(
        tmp_path / "e.yaml",
        variants={"rmsnorm": {"model.norm.kind": "rmsnorm"}},
        search={"n_trials": requested, "pruner": "none", "warmup_max": 5, "tokens": 4 * 16 * 200},
        runtime={"heartbeat_s": 1},  # silent for 3 s: dead
    )
    url = _storage(kind, tmp_path, request)
    procs = _search_workers(path, url, 3)
    killed_run = _kill_first_trainer(tmp_path / "results" / "tiny", procs)
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [-signal.SIGKILL, 0, 0], "\n----\n".join(outputs)  # shown whole
    trials = _trials(url, "tiny.rmsnorm.search")
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


def test_a_run_claimed_by_a_live_process_is_waited_for(tmp_path: Path) -> None:
    from conftest import tiny_config

    from ablate.core.folders import ExperimentFolder
    from ablate.core.plan import RunSpec

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
    assert summary["status"] == "finished" and summary["run_id"] == spec.run_id
    assert not claim.exists()


@pytest.mark.slow
def test_two_processes_bracket_max_lr_together(tmp_path: Path) -> None:
    path = write_experiment(
        tmp_path / "e.yaml",
        max_lr={"seeds": [0], "start": 0.01, "factor": 4.0, "lr_max": 50.0},
    )
    url = f"sqlite:///{tmp_path / 'study.db'}"
    outputs = [p.communicate(timeout=600)[0] for p in _search_workers(path, url, 2)]
    brackets = [re.findall(r"^max stable lr (\w+): (.*) after", o, re.MULTILINE) for o in outputs]
    assert len(brackets[0]) == 2 and brackets[0] == brackets[1], outputs
    stored = json.loads((tmp_path / "results" / "tiny" / "stability.json").read_text())
    for variant, found in stored["max_lr"].items():
        probed = {p["lr"] for p in found["probes"]}
        study = _trials(url, f"tiny.{variant}.max_lr")
        assert {t.params["lr"] for t in study if t.state.name == "COMPLETE"} == probed
        assert all(t.state.name == "COMPLETE" for t in study)
    runs = [
        json.loads(p.read_text()) for p in (tmp_path / "results" / "tiny").glob("*/summary.json")
    ]
    assert len(runs) == sum(len(f["probes"]) for f in stored["max_lr"].values())  # seed 0 each
    assert not list((tmp_path / "results" / "tiny" / ".claims").iterdir())
