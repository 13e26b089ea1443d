"""The LR x warmup search of one variant: an Optuna study whose trials are ordinary runs.

The studies live in one Optuna storage (:mod:`ablate.launch.storage`) and run in the executor's
pool (:func:`ablate.launch.workers.run_parallel`). Every trial is also an ordinary run in the
results store (``group`` search or max_lr), obtained from the stage's executor, so reports read
one place, a trial whose run is stored (by a trial, or a stage of ``ablate run``) reuses it,
and a run another process is training is waited for, not trained twice.

Many processes (on many machines, with the results folder on a shared file system) may work on
one storage. On an RDB storage every search trial sends a heartbeat (``runtime.heartbeat_s``);
one silent for three heartbeats belongs to a dead worker: Optuna fails it and enqueues a retry
with the same parameters (``runtime.trial_retries``), which takes over the dead worker's run.

The search: a seeded sampler (TPE by default) proposes ``lr`` (log scale) and ``warmup_steps``
on the search seed (:meth:`ablate.core.experiment.Experiment.search_seed`, by default not one of
the final comparison's); the objective is the final val loss with unstable runs scored as
min(loss, ℓ0), so the sampler sees where divergence begins (Optuna's samplers ignore failed
trials). The best *stable* trial's (LR, warmup) is what the tuned A/B trains. The median pruner
stops poor trials at an evaluation (intermediate val loss against optimizer steps). ``n_trials``
counts complete and pruned trials over every process sharing the storage, so rerunning continues
the study and parallel processes share the work: a worker starts a trial only while complete +
pruned + running trials are fewer than ``n_trials``, and on an RDB storage stays until the running
ones are done or retried.

A trial cut short (Ctrl-C, SIGTERM, a crash: Optuna fails it; a dead worker: failed by its
stale heartbeat; kill -9 on this machine: failed by the next process, which finds its owner's
process gone) is re-run with its parameters, its intermediate values and its **slot**, the
place in the study's sequence that seeds the sampler (:func:`slot_of`): the next trials are
proposed as if it had never been cut, so a study's trials are a function of the experiment file
however often it was interrupted. :attr:`SearchResult.reruns` lists the slots re-run.
"""

from __future__ import annotations

import math
import os
import platform
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from ablate.core.experiment import Experiment
from ablate.core.plan import RunSpec, with_train
from ablate.core.record import RunRecord
from ablate.core.stability import clipped_loss
from ablate.core.store import process_alive
from ablate.core.studies import BestTrial, SearchResult, Trial
from ablate.launch.execute import POLL_S, Executor, Request
from ablate.launch.storage import open_storage, open_study

PrintFn = Callable[[str], None]

COUNTED = (TrialState.COMPLETE, TrialState.PRUNED)


class RunFailedError(RuntimeError):
    """A trial's run raised an exception (stored as ``failed``); Optuna marks the trial FAIL."""


def trial_value(record: RunRecord) -> float:
    """The objective: final val loss, an unstable run counted as min(loss, ℓ0)."""
    loss = record.final_val_loss
    if record.stable is False:
        return clipped_loss(loss, record.initial_loss)
    return loss if loss is not None else record.initial_loss


def _describe(record: RunRecord) -> str:
    loss = record.final_val_loss
    loss_text = f"val {loss:.4f}" if loss is not None else "no val loss"
    stable = {True: "stable", False: "unstable", None: "unjudged"}[record.stable]
    return f"{loss_text}, {record.status}, {stable}"


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
    crash with no time to tell: nothing else would fail a warmup trial or a trial on a journal
    storage, which send no heartbeat); the numbers failed. A trial of a live process, or of
    another machine, is left to its process (or its heartbeat)."""
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        host, _, pid = str(trial.user_attrs.get(OWNER, "")).rpartition(":")
        if host == platform.node() and pid.isdigit() and not process_alive(int(pid)):
            study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
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


def make_sampler(experiment: Experiment) -> optuna.samplers.BaseSampler:
    """The search's sampler (TPE after ``startup_trials`` random ones, or random), seeded per
    trial from ``sampler_seed``."""
    cfg = experiment.search
    assert cfg is not None
    if cfg.sampler == "random":
        return TrialSeededSampler(optuna.samplers.RandomSampler, cfg.sampler_seed)
    tpe = partial(
        optuna.samplers.TPESampler,
        n_startup_trials=cfg.startup_trials(),
        constant_liar=cfg.parallel_trials > 1,  # a round's later trials avoid its earlier ones
    )
    return TrialSeededSampler(tpe, cfg.sampler_seed)


def make_pruner(experiment: Experiment) -> optuna.pruners.BasePruner:
    """Median pruning on intermediate val loss, or none."""
    cfg = experiment.search
    assert cfg is not None
    if cfg.pruner == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=0)


@dataclass
class PruningWatch:
    """A search trial's evaluation watcher: report each val loss (an unstable one clipped to a
    finite value) and stop the run when Optuna prunes it before its last step.

    It travels to wherever the trial's run trains (a Slurm job): there it opens the trial
    again from the experiment's storage (``url``), with the study's pruner, so every
    evaluation reaches the one trial and the pruner sees the study's other trials."""

    url: str
    study_name: str
    trial_id: int
    steps: int
    pruner: optuna.pruners.BasePruner
    trial: optuna.Trial | None = field(default=None, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "trial": None}  # a storage connection does not travel

    def __call__(self, step: int, loss: float) -> bool:
        trial = self.trial or self._reopen()
        trial.report(clipped_loss(loss, math.inf), step)
        return step < self.steps and trial.should_prune()

    def _reopen(self) -> optuna.Trial:
        study = optuna.load_study(
            study_name=self.study_name,
            storage=open_storage(self.url, heartbeat=False),
            pruner=self.pruner,
        )
        self.trial = optuna.trial.Trial(study, self.trial_id)
        return self.trial


