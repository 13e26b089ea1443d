"""Optuna studies: the LR x warmup search and the maximum-stable-LR bracketing, per variant.

Both live in one Optuna storage (by default ``results/<experiment>/optuna.db``, SQLite; any
Optuna RDB URL such as ``postgresql://``, or ``journal:PATH`` for a journal file) with one study
per variant and purpose: ``<experiment>.<variant>.search`` and ``<experiment>.<variant>.max_lr``.
Every trial is also an ordinary run in the results store (``group`` search or max_lr), claimed,
trained or reused through the one executor path (:func:`ablate.launch.execute.obtain`), so reports
read one place, a trial whose run is already stored (by a trial, or by a stage of ``ablate
run``) reuses it, and a run another process is training is waited for, not trained twice.
The studies themselves run in the executor's process pool
(:func:`ablate.launch.execute.run_parallel`).

Many processes (on many machines, with the results folder on a shared file system) may work on
one storage. On an RDB storage every search trial sends a heartbeat (``runtime.heartbeat_s``);
one silent for three heartbeats belongs to a dead worker: Optuna fails it and enqueues a retry
with the same parameters (``runtime.trial_retries``), which takes over the dead worker's run.

- **Search**: a seeded sampler (TPE by default) proposes ``lr`` (log scale) and
  ``warmup_steps`` on the search seed (:meth:`ablate.core.config.Experiment.search_seed`, by default
  not one of the final comparison's); the objective is the final val loss with unstable runs
  scored as min(loss, ℓ0), so the sampler sees where divergence begins (Optuna's samplers
  ignore failed trials). The best *stable* trial's (LR, warmup) is what the tuned A/B
  trains. The median pruner stops poor trials at an evaluation (intermediate val loss against
  optimizer steps). ``n_trials`` counts complete and pruned trials over every process sharing
  the storage, so rerunning continues the study and parallel processes share the work: a
  worker starts a trial only while complete + pruned + running trials are fewer than
  ``n_trials``, and on an RDB storage stays until the running ones are done or retried.
- **Max stable LR**: :func:`ablate.core.stability.bracket_max_stable` with each probe a trial of
  the max_lr study asked for at exactly that LR, starting at ``max_lr.start``, else at the
  search's best LR (a stable point), else at ``train.lr``; a probe runs the k seeds in order
  and stops at the first unstable one. Probes already in the study are read back, never rerun.
  (:mod:`ablate.launch.pipeline` then holds each bracket against every other stored run.)
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import sqlalchemy.exc
from optuna.distributions import BaseDistribution, FloatDistribution
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.engine import make_url

from ablate.core.config import Experiment, RuntimeConfig
from ablate.core.folders import ExperimentFolder, retry_claims
from ablate.core.plan import RunSpec, max_lr_family, with_train
from ablate.core.stability import Bracket, bracket_max_stable, clipped_loss
from ablate.launch.execute import POLL_S, Resources, obtain, run_parallel, worker_say

PrintFn = Callable[[str], None]
COUNTED = (TrialState.COMPLETE, TrialState.PRUNED)
KINDS = ("search", "max_lr")  # the two studies of a variant
GRACE_HEARTBEATS = 3  # a trial silent for this many heartbeats belongs to a dead worker


def storage_url(experiment: Experiment, root: Path, override: str | None = None) -> str:
    """The storage to use: ``--storage``, else the file's ``storage:``, else SQLite in results."""
    chosen = override or experiment.storage
    if chosen:
        return chosen
    path = ExperimentFolder.of(root, experiment.name).optuna_db.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


_OPENED: dict[tuple[Any, ...], optuna.storages.BaseStorage] = {}


def open_storage(
    url: str, runtime: RuntimeConfig | None = None, heartbeat: bool = True
) -> optuna.storages.BaseStorage:
    """An Optuna storage for ``url``, opened once per process (opening an RDB storage checks
    its schema: ~0.1 s) and again only when a storage file was replaced.

    ``journal:PATH`` opens a journal file (no heartbeat: a dead worker's trial stays RUNNING and
    is never counted). Any other URL is an RDB storage; with ``heartbeat`` its trials send one
    every ``runtime.heartbeat_s``, and a stale trial is failed and retried up to
    ``trial_retries`` times.
    """
    runtime = runtime or RuntimeConfig()
    key = (url, heartbeat, runtime.heartbeat_s, runtime.trial_retries, _file_identity(url))
    if key not in _OPENED:
        _OPENED[key] = _open_storage(url, runtime, heartbeat)
    return _OPENED[key]


