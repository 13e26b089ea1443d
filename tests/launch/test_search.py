"""The LR x warmup search: unstable trials are scored, a resumed study redoes nothing, stored
results are read back."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import optuna
import pytest
from conftest import simulated_experiment, study_trials, write_experiment
from optuna.trial import TrialState

from ablate.core.stability import criterion_text
from ablate.launch.pipeline import Context, run_studies_only
from ablate.launch.search import (
    optimize_one,
    run_search,
)
from ablate.launch.simulator import SimulatedExecutor
from ablate.launch.storage import storage_url

L0 = math.log(256)


def test_huge_learning_rates_are_scored_not_crashed(tmp_path: Path) -> None:
    exp = simulated_experiment(
        tmp_path,
        search={"n_trials": 3, "lr_min": 5.0, "lr_max": 10.0, "pruner": "none", "warmup_max": 2},
    )
    exp_tiny = exp.model_copy(update={"variants": {"layernorm": exp.variants["layernorm"]}})
    url = storage_url(exp_tiny, tmp_path / "results")
    study = run_search(
        exp_tiny, "layernorm", SimulatedExecutor(tmp_path / "results"), url, say=lambda _: None
    )
    trials = study.trials
    assert len(trials) == 3 and all(t.state.name == "COMPLETE" for t in trials)
    assert all(t.user_attrs["stable"] is False for t in trials)
    assert all(t.value == pytest.approx(L0) for t in trials)  # min(loss, ℓ0)
    assert all(5.0 <= t.params["lr"] <= 10.0 for t in trials)


def test_search_resumes_without_redoing_trials(tmp_path: Path) -> None:
    root = tmp_path / "results"
    search = {"n_trials": 2, "pruner": "none", "warmup_max": 5}
    first = simulated_experiment(tmp_path, search=search)
    url = storage_url(first, root)
    run_search(first, "rmsnorm", SimulatedExecutor(root), url, say=lambda _: None)
    before = {t.number: (t.params, t.value) for t in study_trials(url, "tiny.rmsnorm.search")}
    more = simulated_experiment(tmp_path, search={"n_trials": 4, "pruner": "none", "warmup_max": 5})
    run_search(more, "rmsnorm", SimulatedExecutor(root), url, say=lambda _: None)
    run_search(
        more, "rmsnorm", SimulatedExecutor(root), url, say=lambda _: None
    )  # already complete: no trial
    after = study_trials(url, "tiny.rmsnorm.search")
    assert len(after) == 4 and {t.number: (t.params, t.value) for t in after[:2]} == before
    run_ids = [t.user_attrs["run_id"] for t in after]
    assert len(set(run_ids)) == 4 and all(
        (root / "tiny" / r / "summary.json").exists() for r in run_ids
    )


def test_run_studies_writes_stability_json(tmp_path: Path) -> None:
    exp = simulated_experiment(
        tmp_path,
        search={"n_trials": 2, "pruner": "none", "warmup_max": 3},
        max_lr={"seeds": [0, 1], "start": 0.05, "factor": 8.0, "per_octave": 1},
    )
    root = tmp_path / "results"
    ctx = Context(exp, root, tmp_path / "reports", workers=1, threads=1)
    result = run_studies_only(ctx)
    stored = json.loads((root / "tiny" / "stability.json").read_text())
    assert stored["max_lr"].keys() == stored["search"].keys() == {"layernorm", "rmsnorm"}
    assert stored["search_seed"] == 2  # one above the experiment's seeds [0, 1]
    for variant, found in stored["max_lr"].items():
        for bound in found["seed_bounds"]:  # each seed bracketed to one step: a factor 2
            assert bound["first_unstable"] / bound["last_stable"] == pytest.approx(2.0)
        assert found["runs_total"] == len(found["probes"]) == len(found["run_ids"])
        assert {p["seed"] for p in found["probes"] if not p["stable"]} == {0, 1}
        trials = stored["search"][variant]["trial_table"]
        assert found["checked_runs"] >= found["runs_total"] + len(trials)  # probes and trials
        assert found["monotone"] == (found["contradictions"] == [])
    assert result.max_lr["rmsnorm"].stored() == stored["max_lr"]["rmsnorm"]
    assert stored["criterion"] == criterion_text(exp.base.train.stability)


@pytest.mark.parametrize("when", ["before_the_read", "between_read_and_write"])
def test_a_trial_another_worker_already_told_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """SQLite lets two workers pop the same retried trial; the one that tells second must go
    on, wherever the other worker's tell falls: while this one still trains (it reads a
    finished trial), or between this one's read of the trial and its write."""
    url = f"sqlite:///{tmp_path / 'race.db'}"
    study = optuna.create_study(study_name="race", storage=url)
    storage = study._storage
    tell = storage.set_trial_state_values

    def other_worker_tells(trial_id: int) -> None:
        optuna.storages.RDBStorage(url).set_trial_state_values(trial_id, TrialState.COMPLETE, [1.0])

    def racing_tell(trial_id: int, state: TrialState, values=None) -> bool:  # noqa: ANN001
        if state.is_finished() and when == "between_read_and_write":
            other_worker_tells(trial_id)
        return tell(trial_id, state, values)

    def objective(trial: optuna.Trial) -> float:
        if when == "before_the_read":
            other_worker_tells(trial._trial_id)
        return 1.0

    monkeypatch.setattr(storage, "set_trial_state_values", racing_tell)
    optimize_one(study, objective)
    [trial] = study.get_trials()
    assert (trial.state, trial.value) == (TrialState.COMPLETE, 1.0)