def pruning_watch(trial: optuna.Trial, url: str, steps: int) -> PruningWatch:
    """The watcher of ``trial`` of a study on the storage at ``url``."""
    study = trial.study
    return PruningWatch(url, study.study_name, trial._trial_id, steps, study.pruner, trial)


def run_search(
    experiment: Experiment, variant: str, executor: Executor, url: str, say: PrintFn = print
) -> optuna.Study:
    """Continue the variant's search study until it holds ``n_trials`` counted trials, each
    trial's run obtained from ``executor``."""
    cfg = experiment.search
    assert cfg is not None
    if cfg.parallel_trials == 1:  # before a trial's heartbeat starts (a round's pool imports)
        executor.prepare()
    study = open_study(
        experiment,
        variant,
        "search",
        url,
        sampler=make_sampler(experiment),
        pruner=make_pruner(experiment),
    )
    rerun_cut_trials(study, say)
    base = experiment.variants[variant]
    seed = experiment.search_seed()

    def propose(trial: optuna.Trial) -> Request:
        """The trial's point and the run that scores it."""
        lr = trial.suggest_float("lr", cfg.lr_min, cfg.lr_max, log=True)
        warmup = trial.suggest_int("warmup_steps", cfg.warmup_min, cfg.warmup_max)
        config = with_train(base, lr=lr, warmup_steps=warmup, tokens=cfg.tokens)
        spec = RunSpec(experiment.name, variant, seed, config, group="search")
        retry = "run_id" in trial.user_attrs  # copied from a trial whose worker died
        trial.set_user_attr("run_id", spec.run_id)
        return Request(spec, pruning_watch(trial, url, config.steps()), retry)

    def score(trial: optuna.Trial, record: RunRecord) -> float:
        """The trial's value from its run (pruned or failed: raised, as Optuna asks)."""
        trial.set_user_attr("stable", record.stable)
        trial.set_user_attr("status", record.status)
        point = f"lr={trial.params['lr']:.3g} warmup={trial.params['warmup_steps']}"
        say(f"search {variant} #{trial.number}: {point}: {_describe(record)}")
        if record.status == "pruned":
            raise optuna.TrialPruned(record.stopped_reason)
        if record.status == "failed":  # a crash is not a result: the trial fails
            raise RunFailedError(record.error)
        return trial_value(record)

    def objective(trial: optuna.Trial) -> float:
        request = propose(trial)
        record = executor.obtain(request.spec, request.watch, request.take_over, True, say)
        return score(trial, record)

    deadline = time.monotonic() + (cfg.timeout_s or math.inf)
    watch = not url.startswith("journal:")  # RDB storages have a heartbeat
    while time.monotonic() < deadline:
        fail_dead_workers_trials(study)
        step = next_search_step(study, cfg.n_trials, watch)
        if step == "done":
            break
        if step == "wait":
            time.sleep(POLL_S)
            continue
        if cfg.parallel_trials == 1:
            optimize_one(study, objective)
            continue
        wanted = trials_to_start(study, cfg.n_trials, cfg.parallel_trials, watch)
        run_round(study, wanted, propose, score, executor, say)
    return study


def trials_to_start(study: optuna.Study, n_trials: int, parallel: int, watch_running: bool) -> int:
    """How many trials a round starts: its retries (WAITING) and the trials still missing
    from ``n_trials``, ``parallel`` at most, one at least (the caller saw a trial to start)."""
    states = Counter(t.state for t in study.get_trials(deepcopy=False))
    counted = sum(states[s] for s in COUNTED)
    running = states[TrialState.RUNNING] if watch_running else 0
    missing = n_trials - counted - running
    return max(1, min(parallel, max(missing, states[TrialState.WAITING])))