def _file_identity(url: str) -> tuple[int, int] | None:
    """(device, inode) of a SQLite or journal storage's file; None for a server or no file."""
    path = url.removeprefix("journal:") if url.startswith("journal:") else None
    if url.startswith("sqlite"):
        path = make_url(url).database
    try:
        stat = os.stat(path) if path else None
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino) if stat else None


def _open_storage(url: str, runtime: RuntimeConfig, heartbeat: bool) -> optuna.storages.BaseStorage:
    if url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(url.removeprefix("journal:")))
    # SQLite: wait for a lock held by another worker instead of failing after 5 s
    engine = {"connect_args": {"timeout": 120}} if url.startswith("sqlite") else {}
    if not heartbeat:
        return _rdb_storage(url, engine_kwargs=engine)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return _rdb_storage(
            url,
            engine_kwargs=engine,
            heartbeat_interval=runtime.heartbeat_s,
            grace_period=GRACE_HEARTBEATS * runtime.heartbeat_s,
            heartbeat_stale_trial_callback=RetryOnce(runtime.trial_retries, url),
        )


class RetryOnce:
    """Optuna's retry of a trial whose worker died, made by one process only. SQLite has no
    row locks, so two processes can both fail the same stale trial and both retry it; for a
    SQLite storage the retry is claimed first with a file created ``O_EXCL`` beside the
    database. Server databases lock the row and need no claim."""

    def __init__(self, max_retry: int, url: str) -> None:
        self.retry = RetryHeartbeatStaleTrialCallback(max_retry)
        database = make_url(url).database if url.startswith("sqlite") else None
        self.claims = retry_claims(Path(database)) if database else None

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if self.claims is not None:
            self.claims.mkdir(exist_ok=True)
            try:
                os.close(
                    os.open(
                        self.claims / f"{study.study_name}.{trial.number}", os.O_CREAT | os.O_EXCL
                    )
                )
            except FileExistsError:
                return  # another process retries it
        self.retry(study, trial)


def _rdb_storage(url: str, attempts: int = 5, **options: Any) -> optuna.storages.RDBStorage:
    """An RDB storage (``postgresql://`` through psycopg 3, installed with ablate); retried
    while workers started together race to create its tables."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    for attempt in range(1, attempts):
        try:
            return optuna.storages.RDBStorage(url, **options)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError):
            time.sleep(0.5 * attempt)  # another worker is creating the schema
    return optuna.storages.RDBStorage(url, **options)  # the last attempt raises what it meets


def storage_label(url: str) -> str:
    """``url`` fit to print or store: an RDB URL's password hidden."""
    if url.startswith("journal:"):
        return url
    return make_url(url).render_as_string(hide_password=True)


def study_name(experiment: Experiment, variant: str, purpose: str) -> str:
    """``<experiment>.<variant>.<purpose>``."""
    return f"{experiment.name}.{variant}.{purpose}"


def open_study(
    experiment: Experiment, variant: str, purpose: str, url: str, **options: Any
) -> optuna.Study:
    """Create or load the variant's study for ``purpose`` (minimizing), quietly.

    Only search trials send heartbeats: a max-LR probe is asked for at a fixed LR and is never
    retried (an unfinished probe is simply asked for again).
    """
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # ablate prints every trial itself
    return optuna.create_study(
        study_name=study_name(experiment, variant, purpose),
        storage=open_storage(url, experiment.base.runtime, heartbeat=purpose == "search"),
        direction="minimize",
        load_if_exists=True,
        **options,
    )


class RunFailedError(RuntimeError):
    """A trial's run raised an exception (stored as ``failed``); Optuna marks the trial FAIL."""


def trial_value(summary: dict[str, Any]) -> float:
    """The objective: final val loss, an unstable run counted as min(loss, ℓ0)."""
    loss = summary["final_val_loss"]
    if summary.get("stable") is False:
        return clipped_loss(loss, summary["initial_loss"])
    return loss if loss is not None else summary["initial_loss"]


def _describe(summary: dict[str, Any]) -> str:
    loss = summary.get("final_val_loss")
    loss_text = f"val {loss:.4f}" if loss is not None else "no val loss"
    stable = {True: "stable", False: "unstable", None: "unjudged"}[summary.get("stable")]
    return f"{loss_text}, {summary['status']}, {stable}"


