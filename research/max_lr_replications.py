"""The max-LR estimators' replications on truths whose edges are stated: the max-LR stage's
per-seed boundaries (:mod:`ablate.core.boundary`), and the bracket it gave before them (every
seed stable, probes stopping at the first unstable seed, steps anchored at each variant's
start), which :func:`old_bracket` keeps for the comparison."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import stats

from ablate.core.boundary import (
    Interval,
    SeedBoundary,
    boundary_ratio,
    paired_log2_ratios,
    variant_boundary,
)
from ablate.core.config import RunConfig
from ablate.core.experiment import Experiment
from ablate.core.plan import with_train
from ablate.core.simulate import true_edge, warmup_gain
from ablate.core.studies import BoundaryResult
from ablate.launch.execute import Request
from ablate.launch.max_lr import max_lr_start, probe_of_run, probe_spec, run_max_lr
from ablate.launch.simulator import SimulatedExecutor
from research.replication import Outcome, two_variants, with_truth

RATIO_RANGE = (2.0, 4.0)  # the second variant's edges over the first's: log-uniform in it, so
# that no lattice's step, √2 or 2^(1/8), lines up with the truth in every replication
THREE_SEEDS = [0, 1, 2]  # the boundary seeds ln_vs_rms bracketed before it took five
# sd of ln(edge) over seeds as reports/ln_vs_rms measures it (python -m research.calibration):
OWN_JITTER = 0.140  # each variant's own: its paired ratio's jitter / √2
SHARED_JITTER = 0.054  # a seed's, every variant alike: the rest of its boundary jitter, 0.150


def true_ratio(replication: int) -> float:
    """The replication's ratio of the second variant's edges to the first's."""
    span = np.log2(RATIO_RANGE)
    return float(2.0 ** np.random.default_rng([replication, 1]).uniform(*span))


def max_lr_truth(design: Experiment, replication: int) -> Experiment:
    """Edges log-uniform over a decade (so the bracket's lattice falls anywhere on them), the
    second variant's :func:`true_ratio` times the first's, each seed's edges jittered in ln by
    :data:`OWN_JITTER` per variant and :data:`SHARED_JITTER` for both; a shallow valley
    (curvature 0.05), so that the edges, not its wall, bound the stable LRs."""
    rng = np.random.default_rng(replication)
    edge = 10 ** rng.uniform(-1.3, -0.3)
    first, second = two_variants(design)
    truths = {
        first: {"divergence_lr": edge, "boundary_sd": OWN_JITTER, "curvature": 0.05},
        second: {
            "divergence_lr": edge * true_ratio(replication),
            "boundary_sd": OWN_JITTER,
            "curvature": 0.05,
        },
    }
    return with_truth(design, replication, {"variants": truths, "seed_edge_sd": SHARED_JITTER})


def old_bracket(
    probe: Callable[[float], bool], start: float, lr_range: tuple[float, float]
) -> tuple[float | None, float | None]:
    """The max-LR stage's bracketing until it bracketed seed by seed (the estimator the
    per-seed boundaries replaced, kept to show what it got wrong): (largest stable, smallest
    unstable) LR, assuming one boundary. From ``start``, multiply by ``OLD_FACTOR`` while
    stable (divide while unstable) until the boundary is bracketed or the range's end is
    reached, then bisect in log until the bracket is ``OLD_PRECISION`` wide."""
    stable: list[float] = []
    unstable: list[float] = []

    def check(lr: float) -> bool:
        (stable if probe(lr) else unstable).append(lr)
        return lr in stable

    lr, (lr_min, lr_max) = start, lr_range
    if check(lr):
        while not unstable and lr < lr_max:
            lr = min(lr * OLD_FACTOR, lr_max)
            check(lr)
    else:
        while not stable and lr > lr_min:
            lr = max(lr / OLD_FACTOR, lr_min)
            check(lr)
    while stable and unstable and min(unstable) / max(stable) > OLD_PRECISION * (1 + 1e-9):
        check(math.sqrt(max(stable) * min(unstable)))
    return (max(stable) if stable else None), (min(unstable) if unstable else None)


OLD_FACTOR, OLD_PRECISION = 4.0, math.sqrt(2)  # as experiments/ln_vs_rms.yaml set them