def test_a_studys_first_trials_are_not_near_duplicates(tmp_path: Path) -> None:
    # trials 0 and 3 were (0.00647, 72) and (0.00651, 71) in every study: per-trial seeds 0 and
    # 3 begin alike in the Mersenne Twister; hashed seeds do not
    assert np.random.RandomState(0).rand(2) == pytest.approx(
        np.random.RandomState(3).rand(2), abs=0.01
    )
    exp = simulated_experiment(
        tmp_path, search={"n_trials": 6, "pruner": "none", "lr_min": 1e-3, "lr_max": 3e-2}
    )
    root = tmp_path / "results"
    study = run_search(exp, "rmsnorm", SimulatedExecutor(root), storage_url(exp, root))
    points = [(math.log(t.params["lr"]), t.params["warmup_steps"]) for t in study.trials]
    span = math.log(30.0)
    for i, (lr_a, w_a) in enumerate(points):
        for lr_b, w_b in points[i + 1 :]:
            assert abs(lr_a - lr_b) > 0.01 * span or abs(w_a - w_b) > 2, points


def test_a_short_tpe_study_gets_past_its_random_start_up(tmp_path: Path) -> None:
    from ablate.launch.search import make_sampler

    exp = simulated_experiment(tmp_path, search={"n_trials": 5, "pruner": "none"})
    sampler = make_sampler(exp)
    inner = sampler._make(seed=0)
    assert isinstance(inner, optuna.samplers.TPESampler) and inner._n_startup_trials == 2
    random = simulated_experiment(tmp_path, search={"n_trials": 5, "sampler": "random"})
    assert isinstance(make_sampler(random)._make(seed=0), optuna.samplers.RandomSampler)


def _trials(tmp_path: Path, parallel: int) -> list[tuple[int, dict, float]]:
    """The rmsnorm study of an 8-trial TPE search (4 random start-up trials) run with
    ``parallel`` trials at once, in a folder of its own: (number, params, value) per trial."""
    search = {"n_trials": 8, "startup": 4, "parallel_trials": parallel, "pruner": "none"}
    tmp_path.mkdir()
    exp = simulated_experiment(tmp_path, search=search)
    root = tmp_path / "results"
    said: list[str] = []
    study = run_search(exp, "rmsnorm", SimulatedExecutor(root), storage_url(exp, root), said.append)
    assert all(t.state == TrialState.COMPLETE for t in study.trials) and len(said) == 8
    return [(t.number, t.params, t.value) for t in study.trials]


def test_parallel_trials_repeat_exactly(tmp_path: Path) -> None:
    """k trials a round: the same file, k and results give the same trials. What k changes:
    after the random start-up, a round's later trials are proposed without the results of its
    earlier ones (TPE's constant liar counts them at the worst value so far), where one at a
    time every trial sees every result before it; the random start-up is the same."""
    two = _trials(tmp_path / "a", 2)
    assert _trials(tmp_path / "b", 2) == two
    one = _trials(tmp_path / "c", 1)
    assert [t[1] for t in two[:4]] == [t[1] for t in one[:4]]


def test_a_round_of_parallel_trials_asks_for_their_runs_at_once(tmp_path: Path) -> None:
    rounds: list[int] = []

    class Rounds(SimulatedExecutor):
        def obtain_all(self, requests, say=print):  # type: ignore[no-untyped-def]
            rounds.append(len(requests))
            return super().obtain_all(requests, say)

    search = {"n_trials": 5, "parallel_trials": 2, "pruner": "none"}
    exp = simulated_experiment(tmp_path, search=search)
    root = tmp_path / "results"
    run_search(exp, "layernorm", Rounds(root), storage_url(exp, root), say=lambda _: None)
    assert rounds == [2, 2, 1]  # the last round only what n_trials still misses


@pytest.mark.parametrize(("workers", "turns"), [(4, True), (2, False)])
def test_searches_with_parallel_trials_take_turns_only_while_too_few_to_fill_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, turns: bool
) -> None:
    """Two studies of 2 trials at once: with workers for 4 runs they take turns, each round
    filling a pool; with 2 they fill the workers side by side, each round's trials one after
    another in its study's worker."""
    from ablate.core.load import load_experiment
    from ablate.launch import studies
    from ablate.launch.execute import LocalExecutor
    from ablate.launch.resources import Resources

    search = {"n_trials": 2, "parallel_trials": 2, "pruner": "none"}
    exp = load_experiment(write_experiment(tmp_path / "e.yaml", search=search))
    seen: list[tuple[int, int | None]] = []

    def record(job, jobs, res, say, imports):  # type: ignore[no-untyped-def]
        seen.extend((res.workers, args[3].workers) for args in jobs)
        return [None] * len(jobs)

    monkeypatch.setattr(studies, "run_parallel", record)
    executor = LocalExecutor(tmp_path / "results")
    url = storage_url(exp, tmp_path / "results")
    studies.run_studies(exp, executor, url, Resources(workers, 1), ("search",))
    assert seen == ([(1, None)] * 2 if turns else [(2, 1)] * 2)
