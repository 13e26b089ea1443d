"""The studies stage: ``stability.json`` (:mod:`ablate.core.studies`), the criterion, the
storage and every search and max-LR study's result as it lasts (what only this process saw is
not stored).
"""

from __future__ import annotations

from ablate.core import store
from ablate.core.stability import criterion_text
from ablate.core.studies import StoredStudies, Studies
from ablate.launch.context import Context, Stage


def write_studies(ctx: Context, studies: Studies) -> None:
    """``stability.json`` with ``studies``' results."""
    from ablate.launch.storage import storage_label, storage_url  # Optuna: only with studies

    url = storage_url(ctx.experiment, ctx.results_dir, ctx.storage)
    stored = StoredStudies(
        search=studies.search,
        max_lr=studies.max_lr,
        experiment=ctx.experiment.name,
        storage=storage_label(url),
        criterion=criterion_text(ctx.experiment.base.train.stability),
        search_seed=ctx.experiment.search_seed() if ctx.experiment.search else None,
    )
    store.write_studies(ctx.folder, stored)


def has_studies(ctx: Context) -> bool:
    """Wanted where a search or max-LR study ran."""
    return ctx.experiment.search is not None or ctx.experiment.max_lr is not None


def run(ctx: Context) -> None:
    """The stage: the plan's studies recorded."""
    write_studies(ctx, ctx.plan.studies)


STAGE = Stage("studies", has_studies, run)
