"""The maximum stable learning rate of one variant, bracketed seed by seed on a shared lattice.

Each of ``max_lr.seeds`` is bracketed on its own (:func:`ablate.core.boundary.bracket_steps`)
on the LR lattice 2^(k / ``per_octave``), which every variant shares: the first seed from
``max_lr.start``, else ``best_lr`` (the pipeline hands over a stable point: the largest stable
LR any stage stored at the probes' budget, else the search's best), else ``train.lr``; each
next seed from the boundary the seeds before it found, in small doubling moves. With
``max_lr.parallel_seeds`` k > 1 the seeds go in waves of k (:func:`seed_waves`) whose brackets
advance together, a round of one probe per seed obtained at once; a wave starts from the
boundaries of the waves before it (k = 1 is the sequential protocol, probe for probe).
Starting inside the stable window finds its upper edge even when the window is narrower than a
coarse move.
Each seed's divergence boundary (non-finite or blown up, whatever the final loss) is bracketed
next, upwards from its quality bracket's unstable end. With ``max_lr.stop_step`` every probe is
held at that step (:func:`ablate.core.early_stop.held_at`) and the divergence bracket is the
only one: a probe that had not blown up by then is not diverged, and the quality bracket, which
needs the final loss, is not measured. A probe is one seed's run at one
lattice LR, obtained from the stage's executor, and a trial of the variant's ``max_lr`` study
asked for at exactly that LR (the seed a user attribute). Probes already in the study are read
back, never rerun. The study's objective (:data:`PROBE_METRIC`) makes the dashboard's best
trial the largest stable LR. The variant's boundary is the geometric mean of its seeds' with an
interval (:func:`ablate.core.boundary.variant_boundary`); :mod:`ablate.launch.stages.max_lr` then
holds each seed's bracket against every other stored run.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from ablate.core.boundary import (
    BracketSteps,
    Interval,
    SeedBoundary,
    bracket_steps,
    lattice_index,
    lattice_lr,
    variant_boundary,
)
from ablate.core.early_stop import held_at, held_short
from ablate.core.experiment import Experiment
from ablate.core.plan import RunSpec, max_lr_family, with_train
from ablate.core.record import RunRecord
from ablate.core.studies import BoundaryResult, Probe
from ablate.launch.execute import Executor, Request
from ablate.launch.search import PrintFn
from ablate.launch.storage import open_study

ProbeKey = tuple[int, int]  # (lattice index, seed)


def probe_spec(experiment: Experiment, variant: str, lr: float, seed: int) -> RunSpec:
    """The run a probe trains: the variant at ``lr`` and the probes' budget, held at
    ``max_lr.stop_step`` where the file sets one."""
    cfg = experiment.max_lr
    assert cfg is not None
    config = with_train(experiment.variants[variant], lr=lr, tokens=cfg.tokens)
    spec = RunSpec(experiment.name, variant, seed, config, group="max_lr")
    return spec if cfg.stop_step is None else held_at(spec, cfg.stop_step)


def probe_of_run(lr: float, seed: int, record: RunRecord, divergence_only: bool = False) -> Probe:
    """A probe's verdicts from its run's summary: diverged when the divergence rule stopped it
    or, trained to its end, it has no finite final val loss; stable by the criterion, or with
    ``divergence_only`` (probes held short) when it did not diverge."""
    final = record.final_val_loss
    whole = not held_short(record)
    diverged = record.status == "diverged" or (
        whole and (final is None or not math.isfinite(final))
    )
    stable = not diverged if divergence_only else bool(record.stable)
    return Probe(lr, seed, stable, diverged, None if stable else record.unstable_reason)


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
    """Name the objective and store the boundary (geometric mean over seeds, interval) as study
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


SeedWalk = Generator[float, Probe, tuple[SeedBoundary | None, SeedBoundary | None]]


def judged(steps: BracketSteps, verdict: Callable[[Probe], bool]) -> Generator[float, Probe, Any]:
    """A bracketing (:func:`ablate.core.boundary.bracket_steps`) that is sent probes, each
    judged by ``verdict`` (stable; or not diverged) before the bracketing sees it."""
    try:
        lr = next(steps)
        while True:
            probe = yield lr
            lr = steps.send(verdict(probe))
    except StopIteration as done:
        return done.value


