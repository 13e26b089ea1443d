"""The tuned stage: every variant at its chosen (LR, warmup), from the search or the curve, on
the experiment's seeds, with the shared A/B's matched init and batch order.
"""

from __future__ import annotations

from ablate.core.plan import plan_tuned
from ablate.launch.context import Context, Stage, chose


def run(ctx: Context) -> None:
    """The stage: the tuned runs recorded, then obtained through the executor."""
    runs = plan_tuned(ctx.experiment, ctx.plan.chosen)
    ctx.plan.specs += runs
    ctx.write_manifest()
    ctx.execute(runs)


STAGE = Stage("tuned", chose, run, "the A/B at each variant's tuned settings")
