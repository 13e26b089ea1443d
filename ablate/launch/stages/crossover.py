"""The cross-over stage: on the seeds the tuned A/B ended with, each variant at the baseline's
tuned (LR, warmup) and the baseline at each variant's, so every tuned Δ is also measured at a
shared setting (:func:`ablate.core.plan.plan_crossover`).
"""

from __future__ import annotations

from ablate.core.plan import plan_crossover
from ablate.launch.context import Context, Stage, chose


def run(ctx: Context) -> None:
    """The stage: the cross-over runs recorded, then obtained through the executor."""
    plan = ctx.plan
    seeds = sorted({s.seed for s in plan.specs if s.group == "tuned"})
    runs = plan_crossover(ctx.experiment, plan.chosen, seeds)
    plan.specs += runs
    ctx.write_manifest()
    ctx.execute(runs)


STAGE = Stage("crossover", chose, run, "the cross-over: each variant at the other's settings")
