"""The search stage: an Optuna study per variant over LR x warmup on the search seed
(:mod:`ablate.launch.search`); each variant's best settings are the tuned A/B's.
"""

from __future__ import annotations

from ablate.core.studies import SearchResult
from ablate.launch.context import Context, Stage, configured


def search_stage(ctx: Context) -> dict[str, SearchResult]:
    """Run (or continue) every variant's LR x warmup study; ``{variant: summary}``."""
    from ablate.launch.studies import stage_studies  # Optuna: only for a file with studies

    return stage_studies(ctx, "search")


def run(ctx: Context) -> None:
    """The stage: the studies' results, and each variant's best (LR, warmup) chosen."""
    ctx.plan.studies.search = search_stage(ctx)
    ctx.plan.chosen = ctx.plan.studies.best_settings()


STAGE = Stage("search", configured("search"), run, "the LR x warmup search")
