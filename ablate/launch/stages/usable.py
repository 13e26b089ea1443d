"""The usable stage: each variant's usable-LR boundary walked upwards from its tuned settings on
every ``max_lr.seeds`` seed (:mod:`ablate.core.usable`), before the max-LR brackets.

A walk's runs are the variant at a lattice LR (2^(1/4)) with its tuned warmup and the full
budget, the settings the curve chose the optimum at where the file declares the warmup (so on
the curve's seeds the start and every √2 point are the curve's own runs, reused). All seeds and
variants walk together, one lattice step per round through the stage's executor; a seed stops
at its first point more than ``max_lr.within`` nats above its loss at the optimum (an unstable
run counted as min(ℓ, ℓ0), as every stage selects), or at ``max_lr.lr_max``. Where fewer walks
go on than the executor has workers, each walk also trains the points after its next one in
the same round, as many as fill them (:func:`round_lrs`): a point a walk never reaches is
trained but not planned, so the stage's runs, and the report, are those of walking one step at
a time. With ``max_lr.walk_step`` every point a round trains but the walks' starts is held at
that step and decided there where it can be (:func:`ablate.core.usable.held_inside`), stored as
stopped within or above the band; the rest train on from their checkpoints. A point stored
whole (the curve's, a tuned run) is used as it is.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ablate.core.early_stop import held_at, held_short, value_at
from ablate.core.experiment import Experiment
from ablate.core.folders import ExperimentFolder
from ablate.core.plan import RunSpec, Settings
from ablate.core.record import RunRecord
from ablate.core.stability import Stop, StopKind, trial_value
from ablate.core.usable import held_inside, next_lr, walk_lrs, walk_seed
from ablate.launch.context import Context, Stage, chose
from ablate.launch.execute import Executor

Walker = tuple[str, int]  # (variant, seed)


def run(ctx: Context) -> None:
    """The stage: every variant's usable-LR walk from its tuned settings
    (:func:`usable_stage`); the plan gains the walks' runs, recorded before each round."""
    plan = ctx.plan
    done = list(plan.specs)
    plan.specs += usable_stage(
        ctx.experiment,
        ctx.executor,
        plan.chosen,
        lambda walked: ctx.write_manifest(done + walked + plan.continued),
        ctx.say,
        ctx.resources(ALL_AT_ONCE).workers,
        ctx.folder,
    )


ALL_AT_ONCE = 1 << 20  # asked for this many runs at once, the executor gives its every worker