def _brackets(
    design: Experiment, folder: Path, variants: tuple[str, ...]
) -> dict[str, tuple[float | None, float | None]]:
    """The old bracket of each of ``variants`` on the simulator: each probe runs the max-LR
    seeds in order and stops at the first unstable one."""
    cfg = design.max_lr
    assert cfg is not None
    executor = SimulatedExecutor(folder)
    found = {}
    for variant in variants:

        def every_seed_stable(lr: float, variant: str = variant) -> bool:
            return all(
                probe_of_run(
                    lr,
                    seed,
                    executor.obtain(
                        Request(probe_spec(design, variant, lr, seed)), say=lambda _: None
                    ),
                    divergence_only=cfg.stop_step is not None,
                ).stable
                for seed in cfg.seeds or design.seeds
            )

        start = max_lr_start(design, variant, None)
        found[variant] = old_bracket(every_seed_stable, start, (cfg.lr_min, cfg.lr_max))
    return found


def probe_config(design: Experiment, variant: str) -> RunConfig:
    """The variant's config as a max-LR probe runs it (budget, warmup)."""
    assert design.max_lr is not None
    return with_train(design.variants[variant], tokens=design.max_lr.tokens)


def median_edge(truth: Experiment, variant: str) -> float:
    """The variant's median edge over seeds at the probes' warmup: its divergence LR times
    warmup's gain (the seeds' jitter is centred on it in log)."""
    own = truth.variants[variant].runtime.simulate.truth(variant)
    return own.divergence_lr * warmup_gain(own, probe_config(truth, variant).train.warmup_steps)


def old_bracket_ratio(design: Experiment, replication: int, folder: Path) -> Outcome:
    """log2(estimated / true) of the ratio of the two variants' max stable LRs (geometric
    midpoints of the brackets); covered: the true ratio lies between the brackets' extremes."""
    truth = max_lr_truth(design, replication)
    (low_a, high_a), (low_b, high_b) = _brackets(truth, folder, two_variants(design)).values()
    if None in (low_a, high_a, low_b, high_b):
        return Outcome(math.nan, False)
    ratio = math.sqrt(low_b * high_b) / math.sqrt(low_a * high_a)
    truth = true_ratio(replication)
    return Outcome(math.log2(ratio / truth), low_b / high_a <= truth <= high_b / low_a)


def old_bracket_median(design: Experiment, replication: int, folder: Path) -> Outcome:
    """log2(bracket midpoint / the variant's median edge) of the first variant; covered: that
    edge lies in the bracket (the bracket aims at the worst probed seed, not the median)."""
    truth = max_lr_truth(design, replication)
    variant = two_variants(design)[0]
    low, high = _brackets(truth, folder, (variant,))[variant]
    median = median_edge(truth, variant)
    if low is None or high is None:
        return Outcome(math.nan, False)
    return Outcome(math.log2(math.sqrt(low * high) / median), low < median <= high)


def old_bracket_worst_seed(design: Experiment, replication: int, folder: Path) -> Outcome:
    """As :func:`old_bracket_median`, against the lowest true edge of the probed seeds."""
    truth = max_lr_truth(design, replication)
    variant = two_variants(design)[0]
    assert truth.max_lr is not None
    seeds = truth.max_lr.seeds or truth.seeds
    worst = min(true_edge(probe_config(truth, variant), variant, s) for s in seeds)
    low, high = _brackets(truth, folder, (variant,))[variant]
    if low is None or high is None:
        return Outcome(math.nan, False)
    return Outcome(math.log2(math.sqrt(low * high) / worst), low < worst <= high)


def stage_result(design: Experiment, folder: Path, variant: str) -> BoundaryResult:
    """The max-LR stage's result for ``variant`` on the simulator (each probe a simulated run
    at the probe budget, the studies in a journal file)."""
    executor = SimulatedExecutor(folder)
    url = f"journal:{folder / 'studies.log'}"
    return run_max_lr(design, variant, executor, url, None, say=lambda _: None)


def probed_edge(found: BoundaryResult) -> tuple[list[SeedBoundary], Interval | None]:
    """The brackets the max-LR stage probed and their variant boundary: the divergence ones
    where it held its probes (``max_lr.stop_step``), else the quality ones (on these truths,
    with no collapse band, the same edge)."""
    if found.held_at is not None:
        return found.divergence_bounds, found.divergence
    return found.seed_bounds, found.boundary