def seed_walk(
    experiment: Experiment,
    seed: int,
    start: tuple[float, int | None],
    divergence_before: list[SeedBoundary],
) -> SeedWalk:
    """One seed's brackets as a generator that yields each LR to probe and is sent its
    :class:`Probe`: its quality bracket from ``start`` (LR, first move), then, where that found
    an unstable end, its divergence bracket upwards from there, starting at the median of
    ``divergence_before`` (earlier seeds' divergence brackets) where there is one. Returns
    (quality bracket, divergence bracket or None); with ``max_lr.stop_step`` the divergence
    bracket alone, from that median or else from ``start`` (quality None)."""
    cfg = experiment.max_lr
    assert cfg is not None
    lr_range, steps = (cfg.lr_min, cfg.lr_max), (cfg.per_octave, cfg.coarse_steps())
    if cfg.stop_step is not None:  # probes held short: the divergence bracket alone
        from_lr, move = next_seed_start(divergence_before, start[0])
        alone: SeedBoundary = yield from judged(
            bracket_steps(seed, from_lr, lr_range, *steps, move), lambda p: not p.diverged
        )
        return None, alone
    quality: SeedBoundary = yield from judged(
        bracket_steps(seed, start[0], lr_range, *steps, start[1]), lambda p: p.stable
    )
    if quality.first_unstable is None:
        return quality, None  # stable to the range's end: it did not diverge either
    from_lr, _ = next_seed_start(divergence_before, quality.first_unstable)
    went: SeedBoundary = yield from judged(
        bracket_steps(seed, from_lr, lr_range, *steps, 1), lambda p: not p.diverged
    )
    return quality, went


def seed_waves(seeds: list[int], at_once: int) -> list[list[int]]:
    """The seeds in waves of ``at_once`` (``max_lr.parallel_seeds``), in order: a wave's seeds
    are bracketed together, each starting from the boundaries of the waves before it."""
    return [seeds[i : i + at_once] for i in range(0, len(seeds), at_once)]


@dataclass
class ProbeStudy:
    """The variant's ``max_lr`` study: the probes it holds by (lattice index, seed), those this
    call trained, and how a round of probes is asked of it and obtained (:meth:`obtain`)."""

    experiment: Experiment
    variant: str
    study: optuna.Study
    family: str
    stored: dict[ProbeKey, Probe]
    ran: set[ProbeKey] = field(default_factory=set)

    @classmethod
    def open(cls, experiment: Experiment, variant: str, url: str) -> ProbeStudy:
        """The study as stored, with the probes of the variant's family it holds."""
        cfg = experiment.max_lr
        assert cfg is not None
        study = open_study(experiment, variant, "max_lr", url)
        family = max_lr_family(experiment, variant)
        return cls(experiment, variant, study, family, stored_probes(study, family, cfg.per_octave))

    def get(self, key: ProbeKey) -> Probe | None:
        """The stored probe at ``key``, marked reused unless this call trained it."""
        found = self.stored.get(key)
        return replace(found, reused=key not in self.ran) if found is not None else None

    def obtain(self, wanted: list[ProbeKey], executor: Executor, say: PrintFn) -> None:
        """One round: each wanted probe enqueued (fixed) at its lattice LR within the section's
        range, which the dashboard plots, asked as a trial (one left WAITING earlier is popped
        first and run at its own LR and seed; the caller asks again for what is still
        missing), all obtained at once (:meth:`Executor.obtain_all`) and told; a round cut or
        failed tells its untold trials failed."""
        cfg = self.experiment.max_lr
        assert cfg is not None
        trials = []
        for index, seed in wanted:
            lr = lattice_lr(index, cfg.per_octave)
            self.study.enqueue_trial({"lr": lr}, user_attrs={"seed": seed})
            span = FloatDistribution(min(cfg.lr_min, lr), max(cfg.lr_max, lr), log=True)
            trials.append(self.study.ask({"lr": span}))
        asked = [
            (t, t.params["lr"], t.user_attrs.get("seed", s))
            for t, (_, s) in zip(trials, wanted, strict=True)
        ]
        specs = [probe_spec(self.experiment, self.variant, lr, seed) for _, lr, seed in asked]
        try:
            found = executor.obtain_all([Request(spec) for spec in specs], say)
        except BaseException:
            for trial in trials:
                self.study.tell(trial, state=TrialState.FAIL)
            raise
        for told, ((trial, lr, seed), record) in enumerate(zip(asked, found, strict=True)):
            if isinstance(record, Exception):
                for left, _, _ in asked[told:]:
                    self.study.tell(left, state=TrialState.FAIL)
                raise record
            probe = probe_of_run(lr, seed, record, divergence_only=cfg.stop_step is not None)
            self._tell(trial, probe, cfg.per_octave)

    def _tell(self, trial: optuna.Trial, probe: Probe, per_octave: int) -> None:
        """A trained probe into its trial (value and attributes) and the stored probes."""
        for name, value in probe.stored().items():
            trial.set_user_attr(name, value)
        trial.set_user_attr("probe_key", self.family)
        self.study.tell(trial, probe_value(probe.lr, probe.stable))
        key = (lattice_index(probe.lr, per_octave), probe.seed)
        self.stored[key] = probe
        self.ran.add(key)


