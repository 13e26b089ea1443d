"""The maximum stable learning rate of one variant, bracketed seed by seed on a shared lattice.

Each of ``max_lr.seeds`` is bracketed on its own (:func:`ablate.core.boundary.bracket_seed`) on
the LR lattice 2^(k / ``per_octave``), which every variant shares: the first seed from
``max_lr.start``, else ``best_lr`` (the pipeline hands over a stable point: the largest stable
LR any stage stored at the probes' budget, else the search's best), else ``train.lr``; each
next seed from the boundary the seeds before it found, in small doubling moves. Starting inside
the stable window finds its upper edge even when the window is narrower than a coarse move.
Each seed's divergence boundary (non-finite or blown up, whatever the final loss) is bracketed
next, upwards from its quality bracket's unstable end. A probe is one seed's run at one
lattice LR, obtained from the stage's executor, and a trial of the variant's ``max_lr`` study
asked for at exactly that LR (the seed a user attribute). Probes already in the study are read
back, never rerun. The study's objective (:data:`PROBE_METRIC`) makes the dashboard's best
trial the largest stable LR. The variant's boundary is the median of its seeds' with an
interval (:func:`ablate.core.boundary.variant_boundary`); :mod:`ablate.launch.pipeline` then
holds each seed's bracket against every other stored run.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from ablate.core.boundary import (
    Interval,
    SeedBoundary,
    bracket_seed,
    lattice_index,
    lattice_lr,
    variant_boundary,
)
from ablate.core.experiment import Experiment
from ablate.core.plan import RunSpec, max_lr_family, with_train
from ablate.core.record import RunRecord
from ablate.core.studies import BoundaryResult, Probe
from ablate.launch.execute import Executor
from ablate.launch.search import PrintFn
from ablate.launch.storage import open_study

ProbeKey = tuple[int, int]  # (lattice index, seed)


def probe_spec(experiment: Experiment, variant: str, lr: float, seed: int) -> RunSpec:
    """The run a probe trains: the variant at ``lr`` and the probes' budget."""
    cfg = experiment.max_lr
    assert cfg is not None
    config = with_train(experiment.variants[variant], lr=lr, tokens=cfg.tokens)
    return RunSpec(experiment.name, variant, seed, config, group="max_lr")


def probe_of_run(lr: float, seed: int, record: RunRecord) -> Probe:
    """A probe's verdicts from its run's summary: stable by the criterion; diverged when the
    divergence rule stopped it or it has no finite final val loss."""
    final = record.final_val_loss
    diverged = record.status == "diverged" or final is None or not math.isfinite(final)
    return Probe(lr, seed, bool(record.stable), diverged, record.unstable_reason)


def stored_probes(study: optuna.Study, family: str, per_octave: int) -> dict[ProbeKey, Probe]:
    """The study's finished probes of ``family`` (what a verdict depends on besides LR and
    seed: the variant's config at the probes' budget) at points of the lattice, by point."""
    found: dict[ProbeKey, Probe] = {}
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        attrs, lr = trial.user_attrs, trial.params.get("lr", math.nan)
        if attrs.get("probe_key") != family or "diverged" not in attrs or not lr > 0:
            continue
        index = lattice_index(lr, per_octave)
        if math.isclose(lr, lattice_lr(index, per_octave), rel_tol=1e-12):
            probe = Probe.from_stored({**attrs, "lr": lr})  # as run_probe stored it
            found[(index, probe.seed)] = probe
    return found


PROBE_METRIC = "minus_lr_if_stable"  # the max-LR studies' objective, as the dashboard names it


def probe_value(lr: float, stable: bool) -> float:
    """A max-LR probe's objective: −lr when the run was stable, else 0. Minimized, so the
    study's best trial is its largest stable LR of any seed."""
    return -lr if stable else 0.0


def label_boundary_study(study: optuna.Study, boundary: Interval | None) -> None:
    """Name the objective and store the boundary (median over seeds, interval) as study
    attributes, for optuna-dashboard (written only when they change: a replay writes nothing)."""
    attrs = {
        "max_stable_lr": boundary and boundary.value,
        "max_stable_lr_interval": boundary and [boundary.low, boundary.high],
    }
    if study.metric_names != [PROBE_METRIC]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([PROBE_METRIC])
    for name, value in attrs.items():
        if study.user_attrs.get(name, "unset") != value:
            study.set_user_attr(name, value)


def max_lr_start(experiment: Experiment, variant: str, best_lr: float | None) -> float:
    """The first seed's first probe: ``max_lr.start``, else ``best_lr`` (a stable point the
    pipeline found stored, so the bracket is searched upwards from it), else ``train.lr``."""
    cfg = experiment.max_lr
    assert cfg is not None
    if cfg.start is not None:
        return cfg.start
    start = best_lr if best_lr is not None else experiment.variants[variant].train.lr
    return float(np.clip(start, cfg.lr_min, cfg.lr_max))


