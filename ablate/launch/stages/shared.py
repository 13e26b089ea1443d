"""The shared stage: the shared-LR A/B (every variant x seed at the base's LR and warmup) and
the LR sweep. The plan starts with them and with the convert runs, which train last.
"""

from __future__ import annotations

from ablate.core.plan import plan_convert, plan_runs, plan_sweep
from ablate.launch.context import Context, Stage, always


def run(ctx: Context) -> None:
    """The stage: the shared A/B and the sweep, recorded, then obtained through the executor
    (the tuned runs join the record once a search or curve chose)."""
    plan = ctx.plan
    plan.specs = plan_runs(ctx.experiment) + plan_sweep(ctx.experiment)
    plan.continued = plan_convert(ctx.experiment)
    ctx.write_manifest()
    ctx.execute(plan.specs)


STAGE = Stage("shared", always, run, "the A/B at the shared LR (and the LR sweep)")