def round_lrs(
    pending: dict[Walker, float], lattice: dict[str, list[float]], slots: int
) -> dict[Walker, list[float]]:
    """Each walk's LRs this round: its next, then the lattice points after it while the walks
    going on are fewer than ``slots`` (an equal share of the workers each)."""
    ahead = max(1, slots // max(1, len(pending)))
    return {
        (variant, seed): [lr for lr in lattice[variant] if lr >= first][:ahead]
        for (variant, seed), first in pending.items()
    }


def usable_spec(
    experiment: Experiment, variant: str, tuned: Settings, lr: float, seed: int
) -> RunSpec:
    """A walk's run: the variant at ``lr`` with its ``tuned`` warmup, at the full budget."""
    config = Settings(lr, tuned.warmup_steps).applied(experiment.variants[variant])
    return RunSpec(experiment.name, variant, seed, config, group="usable")


@dataclass
class Round:
    """A round's results: each run's final value, each held point's decision (True: within
    the band), and the spec each run answers (held where the hold decided it)."""

    values: dict[str, float] = field(default_factory=dict)
    held: dict[str, bool] = field(default_factory=dict)
    asked: dict[str, RunSpec] = field(default_factory=dict)


@dataclass
class Hold:
    """The walks' hold (``max_lr.walk_step``): its step, the band, the margins under and over
    its edge, the folder the runs' evaluations are read from, and each walk's start value at
    the step."""

    step: int
    within: float
    below: float
    above: float
    folder: ExperimentFolder
    starts: dict[Walker, float] = field(default_factory=dict)

    def decide(self, spec: RunSpec, record: RunRecord) -> tuple[bool | None, float]:
        """A held run's decision (:func:`held_inside`) and its gap over its walk's start."""
        value = value_at(self.folder.run(spec.run_id), record, self.step)
        gap = value - self.starts.get((spec.variant, spec.seed), math.nan)
        return held_inside(gap, self.within, self.below, self.above), gap


def train_round(
    executor: Executor, specs: list[RunSpec], starts: set[str], hold: Hold | None
) -> Round:
    """The round's runs trained; with a ``hold``, every run but the walks' ``starts`` (run ids)
    held at its step first (a stored one as it is), those it decides stored as stopped there,
    and the rest trained on to the budget (:func:`ablate.core.early_stop.result_of`)."""
    found = Round(asked={s.run_id: s for s in specs})
    if hold is None:
        ran = executor.run(specs)
    else:
        first = [s if s.run_id in starts else held_at(s, hold.step) for s in specs]
        ran = executor.run(first)
        by_id = {r.run_id: r for r in ran}
        for spec in specs:
            if spec.run_id in starts and spec.run_id in by_id:
                start = by_id[spec.run_id]
                hold.starts[(spec.variant, spec.seed)] = value_at(
                    hold.folder.run(spec.run_id), start, hold.step
                )
        go_on = []
        for spec in specs:
            record = by_id.get(spec.run_id)
            if spec.run_id in starts or record is None or not held_short(record):
                continue
            inside, gap = hold.decide(spec, record)
            if inside is None:
                go_on.append(spec)
                continue
            kind = StopKind.WITHIN_BAND if inside else StopKind.ABOVE_BAND
            reason = Stop(hold.step, kind, loss=gap, threshold=hold.within).reason
            stopped = replace(record, status="pruned", stopped_reason=reason)
            if record.status == "paused":
                hold.folder.run(spec.run_id).stop_paused(stopped)
            found.held[spec.run_id] = inside
            found.asked[spec.run_id] = held_at(spec, hold.step)
        ran = [r for r in ran if r.run_id not in found.held and not held_short(r)]
        ran += executor.run(go_on)
    found.values = {r.run_id: trial_value(r) for r in ran}
    return found


def usable_stage(
    experiment: Experiment,
    executor: Executor,
    tuned: dict[str, Settings],
    record: Callable[[list[RunSpec]], None],
    say: Callable[[str], None],
    slots: int = 1,
    folder: ExperimentFolder | None = None,
) -> list[RunSpec]:
    """Walk every variant of ``tuned`` (variant -> its tuned settings) up from its tuned LR at
    its tuned warmup on every max-LR seed, a round's points filling ``slots`` workers
    (:func:`round_lrs`), held at ``max_lr.walk_step`` where the file sets it (its evaluations
    read from ``folder``); ``record`` gets the stage's runs so far before each round trains.
    The stage's runs: the points the walks reached."""
    cfg = experiment.max_lr
    assert cfg is not None and cfg.within is not None
    seeds = cfg.seeds or experiment.seeds
    lrs = {v: walk_lrs(settings.lr, cfg.lr_max) for v, settings in tuned.items()}
    losses: dict[Walker, dict[float, float]] = {(v, s): {} for v in tuned for s in seeds}
    held: dict[Walker, dict[float, bool]] = {walker: {} for walker in losses}
    pending = {(v, s): lrs[v][0] for v, s in losses}
    hold = None
    if cfg.walk_step is not None:
        assert folder is not None, "a held walk reads its evaluations from the store"
        hold = Hold(
            cfg.walk_step, cfg.within, cfg.walk_margin_within, cfg.walk_margin_above, folder
        )
    planned: list[RunSpec] = []
    while pending:
        chosen = round_lrs(pending, lrs, slots)
        specs = [
            usable_spec(experiment, v, tuned[v], lr, s)
            for (v, s), walk in chosen.items()
            for lr in walk
        ]
        record(planned + specs)
        starts = {s.run_id for s in specs if s.config.train.lr == lrs[s.variant][0]}
        found = train_round(executor, specs, starts, hold)
        if hold is not None and found.held:
            inside = sum(found.held.values())
            say(
                f"usable: {len(found.held)} point(s) decided at step {hold.step}: {inside} "
                f"within the band, {len(found.held) - inside} above it"
            )
        for spec in specs:
            walker = (spec.variant, spec.seed)
            if spec.run_id in found.held:
                held[walker][spec.config.train.lr] = found.held[spec.run_id]
            else:
                losses[walker][spec.config.train.lr] = found.values.get(spec.run_id, math.nan)
        pending, reached = {}, {}
        for (variant, seed), points in losses.items():
            walk = walk_seed(seed, points, lrs[variant], cfg.within, held[(variant, seed)])
            reached[(variant, seed)] = walk.failed_at or walk.edge
            following = next_lr(walk, lrs[variant])
            if following is not None:
                pending[(variant, seed)] = following
        planned += [
            found.asked[s.run_id]
            for s in specs
            if s.config.train.lr <= reached[(s.variant, s.seed)]
        ]
        if pending:
            say(f"usable: {len(pending)} seed walk(s) go on, up to {max(pending.values()):.3g}")
    walkers = list(losses)
    planned.sort(
        key=lambda s: (lrs[s.variant].index(s.config.train.lr), walkers.index((s.variant, s.seed)))
    )
    record(planned)  # in the order one step per round plans them, whatever the workers
    return planned


def walks(ctx: Context) -> bool:
    """Wanted with ``max_lr.within`` and a tuned optimum to walk from."""
    cfg = ctx.experiment.max_lr
    return cfg is not None and cfg.within is not None and chose(ctx)


STAGE = Stage("usable", walks, run, "the usable-LR walks")
