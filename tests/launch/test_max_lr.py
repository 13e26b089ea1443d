"""The maximum stable LR: resumed probes are reused, only under the same budget and seeds, and a
study reads as its bracket."""

from __future__ import annotations

import json
import re
from pathlib import Path

import optuna
import pytest
from conftest import search_workers, simulated_experiment, study_trials, write_experiment

from ablate.launch import max_lr, storage, studies
from ablate.launch.max_lr import run_max_lr
from ablate.launch.simulator import SimulatedExecutor
from ablate.launch.storage import storage_url


def test_max_lr_resumed_after_interruption_redoes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sections = {"max_lr": {"seeds": [0], "start": 0.01, "factor": 4.0, "lr_max": 50.0}}
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    ref_exp = simulated_experiment(ref_dir, **sections)
    ref_root = ref_dir / "results"
    reference = run_max_lr(
        ref_exp,
        "rmsnorm",
        SimulatedExecutor(ref_root),
        storage_url(ref_exp, ref_root),
        say=lambda _: None,
    )
    exp = simulated_experiment(tmp_path, **sections)
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
        run_max_lr(exp, "rmsnorm", SimulatedExecutor(root), url, say=lambda _: None)
    monkeypatch.setattr(max_lr, "probe_stability", real_probe)
    runs_before = {p.parent.name for p in root.glob("tiny/*/summary.json")}
    resumed = run_max_lr(exp, "rmsnorm", SimulatedExecutor(root), url, say=lambda _: None)
    assert [p.reused for p in resumed.probes[:2]] == [True, True]
    assert not any(p.reused for p in resumed.probes[2:])
    assert resumed.bracket == reference.bracket
    assert resumed.runs_total == reference.runs_total
    assert resumed.trained == reference.runs_total - 2  # the two stored probes were not rerun
    complete = [t for t in study_trials(url, "tiny.rmsnorm.max_lr") if t.state.name == "COMPLETE"]
    assert len({t.params["lr"] for t in complete}) == len(complete) == len(resumed.probes)
    runs_after = {p.parent.name for p in root.glob("tiny/*/summary.json")}
    assert len(runs_before) == 2  # the two probes stored before the interruption ...
    assert len(runs_after - runs_before) == resumed.trained  # ... kept; only the rest trained


def test_max_lr_probes_are_reused_only_under_the_same_budget_and_seeds(tmp_path: Path) -> None:
    root = tmp_path / "results"
    sections = {"seeds": [0], "start": 0.01, "factor": 8.0, "precision": 8.0, "lr_max": 50.0}
    first = simulated_experiment(tmp_path, max_lr=sections)
    url = storage_url(first, root)
    quiet = {"say": lambda _: None}
    done = run_max_lr(first, "rmsnorm", SimulatedExecutor(root), url, **quiet)
    again = run_max_lr(first, "rmsnorm", SimulatedExecutor(root), url, **quiet)
    assert all(p.reused for p in again.probes) and again.bracket == done.bracket
    longer = simulated_experiment(tmp_path, max_lr={**sections, "tokens": 4 * 16 * 30})
    fresh = run_max_lr(longer, "rmsnorm", SimulatedExecutor(root), url, **quiet)
    assert not any(p.reused for p in fresh.probes) and fresh.trained >= 1
    more_seeds = simulated_experiment(tmp_path, max_lr={**sections, "seeds": [0, 1]})
    executor = SimulatedExecutor(root)
    assert not run_max_lr(more_seeds, "rmsnorm", executor, url, **quiet).probes[0].reused
    replayed = studies.stored_result(
        "max_lr", first, "rmsnorm", SimulatedExecutor(root), url
    )  # a rerun: no pool
    assert replayed.bracket == done.bracket and replayed.trained == 0
    unrun = simulated_experiment(tmp_path, max_lr={**sections, "tokens": 4 * 16 * 40})
    assert studies.stored_result("max_lr", unrun, "rmsnorm", SimulatedExecutor(root), url) is None


def test_a_max_lr_study_reads_in_the_dashboard_as_its_bracket(tmp_path: Path) -> None:
    sections = {"seeds": [0], "start": 0.01, "factor": 8.0, "precision": 8.0, "lr_max": 50.0}
    exp = simulated_experiment(tmp_path, max_lr=sections)
    root = tmp_path / "results"
    url = storage_url(exp, root)
    found = run_max_lr(exp, "rmsnorm", SimulatedExecutor(root), url, say=lambda _: None)
    low, high = found.bracket
    assert low is not None and high is not None
    study = optuna.load_study(study_name=found.study, storage=storage.open_storage(url))
    assert study.best_trial.params["lr"] == pytest.approx(low)  # best: the largest stable LR
    assert study.metric_names == [max_lr.PROBE_METRIC]
    assert study.user_attrs == {"largest_stable_lr": low, "smallest_unstable_lr": high}
    stable = {p.lr: p.stable for p in found.probes}
    for trial in study.trials:
        lr = trial.params["lr"]
        assert trial.value == (-lr if stable[lr] else 0.0)
        assert trial.distributions["lr"].high >= 50.0  # the section's range, not one point


@pytest.mark.slow
def test_two_processes_bracket_max_lr_together(tmp_path: Path) -> None:
    path = write_experiment(
        tmp_path / "e.yaml",
        max_lr={"seeds": [0], "start": 0.01, "factor": 4.0, "lr_max": 50.0},
    )
    url = f"sqlite:///{tmp_path / 'study.db'}"
    outputs = [p.communicate(timeout=600)[0] for p in search_workers(path, url, 2)]
    brackets = [re.findall(r"^max stable lr (\w+): (.*) after", o, re.MULTILINE) for o in outputs]
    assert len(brackets[0]) == 2 and brackets[0] == brackets[1], outputs
    stored = json.loads((tmp_path / "results" / "tiny" / "stability.json").read_text())
    for variant, found in stored["max_lr"].items():
        probed = {p["lr"] for p in found["probes"]}
        study = study_trials(url, f"tiny.{variant}.max_lr")
        assert {t.params["lr"] for t in study if t.state.name == "COMPLETE"} == probed
        assert all(t.state.name == "COMPLETE" for t in study)
    runs = [
        json.loads(p.read_text()) for p in (tmp_path / "results" / "tiny").glob("*/summary.json")
    ]
    assert len(runs) == sum(len(f["probes"]) for f in stored["max_lr"].values())  # seed 0 each
    assert not list((tmp_path / "results" / "tiny" / ".claims").iterdir())
