"""The ``decide:`` stage: matched seeds added to the leading comparison, ``step`` at a time,
until the report's verdict on its primary estimand is decided for every variant (anything but
*inconclusive* or *not estimable*), or it has ``max_seeds``, or (``futility``) the seeds left
cannot decide it (:mod:`ablate.core.sequential`).

The leading comparison is the tuned A/B with its cross-over (both variants at both tuned
settings: the 2×2 the primary estimand, quality at matched settings, is measured over), else the
tuned A/B alone where every variant chose the same settings, else the shared LR's A/B. Each look
plans it on the seeds so far (its stored runs are reused: a rerun with a larger ``max_seeds``
continues where the last one stopped), trains the new ones through the executor, and asks the
report for the primary's verdicts (:func:`ablate.report.estimands.primary_verdicts`), judged
at the level the analysis plan gives each look, so the loop stops on exactly what the report
will say. The stages that feed only secondary verdicts (the usable walks, the max-LR
brackets) run after it. The manifest records the looks, the seeds used and why it stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ablate.core import store
from ablate.core.experiment import Experiment
from ablate.core.folders import ExperimentFolder
from ablate.core.manifest import plan_manifest
from ablate.core.plan import RunSpec, plan_crossover, plan_runs, plan_tuned
from ablate.core.sequential import PRIMARY_RULE, decide_seeds, futile, look_alpha, looks
from ablate.launch.context import Context, Stage, configured
from ablate.launch.execute import Executor

if TYPE_CHECKING:
    from ablate.report.verdict import Verdict


def run(ctx: Context) -> None:
    """The stage: seeds added to the leading comparison (see the module) until its primary
    verdict is reached (:func:`decide_stage`); the plan holds every seed it took, and its
    record."""
    experiment, plan = ctx.experiment, ctx.plan
    chosen = plan.chosen
    leading = ("tuned", "crossover") if chosen else ("main",)
    others = [s for s in plan.specs if s.group not in leading]

    def planned(seeds: list[int]) -> list[RunSpec]:
        if not chosen:
            return plan_runs(experiment, seeds)
        return plan_tuned(experiment, chosen, seeds) + plan_crossover(experiment, chosen, seeds)

    context = others + plan.continued
    plan.specs = others + decide_stage(
        experiment, ctx.executor, ctx.folder, context, planned, ctx.say
    )
    plan.decided = store.read_manifest(ctx.folder).decide


def decide_stage(
    experiment: Experiment,
    executor: Executor,
    folder: ExperimentFolder,
    others: list[RunSpec],
    plan_leading: Callable[[list[int]], list[RunSpec]],
    say: Callable[[str], None],
) -> list[RunSpec]:
    """Look at the leading comparison on ever more seeds until it is decided (see the module);
    ``others`` are the rest of the plan, for the manifest. The leading comparison's runs over
    every seed it took."""
    # the report's statistics: loaded only for a file with ``decide:``
    from ablate.report.estimands import primary_verdicts
    from ablate.report.load import load_experiment_results

    assert experiment.decide is not None
    seeds = decide_seeds(experiment)
    counts = looks(len(experiment.seeds), experiment.decide)
    record: dict[str, Any] = {
        "max_seeds": experiment.decide.max_seeds,
        "step": experiment.decide.step,
        "looks": counts,
        "alpha": look_alpha(len(counts)),
        "seeds": [],
        "stopped": "running",
        "rule": PRIMARY_RULE,
        "futility": experiment.decide.futility,
    }
    leading: list[RunSpec] = []
    for look, count in enumerate(counts, 1):
        leading = plan_leading(seeds[:count])
        record["seeds"] = seeds[:count]
        store.write_manifest(folder, plan_manifest(experiment, others + leading, record))
        executor.run(leading)
        found = primary_verdicts(load_experiment_results(folder))
        words = ", ".join(f"{variant} {verdict.word}" for variant, verdict in found.items())
        say(f"decide: look {look} of {len(counts)}, {count} seeds: {words}")
        if found and all(verdict.decided for verdict in found.values()):
            record["stopped"] = "decided"
            break
        if experiment.decide.futility and futile(open_seeds(found), look, counts):
            record["stopped"] = "futile"
            left = counts[-1] - count
            say(f"decide: stopped for futility at {count} seeds: {left} more cannot decide it")
            break
    else:
        record["stopped"] = "maximum"
    store.write_manifest(folder, plan_manifest(experiment, others + leading, record))
    return leading


def open_seeds(found: dict[str, Verdict]) -> list[int | None]:
    """The seeds each undecided verdict needs (None: out of reach); empty where one of them
    is not estimable (more seeds may make it so), or none is undecided."""
    from ablate.report.verdict import Word

    undecided = [verdict for verdict in found.values() if not verdict.decided]
    if any(verdict.word is not Word.INCONCLUSIVE for verdict in undecided):
        return []
    return [verdict.more_seeds for verdict in undecided]


STAGE = Stage("decide", configured("decide"), run, "seeds added until the verdicts are reached")
