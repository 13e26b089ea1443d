"""A study's trials as a sequence a cut cannot change: each trial's **slot**, its owner, and the
re-run of a trial cut short; the sampler seeded per slot.

A trial cut short (Ctrl-C, SIGTERM, a crash: Optuna fails it; a dead worker: failed by its
stale heartbeat; kill -9 on this machine, where no heartbeat runs: failed by the next
process, which finds its owner's process gone) is re-run with its parameters, its intermediate
values and its **slot**, the place in the study's sequence that seeds the sampler
(:func:`slot_of`): the next trials are proposed as if it had never been cut, so a study's
trials are a function of the experiment file however often it was interrupted.
:attr:`SearchResult.reruns` lists the slots re-run.

The sampler is re-created for every trial with a seed hashed from (seed, slot)
(:class:`TrialSeededSampler`), so processes sharing a study, and a resumed one, never propose
the same trial twice. Used by the search and the curve stage's warmup studies.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.storages._heartbeat import is_heartbeat_enabled
from optuna.trial import FrozenTrial, TrialState

from ablate.core.store import process_alive

PrintFn = Callable[[str], None]


def trial_seed(seed: int, number: int) -> int:
    """The sampler seed of trial ``number``: a 32-bit hash of (seed, number)."""
    return int(np.random.SeedSequence((seed, number)).generate_state(1)[0])


SLOT = "slot"  # a trial's user attribute: its place in the study's sequence, kept by a re-run
OWNER = "owner"  # a trial's user attribute: "host:pid" of the process that asked for it
RETRY_OF = "failed_trial"  # the system attribute a re-run names its cut trial's number by


def slot_of(trial: FrozenTrial) -> int:
    """The trial's place in its study's sequence: the trial number of an uncut study, kept by
    the re-run of a cut trial (a trial stored before slots were: its number)."""
    return int(trial.user_attrs.get(SLOT, trial.number))


def assign_slot(study: optuna.Study, trial: FrozenTrial) -> int:
    """The slot of a trial just asked for, stored on it. A re-run's is its cut trial's (its
    user attributes carry it, or Optuna's retry names the cut trial's number); a new trial's
    is its number less the re-runs numbered before it: unique among processes asking at once
    (trial numbers are), and the number it would have had in a study never cut."""
    if SLOT in trial.user_attrs:
        return slot_of(trial)
    others = study.get_trials(deepcopy=False)
    failed = trial.system_attrs.get(RETRY_OF)
    if failed is not None:
        slot = next((slot_of(t) for t in others if t.number == failed), trial.number)
    else:
        reruns = sum(1 for t in others if t.number < trial.number and RETRY_OF in t.system_attrs)
        slot = trial.number - reruns
    study._storage.set_trial_user_attr(trial._trial_id, SLOT, slot)
    return slot


def mark_owner(study: optuna.Study, trial: FrozenTrial) -> None:
    """Store which process asked for the trial, so a later process can tell it was killed."""
    owner = f"{platform.node()}:{os.getpid()}"
    study._storage.set_trial_user_attr(trial._trial_id, OWNER, owner)


def fail_dead_trials(study: optuna.Study) -> list[int]:
    """Fail the study's running trials whose process is gone from this machine (kill -9, a
    crash with no time to tell), where nothing else would: a warmup study or a search on a
    journal storage sends no heartbeat. A study with heartbeats is left to them (Optuna fails
    a silent trial and queues its one retry; failing it here too raced that into two), as is
    a trial of a live process or of another machine. The numbers failed."""
    if is_heartbeat_enabled(study._storage):
        return []
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        host, _, pid = str(trial.user_attrs.get(OWNER, "")).rpartition(":")
        if host == platform.node() and pid.isdigit() and not process_alive(int(pid)):
            try:
                study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:
                continue  # another process finished or failed it meanwhile
            failed.append(trial.number)
    return failed


def held_slots(trials: Sequence[FrozenTrial]) -> set[int]:
    """The slots a trial that did not fail holds (done, running or queued)."""
    return {slot_of(t) for t in trials if t.state != TrialState.FAIL}


def rerun_cut_trials(study: optuna.Study, say: PrintFn) -> list[int]:
    """Queue every failed trial whose slot no other trial holds again, with its parameters,
    user attributes (slot, run id: the re-run takes over the run) and intermediate values (the
    pruner sees what it saw); the slots queued. A running trial whose process is gone is failed
    first (:func:`fail_dead_trials`)."""
    fail_dead_trials(study)
    trials = study.get_trials(deepcopy=False)
    held = held_slots(trials)
    queued = []
    for cut in trials:
        slot = slot_of(cut)
        if cut.state != TrialState.FAIL or slot in held or not cut.params:
            continue
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.WAITING,
                params=cut.params,
                distributions=cut.distributions,
                user_attrs={**cut.user_attrs, SLOT: slot},
                system_attrs={RETRY_OF: cut.number},
                intermediate_values=cut.intermediate_values,
            )
        )
        held.add(slot)
        queued.append(slot)
        say(f"{study.study_name} #{slot} was cut short: re-run with its parameters")
    return queued


def rerun_slots(study: optuna.Study) -> list[int]:
    """The slots of the study's trials that were cut short and re-run (held by a later trial)."""
    trials = study.get_trials(deepcopy=False)
    return sorted({slot_of(t) for t in trials if t.state == TrialState.FAIL} & held_slots(trials))


class TrialSeededSampler(optuna.samplers.BaseSampler):
    """A sampler re-created for every trial with a seed hashed from (seed, trial number).

    One fixed seed per process would make two processes on one study (or a resumed study)
    propose the same parameters again; trial numbers are unique across processes, so these
    seeds are too, and a single process still repeats exactly. The number hashed is the
    trial's slot (:func:`assign_slot`): a cut trial's re-run takes its slot, so the trials after
    it are seeded as in a study never cut. The seed is numpy's
    ``SeedSequence`` hash of the pair, not an arithmetic of it: Mersenne Twister streams of
    nearby small seeds can begin alike (``RandomState(0)`` and ``RandomState(3)`` draw 0.549,
    0.715 and 0.551, 0.708), which made trials 0 and 3 of every study near-duplicates. TPE and
    random sampling keep no state between trials beyond their random generator (history comes
    from the storage).
    """

    def __init__(self, make: Callable[..., optuna.samplers.BaseSampler], seed: int) -> None:
        self._make = make
        self._seed = seed
        self._inner = make(seed=seed)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        mark_owner(study, trial)
        self._inner = self._make(seed=trial_seed(self._seed, assign_slot(study, trial)))
        self._inner.before_trial(study, trial)

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self._inner.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self._inner.sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, name: str, distribution: BaseDistribution
    ) -> Any:
        return self._inner.sample_independent(study, trial, name, distribution)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._inner.after_trial(study, trial, state, values)
