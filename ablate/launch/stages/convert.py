"""The convert stage: continued training of the finished source runs, as stored and with the
norm swapped (:func:`ablate.core.plan.plan_convert`); a source not yet finished is named and
its conversions wait for a rerun.
"""

from __future__ import annotations

from ablate.core.plan import RunSpec
from ablate.launch.context import Context, Stage
from ablate.launch.execute import ready_conversions


def ready_convert(ctx: Context, continued: list[RunSpec]) -> list[RunSpec]:
    """The convert runs whose source finished with stored weights; the others are named."""
    ready, waiting = ready_conversions(continued, ctx.folder)
    for spec, why in waiting:
        ctx.say(f"convert: {spec.variant} seed={spec.seed} skipped: {why}")
    return ready


def run(ctx: Context) -> None:
    """The stage: the ready convert runs obtained; every convert run joins the plan."""
    ctx.execute(ready_convert(ctx, ctx.plan.continued))
    ctx.plan.specs += ctx.plan.continued


STAGE = Stage("convert", lambda ctx: bool(ctx.plan.continued), run, "the checkpoint conversion")