class TrialSeededSampler(optuna.samplers.BaseSampler):
    """A sampler re-created for every trial with a seed from (seed, trial number).

    One fixed seed per process would make two processes on one study (or a resumed study)
    propose the same parameters again; trial numbers are unique across processes, so these
    seeds are too, and a single process still repeats exactly. TPE and random sampling keep no
    state between trials beyond their random generator (history comes from the storage).
    """

    def __init__(self, make: type[optuna.samplers.BaseSampler], seed: int) -> None:
        self._make = make
        self._seed = seed
        self._inner = make(seed=seed)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._inner = self._make(seed=self._seed * 1_000_003 + trial.number)
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
    """The search's sampler (TPE or random), seeded per trial from ``sampler_seed``."""
    cfg = experiment.search
    assert cfg is not None
    kind = {"random": optuna.samplers.RandomSampler, "tpe": optuna.samplers.TPESampler}
    return TrialSeededSampler(kind[cfg.sampler], cfg.sampler_seed)


def make_pruner(experiment: Experiment) -> optuna.pruners.BasePruner:
    """Median pruning on intermediate val loss, or none."""
    cfg = experiment.search
    assert cfg is not None
    if cfg.pruner == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=0)


def run_search(
    experiment: Experiment, variant: str, root: Path, url: str, say: PrintFn = print
) -> optuna.Study:
    """Continue the variant's search study until it holds ``n_trials`` counted trials."""
    from ablate.training.probes import (
        TrialPruner,  # Lightning: imported before a trial's heartbeat starts
    )

    cfg = experiment.search
    assert cfg is not None
    study = open_study(
        experiment,
        variant,
        "search",
        url,
        sampler=make_sampler(experiment),
        pruner=make_pruner(experiment),
    )
    base = experiment.variants[variant]
    seed = experiment.search_seed()

    def objective(trial: optuna.Trial) -> float:
        lr = trial.suggest_float("lr", cfg.lr_min, cfg.lr_max, log=True)
        warmup = trial.suggest_int("warmup_steps", cfg.warmup_min, cfg.warmup_max)
        config = with_train(base, lr=lr, warmup_steps=warmup, tokens=cfg.tokens)
        spec = RunSpec(experiment.name, variant, seed, config, group="search")
        retry = "run_id" in trial.user_attrs  # copied from a trial whose worker died
        trial.set_user_attr("run_id", spec.run_id)
        pruner = TrialPruner(trial)
        summary = obtain(spec, root, stoppers=[pruner], take_over=retry, wait=True, say=say)
        trial.set_user_attr("stable", summary.get("stable"))
        trial.set_user_attr("status", summary["status"])
        say(f"search {variant} #{trial.number}: lr={lr:.3g} warmup={warmup}: {_describe(summary)}")
        if summary["status"] == "pruned":
            raise optuna.TrialPruned(summary["stopped_reason"])
        if summary["status"] == "failed":  # a crash is not a result: the trial fails
            raise RunFailedError(summary["error"])
        return trial_value(summary)

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
        study.optimize(objective, n_trials=1, catch=(RunFailedError,))
    return study


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


def search_summary(study: optuna.Study) -> dict[str, Any]:
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
    return {
        "study": study.study_name,
        "trial_table": [
            {
                "number": t.number,
                "state": t.state.name,
                "value": t.value,
                "lr": t.params.get("lr"),
                "warmup_steps": t.params.get("warmup_steps"),
                "stable": t.user_attrs.get("stable"),
                "run_id": t.user_attrs.get("run_id"),
            }
            for t in study.get_trials(deepcopy=False, states=COUNTED)
        ],
        "trials": len(study.trials),
        "complete": len(complete),
        "pruned": len(study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))),
        "stable": len(stable),
        "best": {"value": best.value, **best.params, "run_id": best.user_attrs.get("run_id")}
        if best
        else None,
        "stable_region": region,
    }


@dataclass
class ProbeResult:
    """One max-LR probe: stable for every seed tried, the runs it took, the seeds that failed."""

    lr: float
    stable: bool
    runs: int
    failed_seeds: list[int]
    reason: str | None = None  # why the first failing seed was unstable
    reused: bool = False


