"""Seeds until decided (``decide:``): when the pipeline looks, which seeds it adds, and the
level each look tests at.

The leading comparison starts on the experiment's ``seeds`` (n₀ of them) and looks at n₀,
n₀ + step, …, ``max_seeds`` matched seeds: K looks. At each look the analysis plan's primary
estimand is judged as the report judges it (:mod:`ablate.report.verdict`), at its share of α
divided by K: Bonferroni spending over the planned looks, so the chance of a false verdict over
all K looks together is at most that share whatever the looks' correlation (conservative:
Pocock's boundary for K = 5 tests each look at 0.016 where this tests at 0.01). It stops at the
first look where every variant's primary verdict is decided, or at the last; with ``futility``,
also at a look from the second on where every undecided one is *inconclusive* and needs, at its
estimate and spread, more seeds than the last look would add (:func:`futile`): a stop that only
ever says *inconclusive*, so it spends no α. The added seeds
come after every seed the experiment already uses (its search and curve seeds too), so nothing
stored is re-planned.
"""

from __future__ import annotations

from ablate.core.experiment import Experiment
from ablate.core.stage_sections import DecideConfig

ALPHA = 0.05  # the family-wise error the whole sequential design keeps
PRIMARY_RULE = "primary"  # decide's record: it stopped on the plan's primary verdicts (the
# earlier rule, a paired t-test and TOST on the tuned A/B, left no "rule" in its record)


def looks(start: int, decide: DecideConfig) -> list[int]:
    """The seed counts the design looks at: ``start``, +step, …, ``max_seeds`` (the last one
    whatever the step)."""
    counts = list(range(start, decide.max_seeds, decide.step))
    return [*counts, decide.max_seeds]


FIRST_FUTILE_LOOK = 2  # the first look (1-based) futility may stop at: at the first, the
# spread of 3 seeds projects too far (docs/early-stop.md, "Seeds the 2×2 cannot use")


def futile(
    more_seeds: list[int | None], look: int, counts: list[int], first: int = FIRST_FUTILE_LOOK
) -> bool:
    """Whether the design stops for futility at ``look`` (1-based, of ``counts``): a look from
    ``first`` on but not the last, where every undecided verdict needs more seeds
    (``more_seeds``, each inconclusive one's :func:`~ablate.report.verdict.seeds_to_decide`;
    None: out of reach) than the last look would add."""
    if not more_seeds or not first <= look < len(counts):
        return False
    left = counts[-1] - counts[look - 1]
    return all(more is None or more > left for more in more_seeds)


def look_alpha(n_looks: int, alpha: float = ALPHA) -> float:
    """The level each of ``n_looks`` looks tests at (Bonferroni spending)."""
    return alpha / n_looks


def reserved_seeds(experiment: Experiment) -> set[int]:
    """Every seed a stage of the experiment trains on besides the comparison's own."""
    used = set(experiment.seeds)
    if experiment.search is not None:
        used.add(experiment.search_seed())
    if experiment.curve is not None:
        used.update(experiment.curve_seeds())
    for section in (experiment.sweep, experiment.max_lr):
        if section is not None and section.seeds:
            used.update(section.seeds)
    if experiment.convert is not None:
        used.update(experiment.convert.seeds)
    return used


def decide_seeds(experiment: Experiment) -> list[int]:
    """The seeds the leading comparison may take, in order: the experiment's, then the next
    ``max_seeds`` − len(seeds) above every seed it already uses."""
    assert experiment.decide is not None
    extra = experiment.decide.max_seeds - len(experiment.seeds)
    first = max(reserved_seeds(experiment)) + 1
    return [*experiment.seeds, *range(first, first + extra)]
