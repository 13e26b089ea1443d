"""Every study of an experiment as one job per variant and kind, run in the executor's pool.

:func:`run_studies` runs (or continues) the search and max-LR studies the experiment configures,
rotated so parallel processes start on different variants, every run through the executor the
stage is given; :func:`stage_studies` is what the search and max-LR stages call;
:func:`stored_result` reads a study's result back without running anything.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ablate.core.experiment import Experiment
from ablate.core.stages import study_runs
from ablate.core.studies import BoundaryResult, SearchResult, StudyResult
from ablate.launch.context import Context
from ablate.launch.execute import Executor, LocalExecutor
from ablate.launch.max_lr import ProbeNotStored, run_max_lr
from ablate.launch.progress import StudyProgress
from ablate.launch.resources import Resources
from ablate.launch.search import PrintFn, next_search_step, run_search, search_summary
from ablate.launch.storage import open_study, storage_label, storage_url
from ablate.launch.workers import run_parallel, worker_say

KINDS = ("search", "max_lr")  # the two studies of a variant


def _job(
    kind: str,
    experiment: Experiment,
    variant: str,
    executor: Executor,
    url: str,
    best_lr: float | None,
) -> StudyResult:
    say = worker_say
    if kind == "search":
        return search_summary(run_search(experiment, variant, executor, url, say))
    return run_max_lr(experiment, variant, executor, url, best_lr, say)


def study_jobs(
    experiment: Experiment, kinds: Sequence[str] = KINDS, rotate: int = 0
) -> list[tuple[str, str]]:
    """(purpose, variant) of every study of ``kinds`` the experiment configures.

    Search studies first (any number of workers share one); the max-LR brackets, which are
    sequential, rotated by ``rotate`` so that processes started together begin on different
    variants.
    """
    variants = list(experiment.variants)
    searches = [("search", v) for v in variants] if experiment.search is not None else []
    turn = rotate % len(variants)
    brackets = variants[turn:] + variants[:turn]
    max_lrs = [("max_lr", v) for v in brackets] if experiment.max_lr is not None else []
    return [(kind, v) for kind, v in searches + max_lrs if kind in kinds]


def runs_at_once(experiment: Experiment, kinds: Sequence[str] = KINDS) -> int:
    """The most runs one study of ``kinds`` obtains at once: a search's ``parallel_trials``,
    a max-LR study's ``parallel_seeds`` (1 for a study the experiment does not configure)."""
    counts = {
        "search": experiment.search.parallel_trials if experiment.search else 1,
        "max_lr": experiment.max_lr.parallel_seeds if experiment.max_lr else 1,
    }
    return max(counts[kind] for kind in kinds)


def stored_result(
    kind: str,
    experiment: Experiment,
    variant: str,
    executor: Executor,
    url: str,
    best_lr: float | None = None,
    say: PrintFn = print,
) -> StudyResult | None:
    """A study's result when its storage already holds all of it (a rerun), else None."""
    if kind == "search":
        cfg = experiment.search
        assert cfg is not None
        study = open_study(experiment, variant, "search", url)
        watch = not url.startswith("journal:")
        done = next_search_step(study, cfg.n_trials, watch) == "done"
        return search_summary(study) if done else None
    said: list[str] = []  # shown only when the replay completes (else the pool says it again)
    try:
        result = run_max_lr(
            experiment, variant, executor, url, best_lr, said.append, stored_only=True
        )
    except ProbeNotStored:
        return None
    for line in said:
        say(line)
    return result


def run_studies(
    experiment: Experiment,
    executor: Executor,
    url: str,
    res: Resources,
    kinds: Sequence[str] = KINDS,
    say: PrintFn = print,
    best_lrs: Mapping[str, float] | None = None,
) -> dict[str, dict[str, StudyResult]]:
    """Every variant's study of ``kinds`` (those configured): ``{kind: {variant: result}}``,
    variants in the experiment's order. Studies whose storage holds all of their result are
    read here; the others run ``res.workers`` at a time in the executor's pool. Where searches
    run parallel trials that train here (``res``: the workers for every study's trials at
    once), studies too few to fill the workers take turns here, each round's trials (or
    probes: :func:`runs_at_once`) filling the pool, and enough to fill them run side by side,
    each round's runs training one after another in its study's worker (the trials and probes
    are the same either way). A max-LR
    study starts from the variant's ``best_lrs`` entry (the search stage's). Their lines go to
    ``say``."""
    best = dict(best_lrs or {})
    jobs = study_jobs(experiment, kinds, rotate=os.getpid())
    for kind, variant in jobs:  # create storage and studies once, before workers race to
        open_study(experiment, variant, kind, url)
    found = {
        (k, v): stored_result(k, experiment, v, executor, url, best.get(v), say) for k, v in jobs
    }
    pending = [job for job, result in found.items() if result is None]
    if runs_at_once(experiment, kinds) > 1 and isinstance(executor, LocalExecutor):
        if len(pending) < res.workers:
            res = Resources(1, res.threads)
        else:
            executor = replace(executor, workers=1)
    jobs_left = [(k, experiment, v, executor, url, best.get(v)) for k, v in pending]
    results = run_parallel(_job, jobs_left, res, say, executor.imports)
    found.update(zip(pending, results, strict=True))
    return {
        kind: {v: found[kind, v] for v in experiment.variants if (kind, v) in found}
        for kind in kinds
    }


def result_lines(search: dict[str, SearchResult], max_lr: dict[str, BoundaryResult]) -> list[str]:
    """One line per max-LR boundary and per search study's best trial."""
    lines = []
    for variant, found in max_lr.items():
        shown = found.boundary.text() if found.boundary else "no seed bracketed"
        check = (
            ""
            if found.monotone is not False
            else f"; NON-MONOTONE: {len(found.contradictions)} stored run(s) contradict it"
        )
        lines.append(
            f"max stable lr {variant}: {shown} after {found.runs_total} runs (geometric mean of "
            f"seeds, 95% interval){check}"
        )
    for variant, result in search.items():
        best = result.best
        text = (
            f"lr {best.lr:.3g}, warmup {best.warmup_steps}, val loss {best.value:.4f}"
            if best
            else "no stable trial"
        )
        lines.append(f"search {variant}: best {text}")
    return lines


def stage_studies(
    ctx: Context, kind: str, best: dict[str, float] | None = None
) -> dict[str, StudyResult]:
    """Every variant's study of ``kind``, with a progress line over their runs at most;
    ``{variant: result}``."""
    url = storage_url(ctx.experiment, ctx.results_dir, ctx.storage)
    at_once = runs_at_once(ctx.experiment, (kind,))
    res = ctx.resources(len(study_jobs(ctx.experiment, (kind,))) * at_once)  # runs at once
    ctx.say(
        f"{kind} studies in {storage_label(url)}: {res.workers} worker(s) x {res.threads} thread(s)"
    )
    total = sum(
        study_runs(ctx.experiment, config, variant)[kind][0]
        for variant, config in ctx.experiment.variants.items()
    )
    with StudyProgress(ctx.console, ctx.folder, kind, total) as progress:
        found = run_studies(ctx.experiment, ctx.executor, url, res, (kind,), progress.say, best)
        return found[kind]