def probe_stability(
    experiment: Experiment,
    variant: str,
    lr: float,
    seeds: list[int],
    root: Path,
    tokens: int | None,
    say: PrintFn = print,
) -> ProbeResult:
    """Run ``seeds`` in order at ``lr``, stopping at the first unstable one."""
    base = experiment.variants[variant]
    config = with_train(base, lr=lr, tokens=tokens)
    runs = 0
    for seed in seeds:
        spec = RunSpec(experiment.name, variant, seed, config, group="max_lr")
        summary = obtain(spec, root, wait=True, say=say)
        runs += 1
        if not summary.get("stable"):
            return ProbeResult(lr, False, runs, [seed], summary.get("unstable_reason"))
    return ProbeResult(lr, True, runs, [])


def probe_key(experiment: Experiment, variant: str, seeds: list[int]) -> str:
    """What a probe's verdict depends on besides its LR: the run family (the variant's config
    at the probe budget, LR and warmup aside) and the seeds. A stored probe is reused only
    under the same key, so editing ``max_lr.tokens`` or ``seeds`` probes afresh."""
    return f"{max_lr_family(experiment, variant)}:{','.join(str(s) for s in seeds)}"


def _stored_probe(study: optuna.Study, lr: float, key: str) -> ProbeResult | None:
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        same_lr = math.isclose(trial.params.get("lr", math.nan), lr, rel_tol=1e-12)
        if same_lr and trial.user_attrs.get("probe_key") == key:
            attrs = trial.user_attrs
            return ProbeResult(
                lr, attrs["stable"], attrs["runs"], attrs["failed_seeds"], attrs.get("reason"), True
            )
    return None


PROBE_METRIC = "minus_lr_if_stable"  # the max-LR studies' objective, as the dashboard names it


def probe_value(lr: float, stable: bool) -> float:
    """A max-LR probe's objective: −lr when every seed was stable, else 0. Minimized, so the
    study's best trial is its largest stable LR (the bracket's lower end)."""
    return -lr if stable else 0.0


def label_bracket_study(study: optuna.Study, bracket: Bracket) -> None:
    """Name the objective and store the bracket as study attributes, for optuna-dashboard
    (written only when they change, so a replay writes nothing)."""
    attrs = {
        "largest_stable_lr": bracket.largest_stable,
        "smallest_unstable_lr": bracket.smallest_unstable,
    }
    if study.metric_names != [PROBE_METRIC]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([PROBE_METRIC])
    for name, value in attrs.items():
        if study.user_attrs.get(name, "unset") != value:
            study.set_user_attr(name, value)


def max_lr_start(experiment: Experiment, variant: str, url: str) -> float:
    """The first probe: ``max_lr.start``, else the variant's best stable search trial's LR (a
    stable point, so the bracket is searched upwards from it), else ``train.lr``."""
    cfg = experiment.max_lr
    assert cfg is not None
    if cfg.start is not None:
        return cfg.start
    if experiment.search is not None:
        best = search_summary(open_study(experiment, variant, "search", url))["best"]
        if best is not None:
            return float(np.clip(best["lr"], cfg.lr_min, cfg.lr_max))
    return float(np.clip(experiment.variants[variant].train.lr, cfg.lr_min, cfg.lr_max))


class ProbeNotStored(LookupError):
    """A max-LR replay (``stored_only``) needs a probe that the study does not hold yet."""