def seed_bounds(design: Experiment, folder: Path, variant: str) -> list[SeedBoundary]:
    """Every max-LR seed of ``variant`` bracketed by the max-LR stage (:func:`probed_edge`)."""
    return probed_edge(stage_result(design, folder, variant))[0]


_BOUNDS: dict[tuple[str, str, tuple[int, ...], int], list[list[SeedBoundary]]] = {}


def _both_bounds(design: Experiment, replication: int, folder: Path) -> list[list[SeedBoundary]]:
    """Both variants' seed boundaries on this replication's max-LR truth, computed once per
    (design, replication) in this process: the boundary estimators score the same brackets."""
    assert design.max_lr is not None
    key = (design.path, design.name, tuple(design.max_lr.seeds or design.seeds), replication)
    if key not in _BOUNDS:
        truth = max_lr_truth(design, replication)
        _BOUNDS[key] = [seed_bounds(truth, folder, variant) for variant in two_variants(design)]
    return _BOUNDS[key]


def boundary_ratio_t(design: Experiment, replication: int, folder: Path) -> Outcome:
    """log2(estimated / true) of the per-seed boundaries' paired ratio; covered: its t interval
    widened by the lattice (:func:`ablate.core.boundary.boundary_ratio`) holds the truth."""
    found = boundary_ratio(*_both_bounds(design, replication, folder))
    if found is None:
        return Outcome(math.nan, False)
    truth = true_ratio(replication)
    return Outcome(math.log2(found.value / truth), found.low <= truth <= found.high)


def boundary_ratio_given_seeds(design: Experiment, replication: int, folder: Path) -> Outcome:
    """log2(estimated / the probed seeds' own ratio) of the paired ratio: the measurement's
    error (lattice, bisection) without the seeds' sampling, the geometric mean over the same
    seeds of their true edges' ratios; covered: the interval holds that ratio."""
    truth = max_lr_truth(design, replication)
    first, second = two_variants(design)
    bounds = _both_bounds(design, replication, folder)
    found = boundary_ratio(*bounds)
    if found is None:
        return Outcome(math.nan, False)
    mine = {b.seed for b in bounds[0] if b.estimate is not None}
    seeds = [b.seed for b in bounds[1] if b.estimate is not None and b.seed in mine]
    edge = {v: probe_config(truth, v) for v in (first, second)}
    logs = [
        math.log2(true_edge(edge[second], second, s) / true_edge(edge[first], first, s))
        for s in seeds
    ]
    target = 2.0 ** statistics.fmean(logs)
    return Outcome(math.log2(found.value / target), found.low <= target <= found.high)


def boundary_ratio_three_seeds(design: Experiment, replication: int, folder: Path) -> Outcome:
    """As :func:`boundary_ratio_t` with only :data:`THREE_SEEDS` bracketed per variant."""
    assert design.max_lr is not None
    fewer = design.max_lr.model_copy(update={"seeds": THREE_SEEDS})
    return boundary_ratio_t(design.model_copy(update={"max_lr": fewer}), replication, folder)


def boundary_ratio_bootstrap(design: Experiment, replication: int, folder: Path) -> Outcome:
    """As :func:`boundary_ratio_t`, with a percentile bootstrap over seeds of the mean log2
    ratio instead (the interval ablate does not use: with few seeds it covers too little)."""
    logs = paired_log2_ratios(*_both_bounds(design, replication, folder))
    truth = math.log2(true_ratio(replication))
    if not logs:
        return Outcome(math.nan, False)
    error = float(np.mean(logs)) - truth
    if len(set(logs)) < 2:  # one pair, or no spread: the bootstrap's interval is one point
        return Outcome(error, math.isclose(logs[0], truth))
    boot = stats.bootstrap((logs,), np.mean, method="percentile", random_state=replication)
    low, high = boot.confidence_interval
    return Outcome(error, low <= truth <= high)


def boundary_median(design: Experiment, replication: int, folder: Path) -> Outcome:
    """log2(estimated / true) of the first variant's boundary (median over seeds) against
    its median edge; covered: the interval holds that edge."""
    truth = max_lr_truth(design, replication)
    variant = two_variants(design)[0]
    found = variant_boundary(_both_bounds(design, replication, folder)[0])
    median = median_edge(truth, variant)
    if found is None:
        return Outcome(math.nan, False)
    return Outcome(math.log2(found.value / median), found.low <= median <= found.high)
