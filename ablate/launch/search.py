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

A trial cut short is re-run in its place (:mod:`ablate.launch.trials`): a study's trials are a
function of the experiment file however often it was interrupted.
"""

from __future__ import annotations

import math
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import optuna
from optuna.trial import TrialState

from ablate.core.experiment import Experiment
from ablate.core.plan import RunSpec, with_train
from ablate.core.record import RunRecord
from ablate.core.stability import clipped_loss, trial_value
from ablate.core.studies import BestTrial, SearchResult, Trial
from ablate.launch.execute import POLL_S, Executor, Request
from ablate.launch.storage import open_storage, open_study
from ablate.launch.trials import PrintFn, TrialSeededSampler, rerun_cut_trials, rerun_slots, slot_of

COUNTED = (TrialState.COMPLETE, TrialState.PRUNED)


class RunFailedError(RuntimeError):
    """A trial's run raised an exception (stored as ``failed``); Optuna marks the trial FAIL."""


def _describe(record: RunRecord) -> str:
    loss = record.final_val_loss
    loss_text = f"val {loss:.4f}" if loss is not None else "no val loss"
    stable = {True: "stable", False: "unstable", None: "unjudged"}[record.stable]
    return f"{loss_text}, {record.status}, {stable}"


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
        record = executor.obtain(request, True, say)
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