def run_round(
    study: optuna.Study,
    size: int,
    propose: Callable[[optuna.Trial], Request],
    score: Callable[[optuna.Trial, RunRecord], float],
    executor: Executor,
    say: PrintFn,
) -> None:
    """One round of a search with parallel trials: ``size`` trials asked and given their
    points one after another (each trial's sampler is seeded by its number, and the constant
    liar sees the round's earlier points), their runs obtained all at once
    (:meth:`Executor.obtain_all`), then every trial told. The same study, the same
    ``parallel_trials`` and the same results give the same trials."""
    trials, requests = [], []
    with warnings.catch_warnings():  # heartbeats are kept below, as study.optimize keeps one
        warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
        for _ in range(size):
            trials.append(study.ask())
            requests.append(propose(trials[-1]))
    with heartbeats(study, trials):
        try:
            obtained = executor.obtain_all(requests, say)
        except KeyboardInterrupt:  # failed, as study.optimize fails its trial: none waits
            for trial in trials:
                study.tell(trial, state=TrialState.FAIL)
            raise
    for trial, found in zip(trials, obtained, strict=True):
        try:
            if isinstance(found, Exception):
                raise found
            study.tell(trial, score(trial, found))
        except optuna.TrialPruned:
            study.tell(trial, state=TrialState.PRUNED)
        except RunFailedError:
            study.tell(trial, state=TrialState.FAIL)
        except Exception:
            study.tell(trial, state=TrialState.FAIL)
            raise


@contextmanager
def heartbeats(study: optuna.Study, trials: list[optuna.Trial]) -> Iterator[None]:
    """Each trial's heartbeat while its run is obtained (RDB storages; nothing on a journal),
    as ``study.optimize`` keeps one for a trial of its own."""
    from optuna.storages._heartbeat import get_heartbeat_thread

    threads = [get_heartbeat_thread(trial._trial_id, study._storage) for trial in trials]
    with ExitStack() as stack:
        for thread in threads:
            stack.enter_context(thread)
        yield


ALREADY_TOLD = "Cannot tell a "  # Optuna's refusal to tell a trial that is already finished


def optimize_one(study: optuna.Study, objective: Callable[[optuna.Trial], float]) -> None:
    """One trial of ``study``. On SQLite two workers can pop the same retried trial (it cannot
    lock the row): both train the one run (same run id; the second waits for it or reuses it)
    and the second's tell finds the trial already told with the same result, which is fine —
    whether the other tell came before this one read the trial or between its read and write."""
    try:
        study.optimize(objective, n_trials=1, catch=(RunFailedError,))
    except optuna.exceptions.UpdateFinishedTrialError:
        pass
    except ValueError as exc:
        if not str(exc).startswith(ALREADY_TOLD):
            raise


def fail_dead_workers_trials(study: optuna.Study) -> None:
    """Fail the study's trials whose heartbeat is stale; each comes back as a WAITING retry."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def next_search_step(study: optuna.Study, n_trials: int, watch_running: bool) -> str:
    """What a search worker does next: ``trial``, ``wait`` or ``done``.

    A waiting trial (a retry) is always run. Otherwise a new trial starts while complete +
    pruned (+ running, when ``watch_running``) trials are fewer than ``n_trials``; when only
    running trials stand between the study and ``n_trials`` the worker waits, since one of them
    may belong to a dead worker and come back as a retry. Without a heartbeat (journal) running
    trials are neither counted nor waited for.
    """
    states = Counter(t.state for t in study.get_trials(deepcopy=False))
    counted = sum(states[s] for s in COUNTED)
    running = states[TrialState.RUNNING] if watch_running else 0
    if states[TrialState.WAITING]:
        return "trial"
    if counted >= n_trials:
        return "done"
    return "trial" if counted + running < n_trials else "wait"


def search_summary(study: optuna.Study) -> SearchResult:
    """Best (lr, warmup) and the stable region (ranges over stable complete trials)."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    stable = [t for t in complete if t.user_attrs.get("stable")]
    best = min(stable, key=lambda t: t.value, default=None)  # the tuned stage trains at it
    region = (
        {
            "lr": [min(t.params["lr"] for t in stable), max(t.params["lr"] for t in stable)],
            "warmup_steps": [
                min(t.params["warmup_steps"] for t in stable),
                max(t.params["warmup_steps"] for t in stable),
            ],
        }
        if stable
        else None
    )
    return SearchResult(
        study=study.study_name,
        trial_table=[
            Trial(
                number=slot_of(t),
                state=t.state.name,
                value=t.value,
                lr=t.params.get("lr"),
                warmup_steps=t.params.get("warmup_steps"),
                stable=t.user_attrs.get("stable"),
                run_id=t.user_attrs.get("run_id"),
            )
            for t in study.get_trials(deepcopy=False, states=COUNTED)
        ],
        trials=len({slot_of(t) for t in study.get_trials(deepcopy=False)}),
        complete=len(complete),
        pruned=len(study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))),
        stable=len(stable),
        best=BestTrial(
            best.params["lr"],
            best.params["warmup_steps"],
            best.value,
            best.user_attrs.get("run_id"),
        )
        if best
        else None,
        stable_region=region,
        reruns=rerun_slots(study),
    )
