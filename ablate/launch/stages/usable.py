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
a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ablate.core.experiment import Experiment
from ablate.core.plan import RunSpec, Settings
from ablate.core.stability import trial_value
from ablate.core.usable import next_lr, walk_lrs, walk_seed
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


def usable_stage(
    experiment: Experiment,
    executor: Executor,
    tuned: dict[str, Settings],
    record: Callable[[list[RunSpec]], None],
    say: Callable[[str], None],
    slots: int = 1,
) -> list[RunSpec]:
    """Walk every variant of ``tuned`` (variant -> its tuned settings) up from its tuned LR at
    its tuned warmup on every max-LR seed, a round's points filling ``slots`` workers
    (:func:`round_lrs`); ``record`` gets the stage's runs so far before each round trains. The
    stage's runs: the points the walks reached."""
    cfg = experiment.max_lr
    assert cfg is not None and cfg.within is not None
    seeds = cfg.seeds or experiment.seeds
    lrs = {v: walk_lrs(settings.lr, cfg.lr_max) for v, settings in tuned.items()}
    losses: dict[Walker, dict[float, float]] = {(v, s): {} for v in tuned for s in seeds}
    pending = {(v, s): lrs[v][0] for v, s in losses}
    planned: list[RunSpec] = []
    while pending:
        chosen = round_lrs(pending, lrs, slots)
        specs = [
            usable_spec(experiment, v, tuned[v], lr, s)
            for (v, s), walk in chosen.items()
            for lr in walk
        ]
        record(planned + specs)
        found = {record.run_id: record for record in executor.run(specs)}
        for spec in specs:
            summary = found.get(spec.run_id)
            value = trial_value(summary) if summary else math.nan
            losses[(spec.variant, spec.seed)][spec.config.train.lr] = value
        pending, reached = {}, {}
        for (variant, seed), points in losses.items():
            walk = walk_seed(seed, points, lrs[variant], cfg.within)
            reached[(variant, seed)] = walk.failed_at or walk.edge
            following = next_lr(walk, lrs[variant])
            if following is not None:
                pending[(variant, seed)] = following
        planned += [s for s in specs if s.config.train.lr <= reached[(s.variant, s.seed)]]
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