@dataclass
class Brackets:
    """Every seed's brackets as they advance: the probes each was sent (in order, each once),
    and each seed's quality and divergence boundary once its walk ends."""

    variant: str
    seeds: list[int]
    per_octave: int
    say: PrintFn
    probes: dict[int, list[Probe]] = field(default_factory=dict)
    seen: set[ProbeKey] = field(default_factory=set)
    bounds: dict[int, SeedBoundary] = field(default_factory=dict)
    divergence: dict[int, SeedBoundary] = field(default_factory=dict)

    def walks(self, experiment: Experiment, wave: list[int], start: float) -> dict[int, SeedWalk]:
        """The wave's seeds' walks, each starting from the boundaries of the waves before it."""
        before = list(self.bounds.values()), list(self.divergence.values())
        first = next_seed_start(before[0], start)
        return {seed: seed_walk(experiment, seed, first, before[1]) for seed in wave}

    def answer(self, seed: int, walk: SeedWalk, lr: float, study: ProbeStudy) -> float | None:
        """Send the walk every probe it asks for that is stored; the first LR it asks for that
        is not, or None once its brackets are done."""
        while (found := study.get(key := (lattice_index(lr, self.per_octave), seed))) is not None:
            if key not in self.seen:
                self.seen.add(key)
                self.probes.setdefault(seed, []).append(found)
                self.say(probe_line(self.variant, found))
            try:
                lr = walk.send(found)
            except StopIteration as done:
                quality, went = done.value
                if quality is not None:
                    self.bounds[seed] = quality
                if went is not None:
                    self.divergence[seed] = went
                return None
        return lr

    def result(self, experiment: Experiment, study: ProbeStudy) -> BoundaryResult:
        """The variant's boundaries from its seeds' (and the study labelled with it)."""
        seed_bounds = [self.bounds[s] for s in self.seeds if s in self.bounds]
        divergence_bounds = [self.divergence[s] for s in self.seeds if s in self.divergence]
        boundary = variant_boundary(seed_bounds)
        label_boundary_study(study.study, boundary)
        shown = [p for seed in self.seeds for p in self.probes.get(seed, [])]
        return BoundaryResult(
            variant=self.variant,
            study=study.study.study_name,
            seeds=self.seeds,
            per_octave=self.per_octave,
            seed_bounds=seed_bounds,
            boundary=boundary,
            divergence_bounds=divergence_bounds,
            divergence=variant_boundary(divergence_bounds),
            probes=shown,
            run_ids=[probe_spec(experiment, self.variant, p.lr, p.seed).run_id for p in shown],
            held_at=experiment.max_lr.stop_step if experiment.max_lr else None,
        )


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
    the variant's max_lr study. ``max_lr.parallel_seeds`` seeds are bracketed at once: each
    round obtains one probe of every seed of the wave together (:meth:`Executor.obtain_all`).

    ``stored_only`` replays the bracketing from stored probes and raises
    :class:`ProbeNotStored` at the first probe it would have to run."""
    cfg = experiment.max_lr
    assert cfg is not None
    study = ProbeStudy.open(experiment, variant, url)
    brackets = Brackets(variant, cfg.seeds or experiment.seeds, cfg.per_octave, say)
    start = max_lr_start(experiment, variant, best_lr)
    for wave in seed_waves(brackets.seeds, cfg.parallel_seeds):
        walks = brackets.walks(experiment, wave, start)
        asking = {seed: next(walk) for seed, walk in walks.items()}
        while asking:
            answered = {s: brackets.answer(s, walks[s], lr, study) for s, lr in asking.items()}
            asking = {s: lr for s, lr in answered.items() if lr is not None}
            wanted = [(lattice_index(lr, cfg.per_octave), seed) for seed, lr in asking.items()]
            if wanted and stored_only:
                lr, seed = lattice_lr(wanted[0][0], cfg.per_octave), wanted[0][1]
                raise ProbeNotStored(f"max_lr {variant}: seed {seed} at lr={lr:.4g} not probed yet")
            if wanted:
                study.obtain(wanted, executor, say)
    return brackets.result(experiment, study)


def probe_line(variant: str, probe: Probe) -> str:
    """The line a probe prints when its bracket first asks for it."""
    verdict = "stable" if probe.stable else f"unstable ({probe.reason})"
    stored = " [stored]" if probe.reused else ""
    return f"max_lr {variant} seed {probe.seed}: lr={probe.lr:.4g}: {verdict}{stored}"