def run_max_lr(
    experiment: Experiment,
    variant: str,
    root: Path,
    url: str,
    say: PrintFn = print,
    stored_only: bool = False,
) -> dict[str, Any]:
    """Bracket the variant's maximum stable LR; each probe is a trial of its max_lr study.

    ``stored_only`` replays the bracketing from stored probes and raises
    :class:`ProbeNotStored` at the first probe it would have to run."""
    cfg = experiment.max_lr
    assert cfg is not None
    study = open_study(experiment, variant, "max_lr", url)
    seeds = cfg.seeds or experiment.seeds
    key = probe_key(experiment, variant, seeds)
    probes: list[ProbeResult] = []

    def run_probe(lr: float) -> None:
        # the LR is enqueued (fixed) within the section's range, which the dashboard plots; a
        # trial left WAITING earlier is popped first and run at its own LR, and the loop below
        # asks again
        study.enqueue_trial({"lr": lr})
        span = FloatDistribution(min(cfg.lr_min, lr), max(cfg.lr_max, lr), log=True)
        trial = study.ask({"lr": span})
        try:
            found = probe_stability(
                experiment, variant, trial.params["lr"], seeds, root, cfg.tokens, say
            )
        except BaseException:
            study.tell(trial, state=TrialState.FAIL)
            raise
        for name, value in asdict(found).items():
            trial.set_user_attr(name, value)
        trial.set_user_attr("probe_key", key)
        study.tell(trial, probe_value(trial.params["lr"], found.stable))

    def probe(lr: float) -> bool:
        result = _stored_probe(study, lr, key)
        fresh = result is None
        if fresh and stored_only:
            raise ProbeNotStored(f"max_lr {variant}: lr={lr:.4g} not probed yet")
        while result is None:
            run_probe(lr)
            result = _stored_probe(study, lr, key)
        result.reused = not fresh
        probes.append(result)
        verdict = "stable" if result.stable else f"unstable (seed {result.failed_seeds})"
        say(
            f"max_lr {variant}: lr={lr:.4g}: {verdict}, {result.runs} run(s)"
            + (" [stored]" if result.reused else "")
        )
        return result.stable

    start = max_lr_start(experiment, variant, url)
    bracket: Bracket = bracket_max_stable(
        probe, start, cfg.factor, cfg.precision, cfg.lr_min, cfg.lr_max
    )
    label_bracket_study(study, bracket)
    return {
        "variant": variant,
        "study": study.study_name,
        "seeds": seeds,
        "bracket": [bracket.largest_stable, bracket.smallest_unstable],
        "ratio": bracket.ratio,
        "precision": cfg.precision,
        "probes": [asdict(p) for p in probes],
        "runs": sum(p.runs for p in probes if not p.reused),
        "runs_total": sum(p.runs for p in probes),
        "failed_seeds": sorted({s for p in probes for s in p.failed_seeds}),
    }


def _job(kind: str, experiment: Experiment, variant: str, root: str, url: str) -> dict[str, Any]:
    say = worker_say
    if kind == "search":
        return search_summary(run_search(experiment, variant, Path(root), url, say))
    return run_max_lr(experiment, variant, Path(root), url, say)


def study_jobs(
    experiment: Experiment, kinds: Sequence[str] = KINDS, rotate: int = 0
) -> list[tuple[str, str]]:
    """(purpose, variant) of every study of ``kinds`` the experiment configures.

    Search studies first (any number of workers share one); the max-LR brackets, which are
    sequential, rotated by ``rotate`` so that processes started together begin on different
    variants.
    """
    variants = list(experiment.variants)
    searches = [("search", v) for v in variants] if experiment.search is not None else []
    turn = rotate % len(variants)
    brackets = variants[turn:] + variants[:turn]
    max_lrs = [("max_lr", v) for v in brackets] if experiment.max_lr is not None else []
    return [(kind, v) for kind, v in searches + max_lrs if kind in kinds]


def stored_result(
    kind: str,
    experiment: Experiment,
    variant: str,
    root: Path,
    url: str,
    say: PrintFn = print,
) -> dict[str, Any] | None:
    """A study's result when its storage already holds all of it (a rerun), else None."""
    if kind == "search":
        cfg = experiment.search
        assert cfg is not None
        study = open_study(experiment, variant, "search", url)
        watch = not url.startswith("journal:")
        done = next_search_step(study, cfg.n_trials, watch) == "done"
        return search_summary(study) if done else None
    said: list[str] = []  # shown only when the replay completes (else the pool says it again)
    try:
        result = run_max_lr(experiment, variant, root, url, said.append, stored_only=True)
    except ProbeNotStored:
        return None
    for line in said:
        say(line)
    return result


def run_studies(
    experiment: Experiment,
    root: Path,
    url: str,
    res: Resources,
    kinds: Sequence[str] = KINDS,
    say: PrintFn = print,
) -> dict[str, dict[str, Any]]:
    """Every variant's study of ``kinds`` (those configured): ``{kind: {variant: result}}``,
    variants in the experiment's order. Studies whose storage holds all of their result are
    read here; the others run ``res.workers`` at a time in the executor's pool. Their lines
    go to ``say``."""
    jobs = study_jobs(experiment, kinds, rotate=os.getpid())
    for kind, variant in jobs:  # create storage and studies once, before workers race to
        open_study(experiment, variant, kind, url)
    found = {(k, v): stored_result(k, experiment, v, root, url, say) for k, v in jobs}
    pending = [job for job, result in found.items() if result is None]
    jobs_left = [(k, experiment, v, str(root), url) for k, v in pending]
    results = run_parallel(_job, jobs_left, res, say)
    found.update(zip(pending, results, strict=True))
    return {
        kind: {v: found[kind, v] for v in experiment.variants if (kind, v) in found}
        for kind in kinds
    }
