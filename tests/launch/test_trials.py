"""A study's trials under cuts: a cut trial, a killed one and a dead worker's retry each keep
their slot, and the trials after them are the ones an uncut study proposes."""

from __future__ import annotations

import platform
import subprocess
import warnings
from pathlib import Path

import optuna
from optuna.samplers import RandomSampler
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from ablate.launch.trials import (
    OWNER,
    TrialSeededSampler,
    fail_dead_trials,
    rerun_cut_trials,
    rerun_slots,
    slot_of,
)


def _random_study() -> optuna.Study:
    sampler = TrialSeededSampler(optuna.samplers.RandomSampler, 7)
    return optuna.create_study(sampler=sampler)


def _ask(study: optuna.Study) -> optuna.Trial:
    trial = study.ask()
    trial.suggest_float("lr", 1e-4, 1.0, log=True)
    return trial


def test_a_cut_trial_is_rerun_in_its_slot_and_the_next_trials_are_the_uncut_ones() -> None:
    whole = _random_study()
    for _ in range(4):
        trial = _ask(whole)
        whole.tell(trial, trial.params["lr"])
    cut = _random_study()
    for number in range(3):
        trial = _ask(cut)
        if number == 2:  # Ctrl-C: Optuna fails the trial in progress
            cut.tell(trial, state=TrialState.FAIL)
        else:
            cut.tell(trial, trial.params["lr"])
    assert rerun_cut_trials(cut, say=lambda _: None) == [2]
    assert rerun_cut_trials(cut, say=lambda _: None) == []  # queued once
    for _ in range(2):
        trial = _ask(cut)
        cut.tell(trial, trial.params["lr"])
    done = [t for t in cut.trials if t.state == TrialState.COMPLETE]
    assert [(slot_of(t), t.params) for t in done] == [(t.number, t.params) for t in whole.trials]
    assert rerun_slots(cut) == [2] and rerun_slots(whole) == []


def _dead_pid() -> int:
    """The id of a process that has exited and been reaped."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def test_a_trial_killed_with_its_process_is_rerun_in_its_slot() -> None:
    whole = _random_study()
    for _ in range(3):
        trial = _ask(whole)
        whole.tell(trial, trial.params["lr"])
    cut = _random_study()
    trial = _ask(cut)
    cut.tell(trial, trial.params["lr"])
    killed = _ask(cut)  # kill -9: nobody tells; it stays RUNNING with its owner gone
    cut._storage.set_trial_user_attr(killed._trial_id, OWNER, f"{platform.node()}:{_dead_pid()}")
    live = _ask(cut)  # a trial of a process still running (this one) is left alone
    assert fail_dead_trials(cut) == [1] and fail_dead_trials(cut) == []
    assert rerun_cut_trials(cut, say=lambda _: None) == [1]
    cut.tell(live, live.params["lr"])
    rerun = _ask(cut)
    cut.tell(rerun, rerun.params["lr"])
    done = sorted(
        (slot_of(t), t.params["lr"]) for t in cut.trials if t.state == TrialState.COMPLETE
    )
    assert done == [(t.number, t.params["lr"]) for t in whole.trials]


def test_a_dead_workers_retry_keeps_the_slot_of_the_trial_it_replaces() -> None:
    study = _random_study()
    trial = _ask(study)
    study.tell(trial, state=TrialState.FAIL)  # as a stale heartbeat fails it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        RetryHeartbeatStaleTrialCallback(3)(study, study.trials[0])  # Optuna's retry
    retry, new = _ask(study), _ask(study)
    trials = study.get_trials()
    assert retry.params == trials[0].params
    assert [slot_of(trials[t.number]) for t in (retry, new)] == [0, 1]


def test_a_study_with_heartbeats_leaves_a_killed_trial_to_them(tmp_path: Path) -> None:
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 's.db'}", heartbeat_interval=60)
    study = optuna.create_study(storage=storage, sampler=TrialSeededSampler(RandomSampler, 7))
    killed = _ask(study)
    study._storage.set_trial_user_attr(killed._trial_id, OWNER, f"{platform.node()}:{_dead_pid()}")
    assert fail_dead_trials(study) == []  # Optuna fails it when silent, and queues one retry
    assert study.trials[0].state == TrialState.RUNNING