def next_seed_start(bounds: list[SeedBoundary], start: float) -> tuple[float, int | None]:
    """Where the next seed's bracketing starts, and its first move in lattice steps: at the
    median of the boundaries found so far, one step at a time at first (seeds differ by a few
    steps); at ``start`` with full coarse moves while no seed has a boundary."""
    found = [b.estimate for b in bounds if b.estimate is not None]
    if not found:
        return start, None
    return 2.0 ** statistics.median(math.log2(e) for e in found), 1


class ProbeNotStored(LookupError):
    """A max-LR replay (``stored_only``) needs a probe that the study does not hold yet."""


def run_max_lr(
    experiment: Experiment,
    variant: str,
    executor: Executor,
    url: str,
    best_lr: float | None = None,
    say: PrintFn = print,
    stored_only: bool = False,
) -> BoundaryResult:
    """Bracket each max-LR seed's stable LR (then its divergence LR) on the lattice, starting
    from ``best_lr`` (the search's) unless ``max_lr.start`` is set; each probe is a trial of
    the variant's max_lr study.

    ``stored_only`` replays the bracketing from stored probes and raises
    :class:`ProbeNotStored` at the first probe it would have to run."""
    cfg = experiment.max_lr
    assert cfg is not None
    study = open_study(experiment, variant, "max_lr", url)
    seeds = cfg.seeds or experiment.seeds
    family = max_lr_family(experiment, variant)
    stored = stored_probes(study, family, cfg.per_octave)
    probes: list[Probe] = []

    def run_probe(lr: float, seed: int) -> None:
        # the LR is enqueued (fixed) within the section's range, which the dashboard plots; a
        # trial left WAITING earlier is popped first and run at its own LR and seed, and the
        # caller asks again
        study.enqueue_trial({"lr": lr}, user_attrs={"seed": seed})
        span = FloatDistribution(min(cfg.lr_min, lr), max(cfg.lr_max, lr), log=True)
        trial = study.ask({"lr": span})
        ran_lr, ran_seed = trial.params["lr"], trial.user_attrs.get("seed", seed)
        try:
            spec = probe_spec(experiment, variant, ran_lr, ran_seed)
            summary = executor.obtain(spec, wait=True, say=say)
        except BaseException:
            study.tell(trial, state=TrialState.FAIL)
            raise
        found = probe_of_run(ran_lr, ran_seed, summary)
        for name, value in found.stored().items():
            trial.set_user_attr(name, value)
        trial.set_user_attr("probe_key", family)
        study.tell(trial, probe_value(ran_lr, found.stable))
        stored[(lattice_index(ran_lr, cfg.per_octave), ran_seed)] = found

    def probe_of(seed: int, verdict: Callable[[Probe], bool]) -> Callable[[float], bool]:
        def probe(lr: float) -> bool:
            key = (lattice_index(lr, cfg.per_octave), seed)
            reused = key in stored
            if not reused and stored_only:
                raise ProbeNotStored(f"max_lr {variant}: seed {seed} at lr={lr:.4g} not probed yet")
            while key not in stored:
                run_probe(lr, seed)
            found = replace(stored[key], reused=reused)
            if key not in seen:
                seen.add(key)
                probes.append(found)
                verdict_text = "stable" if found.stable else f"unstable ({found.reason})"
                say(
                    f"max_lr {variant} seed {seed}: lr={lr:.4g}: {verdict_text}"
                    + (" [stored]" if reused else "")
                )
            return verdict(found)

        return probe

    start = max_lr_start(experiment, variant, best_lr)
    seen: set[ProbeKey] = set()
    lr_range = (cfg.lr_min, cfg.lr_max)
    steps = (cfg.per_octave, cfg.coarse_steps())
    bounds: list[SeedBoundary] = []
    divergence: list[SeedBoundary] = []
    for seed in seeds:
        seed_start, first_step = next_seed_start(bounds, start)
        quality = probe_of(seed, lambda p: p.stable)
        bounds.append(bracket_seed(quality, seed, seed_start, lr_range, *steps, first_step))
        if bounds[-1].first_unstable is None:
            continue  # stable to the range's end: it did not diverge either
        went = probe_of(seed, lambda p: not p.diverged)
        from_lr, _ = next_seed_start(divergence, bounds[-1].first_unstable)
        divergence.append(bracket_seed(went, seed, from_lr, lr_range, *steps, 1))
    boundary = variant_boundary(bounds)
    label_boundary_study(study, boundary)
    return BoundaryResult(
        variant=variant,
        study=study.study_name,
        seeds=seeds,
        per_octave=cfg.per_octave,
        seed_bounds=bounds,
        boundary=boundary,
        divergence_bounds=divergence,
        divergence=variant_boundary(divergence),
        probes=probes,
        run_ids=[probe_spec(experiment, variant, p.lr, p.seed).run_id for p in probes],
    )
