"""Optuna studies on a tiny model: diverged trials scored, resumption, sharing a storage."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from conftest import write_experiment

from ablate import search
from ablate.config import load_experiment
from ablate.search import run_max_lr, run_search, run_studies, storage_url

L0 = math.log(256)


def _experiment(tmp_path: Path, **sections):
    return load_experiment(write_experiment(tmp_path / "e.yaml", **sections))


def _trials(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=search.open_storage(url)).trials


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
    real_probe = search.probe_stability
    calls: list[float] = []

    def interrupted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(args[2])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_probe(*args, **kwargs)

    monkeypatch.setattr(search, "probe_stability", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_max_lr(exp, "rmsnorm", root, url, say=lambda _: None)
    monkeypatch.setattr(search, "probe_stability", real_probe)
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
    assert runs_before <= runs_after


def test_run_studies_writes_stability_json(tmp_path: Path) -> None:
    exp = _experiment(
        tmp_path,
        search={"n_trials": 2, "pruner": "none", "warmup_max": 3},
        max_lr={"seeds": [0, 1], "start": 0.05, "factor": 8.0, "precision": 2.0},
    )
    root = tmp_path / "results"
    result = run_studies(exp, root, storage_url(exp, root), workers=1, threads=1)
    stored = json.loads((root / "tiny" / "stability.json").read_text())
    assert stored["max_lr"].keys() == stored["search"].keys() == {"layernorm", "rmsnorm"}
    for found in stored["max_lr"].values():
        low, high = found["bracket"]
        assert low is not None and high is not None and high / low <= 2.0 + 1e-9
        assert found["runs_total"] == sum(p["runs"] for p in found["probes"])
        assert set(found["failed_seeds"]) <= {0, 1}
    assert result["criterion"].startswith("unstable if")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_two_processes_share_one_study_without_duplicates(tmp_path: Path, kind: str) -> None:
    path = write_experiment(
        tmp_path / "e.yaml",
        variants={"rmsnorm": {"model.norm.kind": "rmsnorm"}},
        search={"n_trials": 6, "pruner": "none", "warmup_max": 5},
    )
    url = (
        f"sqlite:///{tmp_path / 'study.db'}"
        if kind == "sqlite"
        else f"journal:{tmp_path / 'j.log'}"
    )
    optuna.create_study(study_name="tiny.rmsnorm.search", storage=search.open_storage(url))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ablate.cli",
                "search",
                str(path),
                "--storage",
                url,
                "--workers",
                "1",
                "--threads",
                "1",
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    trials = [t for t in _trials(url, "tiny.rmsnorm.search") if t.state.name == "COMPLETE"]
    assert 6 <= len(trials) <= 7  # n_trials, at most one over when both finish together
    run_ids = [t.user_attrs["run_id"] for t in trials]
    assert len(set(run_ids)) == len(run_ids)
    assert len({(t.params["lr"], t.params["warmup_steps"]) for t in trials}) == len(trials)
    for run_id in run_ids:
        summary = json.loads((tmp_path / "results" / "tiny" / run_id / "summary.json").read_text())
        assert summary["group"] == "search"


def test_pruner_stops_a_poor_trial_as_a_stored_result(tmp_path: Path) -> None:
    from conftest import tiny_config

    from ablate.plan import RunSpec
    from ablate.run import execute_run
    from ablate.store import is_done

    study = optuna.create_study(pruner=optuna.pruners.MedianPruner(n_startup_trials=1))
    good = study.ask()
    for step in (10, 20):
        good.report(1.0, step)  # a trial far better than a 20-step tiny model can do
    study.tell(good, 1.0)
    trial = study.ask()
    spec = RunSpec("tiny", "layernorm", 0, tiny_config(), group="search")
    summary = execute_run(spec, tmp_path, stoppers=[search.TrialPruner(trial)])
    assert summary["status"] == "pruned" and summary["steps"] == 10
    assert summary["stopped_reason"] == "pruned by Optuna at step 10"
    assert summary["stable"] is None and summary["diverged_step"] is None
    assert is_done(tmp_path / "tiny" / spec.run_id)  # a result: reused, not retrained
