"""The estimators held to real runs: the default protocol replayed on the dense reference
(:mod:`research.reference`) by resampling its seeds, each estimate scored against the
reference's answer from all of its seeds.

A draw takes as many curve seeds as the protocol's curve has (4 in ln_vs_rms) and as many A/B
seeds as its ``seeds`` (3) from the reference's 16, disjoint, and where the reference holds
them the seeds ``decide:`` may add (6, up to ``max_seeds`` 9), in a random order. Of the
1820 × 220 choices of curve and A/B seeds, :data:`DRAW_LIMIT` draws are replayed, at random
(:func:`disjoint_draws`; on a reference of 8 seeds, without ``decide:``'s, all 70 × 4 = 280
are). The answer scored against uses all 16 seeds. A share carries
the draws' Monte Carlo error and, larger, the error of which 16 seeds the reference has (the
8-seed reference's shares differed by up to a third for some estimators). In each draw, for
each norm:

- the **LR optimum** from the curve seeds on the protocol's own grid (``curve:`` of the
  protocol file, a subset of the reference's lattice, grown an octave at an edge as the stage
  grows it) by each estimator of :data:`OPTIMA`, scored as within 2^(1/4) of the reference's
  twice: at the LR the protocol trains at (the estimate's nearest 2^(1/4),
  :func:`ablate.core.optimum.trained_lr`; the reference's answer is a point of that lattice
  too) and as estimated (an LR between lattice points, for the bagged argmin and the vertex);
- the **tuned Δ** (second − first norm, on the test split, paired over the A/B seeds) with
  each norm at the LR it trains at, its 95%
  t interval and the report's three-way verdict at ``analysis.min_effect``; and the same at
  the *other* norm's chosen LR (the cross-over), and whether the report would state the
  verdict *different* without "depends on the LR" (:func:`crossover_holds`); all of it on
  the A/B seeds at one look, and again as ``decide:`` ran it before the analysis plan
  (:func:`decide_replay`: looks at 3, 5, 7 and 9 seeds, the report's levels and adjustments
  then), scored also against the Δ at the very LRs the draw trained at;
- the **2×2** as ``decide:`` runs it now (:func:`primary_replay`): the norm's main effect
  over both norms at both trained LRs, per seed, judged at each look by the plan's primary
  rule, scored against the reference's 2×2 at its optima and at the LRs the draw trained at;
- the **usable-LR boundary**, walked upwards from the chosen optimum on as many of the draw's
  seeds as ``max_lr.seeds`` has (5: the A/B seeds, then curve seeds, as the protocol's seeds
  0–4 are), its median scored as within one reference step (2^(1/4)) of the reference's.

The tuned runs here keep the curve's warmup (the reference has one warmup): the warmup study
is not replayed. With ``--simulated N`` the same replay runs on N reference-shaped studies
drawn from the simulator fitted to the reference (:mod:`research.fit_reference`), scored
against its known truth, with the spread of the shares the bars read over the studies
(:func:`spread_rows`: roughly what one reference of as many seeds can tell). Two more tables
give how often the reference's own optimum repeats from fewer of its seeds
(:func:`repeat_rows`: what a curve on few seeds can be asked) and the reference's shape
(:func:`shape_rows`), with the fitted simulator's beside it. With ``--held-out`` the protocol
is also replayed on every disjoint draw of further seeds of the same design that no
estimator was chosen on, scored against the reference's answers (from its own seeds, none
of them held out), beside the held-out seeds' own answers, then on all the seeds against the
answers of them all (how often those repeat beside it); and each runs.csv given, reference
or held out, serves in turn as the pool of curve and A/B seeds scored against the answers
of all the others (:func:`rotation_rows`: no seed gives both the curve and the answer).
Run::

    python -m research.held_to_runs [reports/reference/runs.csv] \\
        [--protocol experiments/ln_vs_rms.yaml] [--simulated 60] [--held-out runs.csv] \\
        [--write docs/stability-and-search.md] [--out reports/reference/held_to_runs.md]
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from ablate.core.config import RunConfig
from ablate.core.experiment import AnalysisConfig, Experiment
from ablate.core.load import load_experiment
from ablate.core.optimum import edge_sides, trained_lr, variant_optimum
from ablate.core.sequential import ALPHA, look_alpha, looks
from ablate.core.simulate import mean_loss
from ablate.core.truth import SimulateConfig
from research import REPO
from research import fit_reference as fit
from research import reference as ref
from research.estimators import command_line, write_block
from research.sequential import primary_level, sequential_words

PROTOCOL = REPO / "experiments/ln_vs_rms.yaml"
REFERENCE_DESIGN = REPO / "experiments/reference.yaml"  # the model, data and budget simulated
QUARTER = 0.25 + 1e-9  # "within 2^(1/4)" on the log2 scale
DRAW_LIMIT = 1000  # disjoint draws replayed on the reference: every one up to this many
STUDY_DRAWS = 280  # disjoint draws replayed on each simulated study


def within_quarter(lr: float, optimum: float) -> bool:
    """Whether ``lr`` lies within 2^(1/4) of ``optimum``."""
    return abs(math.log2(lr / optimum)) <= QUARTER


def trained_point(curves: ref.Curves, estimate: float) -> float:
    """Where the protocol trains an optimum ``estimate``: its nearest 2^(1/4)
    (:func:`ablate.core.optimum.trained_lr`); past the reference's 2^(1/4) lattice (it steps
    by √2 above 0.0156), the nearest reference point: the replay cannot train where the
    reference did not."""
    return curves.nearest(trained_lr(estimate))


@dataclass(frozen=True)
class Draw:
    """The seeds one replay of the protocol uses: the curve's, then the A/B's, then those
    ``decide:`` adds to the A/B, in the order it adds them (none where not replayed)."""

    curve: tuple[int, ...]
    ab: tuple[int, ...]
    added: tuple[int, ...] = ()


def disjoint_draws(
    seeds: Sequence[int], n_curve: int, n_ab: int, limit: int = DRAW_LIMIT, n_added: int = 0
) -> list[Draw]:
    """Every way to take ``n_curve`` curve seeds and then ``n_ab`` A/B seeds, disjoint, where
    there are at most ``limit`` and no added seeds are asked for; else ``limit`` such draws at
    random (each curve set, then A/B set from the rest, uniform; with replacement; the same
    ones every call), each with ``n_added`` more seeds from the rest, in a random order. The
    curve and A/B seeds do not depend on ``n_added``."""
    if n_curve + n_ab + n_added > len(seeds):
        raise ValueError(f"{n_curve} + {n_ab} + {n_added} disjoint seeds of {len(seeds)}")
    total = math.comb(len(seeds), n_curve) * math.comb(len(seeds) - n_curve, n_ab)
    if total > limit or n_added:
        rng = np.random.default_rng(0)
        draws = []
        for _ in range(limit):
            shuffled = [int(s) for s in rng.permutation(list(seeds))]
            curve, ab = shuffled[:n_curve], shuffled[n_curve : n_curve + n_ab]
            added = shuffled[n_curve + n_ab : n_curve + n_ab + n_added]
            draws.append(Draw(tuple(sorted(curve)), tuple(sorted(ab)), tuple(added)))
        return draws
    draws = []
    for curve in itertools.combinations(seeds, n_curve):
        rest = [s for s in seeds if s not in curve]
        draws.extend(Draw(curve, ab) for ab in itertools.combinations(rest, n_ab))
    return draws


@dataclass(frozen=True)
class Chosen:
    """An optimum estimator's choice: the LR, and whether it lies at the edge of the points it
    was chosen from (a clipped fit or a grid end: to be reported as such)."""

    lr: float
    at_edge: bool


OptimumEstimator = Callable[[ref.Curves, Sequence[int], Sequence[float]], Chosen]


def protocol_grid(curves: ref.Curves, seeds: Sequence[int], design: Experiment) -> list[float]:
    """The curve stage's grid for these seeds: ``curve:``'s lattice, grown an octave on a side
    where a seed's lowest point is the grid's end, up to ``curve.extend`` octaves (as far as
    the reference reaches)."""
    cfg = design.curve
    assert cfg is not None
    grown = [0, 0]
    present = set(curves.lrs)
    while True:
        grid = [lr for lr in cfg.lrs(*grown) if lr in present]
        sides = edge_sides(_curves_on(curves, seeds, grid), grid)
        if not sides or sum(grown) >= cfg.extend:
            return grid
        for side in sorted(sides)[: cfg.extend - sum(grown)]:
            grown[0 if side < 0 else 1] += 1


def boundary_seeds(draw: Draw, design: Experiment) -> list[int]:
    """The seeds the usable boundary is walked on, as the protocol's ``max_lr.seeds`` take
    them: as many of the draw's curve seeds as it has of its curve's, the rest A/B seeds (its
    seeds 0–4 are three A/B and two curve seeds; 3–6 would be four curve seeds)."""
    wanted = (design.max_lr.seeds if design.max_lr else None) or design.seeds
    n_curve = sum(seed in set(design.curve_seeds()) for seed in wanted)
    return [*draw.ab[: len(wanted) - n_curve], *draw.curve[:n_curve]]


def _curves_on(curves: ref.Curves, seeds: Sequence[int], grid: Sequence[float]) -> dict:
    """``{seed: [(lr, selection loss)]}`` on ``grid``, as the curve stage sees them."""
    return {s: [(lr, float(curves.loss_of(s)[curves.row(lr)])) for lr in grid] for s in seeds}


def vertex(curves: ref.Curves, seeds: Sequence[int], grid: Sequence[float]) -> Chosen:
    """The estimator the curve stage used until it was held to real runs: each seed's
    quadratic in log2 LR through the 5 points around its lowest, its vertex clipped to that
    window, the mean over seeds in log2; flagged where a seed's vertex was clipped."""
    logs, clipped = [], False
    for curve in _curves_on(curves, seeds, grid).values():
        xs, ys = np.log2([lr for lr, _ in curve]), np.array([loss for _, loss in curve])
        low = int(np.argmin(ys))
        start = min(max(low - 2, 0), max(len(xs) - 5, 0))
        window = slice(start, start + 5)
        a, b, _ = np.polyfit(xs[window], ys[window], 2)
        found = float(xs[low]) if a <= 0 else -b / (2 * a)
        logs.append(float(np.clip(found, xs[window][0], xs[window][-1])))
        clipped = clipped or not xs[window][0] < found < xs[window][-1]
    return Chosen(2.0 ** float(np.mean(logs)), clipped)


WINDOW = 0.5  # octaves each side of a point in smoothed_argmin's running mean


def smoothed_argmin(curves: ref.Curves, seeds: Sequence[int], grid: Sequence[float]) -> Chosen:
    """The curve stage's estimator before bagging: the lowest point of the seed-mean curve
    after a running mean over one octave (:data:`WINDOW` each side), a grid's ends no
    candidates (their window is cut in half)."""
    rows = [curves.row(lr) for lr in grid]
    means = curves.select[np.ix_(rows, curves.columns(seeds))].mean(axis=1)
    logs = np.log2(grid)
    near = np.abs(logs[:, None] - logs[None, :]) <= WINDOW + 1e-9
    smoothed = (near @ means) / near.sum(axis=1)
    if len(grid) > 2:
        smoothed[[0, -1]] = np.inf
    at_end = int(np.argmin(means)) in (0, len(grid) - 1)
    return Chosen(float(grid[int(np.argmin(smoothed))]), at_end)


def grid_argmin(curves: ref.Curves, seeds: Sequence[int], grid: Sequence[float]) -> Chosen:
    """The grid point of the lowest seed-mean loss."""
    lr = ref.mean_argmin(curves, seeds, grid)
    return Chosen(lr, lr in (grid[0], grid[-1]))


def refined_argmin(curves: ref.Curves, seeds: Sequence[int], grid: Sequence[float]) -> Chosen:
    """The grid argmin of the seed mean, refined by a next stage: its two neighbours half a
    grid step away (2^(±1/4)) run on the same seeds, and the lowest mean of the three."""
    centre = grid_argmin(curves, seeds, grid)
    row = curves.row(centre.lr)
    near = [float(lr) for lr in curves.lrs[max(row - 1, 0) : row + 2]]
    return Chosen(ref.mean_argmin(curves, seeds, near), centre.at_edge)


def bagged_argmin(curves: ref.Curves, seeds: Sequence[int], grid: Sequence[float]) -> Chosen:
    """The curve stage's estimator (:func:`ablate.core.optimum.variant_optimum`): the grid
    argmin of the seed mean, bagged, the mean of its log2 LR over bootstrap resamples of the
    seeds (an LR between grid points where the resamples disagree); at an edge where the plain
    argmin is a grid end."""
    found = variant_optimum(_curves_on(curves, seeds, grid))
    assert found is not None
    return Chosen(found.value, not found.inside)


OPTIMA: dict[str, tuple[str, OptimumEstimator]] = {
    "bagged_argmin": ("argmin of the seed mean, log2 LR averaged over resamples", bagged_argmin),
    "smoothed_argmin": ("lowest one-octave running mean (the one before)", smoothed_argmin),
    "vertex": ("quadratic vertex of 5 points around each seed's lowest (the first)", vertex),
    "grid_argmin": ("argmin of the seed-mean curve on the √2 grid", grid_argmin),
    "refined_argmin": ("that argmin, refined by its 2^(±1/4) neighbours", refined_argmin),
}


@dataclass(frozen=True)
class Replay:
    """One draw under one optimum estimator: per norm the log2 errors of the LR trained at
    and of the estimate, the tuned comparison's matched differences, the cross-over's mean Δ
    and the usable boundary's log2 error."""

    chosen: dict[str, float]  # variant -> the LR trained at (:func:`trained_lr` of the estimate)
    errors: dict[str, float]  # variant -> log2(chosen / reference optimum)
    estimate_errors: dict[str, float]  # variant -> log2(estimate, unsnapped / reference optimum)
    regrets: dict[str, float]  # variant -> expected loss at the chosen LR over the optimum's
    at_edge: bool
    diffs: np.ndarray  # per A/B seed, added ones after: second at its LR − first at its own (test)
    cross: dict[str, np.ndarray]  # variant whose chosen LR both ran at -> per-seed Δ there
    shared: np.ndarray  # per A/B seed (not added ones), Δ at the file's shared LR (nearest)
    target: float  # Δ with each norm where it trained, from all of the truth's seeds
    boundary_errors: dict[str, float]  # variant -> log2(median walked usable edge / truth's)
    bracket_errors: dict[str, float]  # the same, each seed bracketed by factor-2 moves


@dataclass(frozen=True)
class Truth:
    """The reference's answers from all its seeds."""

    optima: dict[str, float]
    delta: float  # second − first on test, each at its optimum, mean over seeds
    usable: dict[str, float]
    expected: dict[str, dict[float, float]]  # variant -> lattice LR -> expected selection loss
    optimum_interval: dict[str, tuple[float, float]]  # the optimum's own 95% interval
    tested: dict[str, dict[float, float]]  # variant -> lattice LR -> expected test loss

    def regret(self, variant: str, lr: float) -> float:
        """The expected loss at lattice LR ``lr`` above that at the variant's optimum."""
        curve = self.expected[variant]
        return curve[lr] - curve[self.optima[variant]]

    def delta_at(self, first_lr: float, second_lr: float) -> float:
        """Δ (second − first, test) with each norm at a lattice LR of its own: what a tuned
        comparison that trained there measures."""
        first, second = self.tested
        return self.tested[second][second_lr] - self.tested[first][first_lr]

    def main_effect_at(self, first_lr: float, second_lr: float) -> float:
        """The norm's effect over the 2×2 of two lattice LRs (both norms at both, test): the
        mean of Δ at ``first_lr`` and Δ at ``second_lr``, what the report's primary estimates
        with each norm's tuned LR there."""
        return (self.delta_at(first_lr, first_lr) + self.delta_at(second_lr, second_lr)) / 2

    @property
    def main_effect(self) -> float:
        """:meth:`main_effect_at` the optima: the primary estimand's answer."""
        first, second = self.tested
        return self.main_effect_at(self.optima[first], self.optima[second])


def reference_truth(curves: dict[str, ref.Curves], band: float) -> Truth:
    """Optima, the tuned Δ and the usable boundaries from every seed of the reference."""
    first, second = list(curves)
    optima = {v: ref.optimum(c) for v, c in curves.items()}
    seeds = curves[first].seeds
    diffs = ref.paired_test_delta(
        curves[first], curves[second], optima[first], optima[second], seeds
    )
    usable = {v: ref.usable_boundary(c, seeds, band) for v, c in curves.items()}
    expected = {
        v: dict(zip(c.lrs.tolist(), c.select.mean(axis=1).tolist(), strict=True))
        for v, c in curves.items()
    }
    tested = {
        v: dict(zip(c.lrs.tolist(), c.test.mean(axis=1).tolist(), strict=True))
        for v, c in curves.items()
    }
    intervals = {}
    for v, c in curves.items():
        found = ref.bootstrapped(lambda s, c=c: ref.optimum(c, s), seeds)
        intervals[v] = (found.low, found.high)
    return Truth(optima, float(np.mean(diffs)), usable, expected, intervals, tested)


def replay(
    curves: dict[str, ref.Curves],
    draw: Draw,
    estimator: OptimumEstimator,
    design: Experiment,
    truth: Truth,
    band: float,
) -> Replay:
    """The protocol on one draw with one optimum estimator."""
    first, second = list(curves)
    chosen = {
        v: estimator(c, draw.curve, protocol_grid(c, draw.curve, design)) for v, c in curves.items()
    }
    at = {v: trained_point(curves[v], chosen[v].lr) for v in curves}
    ab = [*draw.ab, *draw.added]
    diffs = ref.paired_test_delta(curves[first], curves[second], at[first], at[second], ab)
    cross = {
        v: ref.paired_test_delta(curves[first], curves[second], lr, lr, ab) for v, lr in at.items()
    }
    fixed = curves[first].nearest(design.base.train.lr)
    shared = ref.paired_test_delta(curves[first], curves[second], fixed, fixed, draw.ab)
    seeds = boundary_seeds(draw, design)

    def usable(walk: bool) -> dict[str, float]:
        return {
            v: ref.median_found(
                [ref.usable_edge(c.lrs, c.loss_of(s), at[v], band, walk) for s in seeds]
            )
            for v, c in curves.items()
        }

    walked, bracketed = usable(True), usable(False)
    return Replay(
        at,
        {v: math.log2(at[v] / truth.optima[v]) for v in curves},
        {v: math.log2(chosen[v].lr / truth.optima[v]) for v in curves},
        {v: truth.regret(v, at[v]) for v in curves},
        any(c.at_edge for c in chosen.values()),
        diffs,
        cross,
        shared,
        truth.delta_at(at[first], at[second]),
        {v: math.log2(walked[v] / truth.usable[v]) for v in curves},
        {v: math.log2(bracketed[v] / truth.usable[v]) for v in curves},
    )


@dataclass(frozen=True)
class Judged:
    """The tuned comparisons of many draws, judged as the report judges one: 95% t interval,
    the interval at the test's own level, p of Δ = 0 and the three-way verdict at
    ``min_effect``."""

    mean: np.ndarray
    covered: np.ndarray  # the 95% interval holds the truth
    covered_at_level: np.ndarray  # the report's interval at the test's level holds it
    words: np.ndarray


def judge(
    diffs: np.ndarray,
    truth: float | np.ndarray,
    min_effect: float,
    alpha: float = ALPHA,
    other_p: np.ndarray | None = None,
) -> Judged:
    """:class:`Judged` for matched differences (draw, seed) against ``truth`` (one, or per
    draw), vectorised over the draws, tested at ``alpha``: alone (one comparison at α 0.05 by
    default, as the one-look replay judges), or with ``other_p`` (per draw, the p of the
    comparison the report judges beside it) as the report judges a pair, its p Holm-adjusted
    with that one, its TOST p Bonferroni-adjusted over the two. The interval at the test's
    level is the one the report prints under ``decide:``
    (:func:`ablate.report.summary._looks_interval`): 1 − α / family, and the TOST's
    1 − 2α / family where the verdict is *equivalent*."""
    from scipy.stats import ttest_1samp

    result = ttest_1samp(diffs, 0.0, axis=1)

    def holds(level: float) -> np.ndarray:
        interval = result.confidence_interval(level)
        return (interval.low <= truth) & (truth <= interval.high)

    p = np.nan_to_num(result.pvalue, nan=1.0)
    family = 1 if other_p is None else 2
    if other_p is not None:
        p = holm_pair(p, other_p)
    tost = np.minimum(1.0, tost_p(diffs, min_effect) * family)
    found = words(p, tost, alpha)
    at_level = np.where(
        found == "equivalent", holds(1 - 2 * alpha / family), holds(1 - alpha / family)
    )
    return Judged(diffs.mean(axis=1), holds(0.95), at_level, found)


def tost_p(diffs: np.ndarray, min_effect: float) -> np.ndarray:
    """The TOST p of |Δ| ≥ ``min_effect`` for matched differences along the last axis: the
    larger of the two one-sided t-tests' p."""
    from scipy.stats import ttest_1samp

    above = ttest_1samp(diffs, -min_effect, axis=-1, alternative="greater").pvalue
    below = ttest_1samp(diffs, min_effect, axis=-1, alternative="less").pvalue
    return np.maximum(above, below)


def words(p_value: np.ndarray, tost: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """The three words of the tests this replay judges by (``decide:``'s stopping rule until
    2026-12-07, which now stops on the plan's primary verdict: :mod:`research.sequential`),
    each p already adjusted for the family: ``different`` below α, else ``equivalent`` where
    the TOST is below α, else ``inconclusive``."""
    p_value, tost = np.asarray(p_value), np.asarray(tost)
    equivalent = np.where(tost < alpha, "equivalent", "inconclusive")
    return np.where(p_value < alpha, "different", equivalent)


def holm_pair(p: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Holm's adjustment of ``p`` in a family of two with ``other`` (elementwise)."""
    return np.minimum(1.0, np.where(p <= other, 2 * p, np.maximum(2 * other, p)))


def at_stops(
    diffs: np.ndarray, used: np.ndarray, judged: Callable[[np.ndarray, np.ndarray], Judged]
) -> Judged:
    """``judged(differences, rows)`` of each draw's first ``used[draw]`` matched differences
    (draw, seed): the draws that stopped at one count (``rows``, a mask) judged together."""
    parts = {
        int(count): judged(diffs[used == count, :count], used == count) for count in np.unique(used)
    }
    fields = {}
    for name in ("mean", "covered", "covered_at_level", "words"):
        column = np.empty(len(diffs), dtype=getattr(parts[int(used[0])], name).dtype)
        for count, part in parts.items():
            column[used == count] = getattr(part, name)
        fields[name] = column
    return Judged(**fields)


@dataclass(frozen=True)
class Decided:
    """The tuned A/B of many draws as ``decide:`` runs it (:func:`decide_replay`)."""

    seeds: np.ndarray  # per draw, the A/B seeds it stopped at
    tuned: Judged  # the tuned Δ on them, judged at each look's level as the report does
    covers_target: np.ndarray  # its 95% interval holds Δ where the draw trained (all seeds)
    holds: np.ndarray  # *different* with the cross-over on the same seeds holding


def decide_replay(
    replays: Sequence[Replay], counts: Sequence[int], truth: float, min_effect: float
) -> Decided:
    """``decide:``'s rule on each replay's tuned Δ (its A/B seeds, then the added ones in
    order): a look at each of ``counts`` seeds, the tuned Δ tested at α / looks
    (:func:`ablate.core.sequential.look_alpha`) beside the shared-LR comparison on the A/B
    seeds (:func:`judge`: the report's family of two), stopped at the first look where it is
    *different* or *equivalent*. The cross-over (each norm's LR shared, the same seeds) is
    judged on the seeds the draw stopped at, at α 0.05 as the report judges it."""
    from scipy.stats import ttest_1samp

    level = look_alpha(len(counts))
    tuned = np.stack([r.diffs for r in replays])
    at_shared_lr = np.stack([r.shared for r in replays])
    other = np.nan_to_num(ttest_1samp(at_shared_lr, 0.0, axis=1).pvalue, nan=1.0)
    targets = np.array([r.target for r in replays])
    used = np.full(len(tuned), counts[-1])
    open_ = np.ones(len(tuned), dtype=bool)
    for count in counts[:-1]:
        found = judge(tuned[:, :count], truth, min_effect, level, other).words
        stopped = open_ & (found != "inconclusive")
        used[stopped] = count
        open_ &= ~stopped
    judged = at_stops(tuned, used, lambda d, rows: judge(d, truth, min_effect, level, other[rows]))
    conditional = at_stops(tuned, used, lambda d, rows: judge(d, targets[rows], min_effect))
    shared = [
        at_stops(
            np.stack([r.cross[v] for r in replays]), used, lambda d, _: judge(d, truth, min_effect)
        )
        for v in replays[0].cross
    ]
    return Decided(used, judged, conditional.covered, crossover_holds(judged, shared))


def crossover_holds(tuned: Judged, shared: Sequence[Judged]) -> np.ndarray:
    """Per draw, whether the tuned Δ would be stated as *different* by the rule reports used
    before the analysis plan (:mod:`ablate.report.plan`): the tuned verdict and both shared
    settings' *different*, all with one sign."""
    signs = [np.sign(j.mean) for j in shared]
    same = np.all([s == np.sign(tuned.mean) for s in signs], axis=0)
    different = np.all([j.words == "different" for j in shared], axis=0)
    return (tuned.words == "different") & different & same


@dataclass(frozen=True)
class Primary:
    """The 2×2 of many draws as ``decide:`` runs it (:func:`primary_replay`): per draw."""

    seeds: np.ndarray  # the A/B seeds it stopped at
    mean: np.ndarray  # the main effect's mean there
    words: np.ndarray  # exceeds, differs, equivalent or inconclusive
    excludes: np.ndarray  # its interval at the primary's level excludes 0
    covered: np.ndarray  # its 95% t interval holds the truth's main effect
    covered_at_level: np.ndarray  # its interval at the primary's level holds it
    covers_target: np.ndarray  # its 95% interval holds the main effect where the draw trained


def main_effects(replays: Sequence[Replay]) -> np.ndarray:
    """Per draw and A/B seed (added ones after), the norm's main effect over the cross-over's
    2×2: the mean of Δ at each norm's trained LR, the report's primary quality estimand."""
    return np.stack([np.mean(list(r.cross.values()), axis=0) for r in replays])


def primary_replay(
    replays: Sequence[Replay], counts: Sequence[int], truth: Truth, min_effect: float
) -> Primary:
    """``decide:``'s rule on each replay's 2×2 (:mod:`research.sequential`'s vectorised
    :func:`~research.sequential.sequential_words`, tested against the report's verdict module):
    a look at each of ``counts`` seeds, the main effect's t interval at the primary's level
    (its share of α over the looks) read against ``min_effect``, stopped at the first look
    where it is not inconclusive. Scored against the truth's main effect at its optima and
    at the LRs each draw trained at."""
    effects = main_effects(replays)
    level = primary_level(len(counts))
    found, excluded, used = sequential_words(effects[:, :, None], list(counts), min_effect, level)
    first, second = truth.tested
    targets = np.array([truth.main_effect_at(r.chosen[first], r.chosen[second]) for r in replays])
    mean, at_level = np.empty(len(effects)), np.zeros(len(effects), dtype=bool)
    plain_low, plain_high = np.empty(len(effects)), np.empty(len(effects))
    for count in np.unique(used):
        rows = used == count
        part = effects[rows, :count]
        mean[rows] = part.mean(axis=1)
        low, high = t_bounds(part, 0.95)
        plain_low[rows], plain_high[rows] = low, high
        low, high = t_bounds(part, level)
        at_level[rows] = (low <= truth.main_effect) & (truth.main_effect <= high)
    plain = (plain_low <= truth.main_effect) & (truth.main_effect <= plain_high)
    return Primary(
        seeds=used,
        mean=mean,
        words=found[:, 0],
        excludes=excluded[:, 0],
        covered=plain,
        covered_at_level=at_level,
        covers_target=(plain_low <= targets) & (targets <= plain_high),
    )


def t_bounds(diffs: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """The Student-t interval at ``level`` of each row's mean (matched differences along the
    last axis)."""
    from scipy.stats import ttest_1samp

    interval = ttest_1samp(diffs, 0.0, axis=-1).confidence_interval(level)
    return interval.low, interval.high


def primary_row(found: Primary, draws: int) -> dict[str, float]:
    """The scores of the 2×2 as ``decide:`` runs it over ``draws`` draws."""
    return {
        "draws": draws,
        "A/B seeds, mean": float(found.seeds.mean()),
        "decided": float(np.mean(found.words != "inconclusive")),
        "CI covers": float(found.covered.mean()),
        "CI at the primary's level covers": float(found.covered_at_level.mean()),
        "CI covers the 2×2 where trained": float(found.covers_target.mean()),
        "main effect, mean": float(found.mean.mean()),
        "differs from 0": float(found.excludes.mean()),
        "exceeds ±m": float(np.mean(found.words == "exceeds")),
        "equivalent within ±m": float(np.mean(found.words == "equivalent")),
    }


@dataclass(frozen=True)
class Scores:
    """The replay's scores: per estimator and norm (one look at the A/B seeds), and per
    estimator the tuned A/B as ``decide:`` ran it before the analysis plan and the 2×2 as it
    runs it now (both empty where the seeds are too few)."""

    rows: pd.DataFrame
    decided: pd.DataFrame
    primary: pd.DataFrame


def decide_counts(design: Experiment, seeds: int) -> list[int]:
    """The seed counts ``decide:`` looks at, where a reference of ``seeds`` seeds holds its
    curve seeds and ``max_seeds`` A/B seeds beside them; else none."""
    decide, n_curve = design.decide, len(design.curve_seeds())
    if decide is None or n_curve + decide.max_seeds > seeds:
        return []
    return looks(len(design.seeds), decide)


def score_rows(
    curves: dict[str, ref.Curves],
    design: Experiment,
    band: float = ref.BAND,
    truth: Truth | None = None,
    limit: int = DRAW_LIMIT,
    estimators: Mapping[str, tuple[str, OptimumEstimator]] = OPTIMA,
) -> Scores:
    """One row per optimum estimator (of ``estimators``) and norm over the disjoint draws
    (:func:`disjoint_draws` up to ``limit``), scored against ``truth`` (default: the
    reference's own answers from all of ``curves``' seeds); and where the reference has the
    seeds, one row per estimator with ``decide:``'s seeds (:func:`decided_row`)."""
    truth = truth or reference_truth(curves, band)
    if list(curves) != list(truth.tested):  # Δ is second − first: one order for both
        raise ValueError(f"norms in the order {list(curves)}, the truth's {list(truth.tested)}")
    seeds = seeds_of(curves)
    counts = decide_counts(design, len(seeds))
    n_ab = len(design.seeds)
    added = counts[-1] - n_ab if counts else 0
    draws = disjoint_draws(seeds, len(design.curve_seeds()), n_ab, limit, added)
    rows, decided, primary = [], [], []
    for name, (what, estimator) in estimators.items():
        replays = [replay(curves, d, estimator, design, truth, band) for d in draws]
        effect = design.analysis.min_effect
        tuned = np.stack([r.diffs for r in replays])
        cross = [np.stack([r.cross[v] for r in replays]) for v in curves]
        judged = judge(tuned[:, :n_ab], truth.delta, effect)
        shared = [judge(c[:, :n_ab], truth.delta, effect) for c in cross]
        holds = crossover_holds(judged, shared)
        if counts:
            found = decide_replay(replays, counts, truth.delta, effect)
            decided.append({"estimator": name, "what": what, **decided_row(found, len(replays))})
            now = primary_replay(replays, counts, truth, effect)
            primary.append({"estimator": name, "what": what, **primary_row(now, len(replays))})
        for variant in curves:
            errors = np.array([r.errors[variant] for r in replays])
            estimated = np.array([r.estimate_errors[variant] for r in replays])
            bounds = np.array([r.boundary_errors[variant] for r in replays])
            bracketed = np.array([r.bracket_errors[variant] for r in replays])
            low, high = truth.optimum_interval[variant]
            chosen = np.array([r.chosen[variant] for r in replays])
            rows.append(
                {
                    "estimator": name,
                    "what": what,
                    "variant": variant,
                    "draws": len(replays),
                    "trained at in 2^(1/4)": float(np.mean(np.abs(errors) <= QUARTER)),
                    "estimate in 2^(1/4)": float(np.mean(np.abs(estimated) <= QUARTER)),
                    "trained at in truth's CI": float(
                        np.mean((chosen >= low * (1 - 1e-9)) & (chosen <= high * (1 + 1e-9)))
                    ),
                    "bias (log2)": float(estimated.mean()),
                    "regret (nats)": float(np.mean([r.regrets[variant] for r in replays])),
                    "at an edge": float(np.mean([r.at_edge for r in replays])),
                    "Δ CI covers": float(judged.covered.mean()),
                    "Δ mean": float(judged.mean.mean()),
                    "different": float(np.mean(judged.words == "different")),
                    "different, cross-over holds": float(holds.mean()),
                    "Δ, both at its LR": float(
                        np.mean([r.cross[variant][:n_ab].mean() for r in replays])
                    ),
                    "usable in 2^(1/4)": float(np.mean(np.abs(bounds) <= QUARTER)),
                    "if bracketed": float(np.mean(np.abs(bracketed) <= QUARTER)),
                }
            )
    return Scores(pd.DataFrame(rows), pd.DataFrame(decided), pd.DataFrame(primary))


def decided_row(found: Decided, draws: int) -> dict[str, float]:
    """The scores of the tuned A/B as ``decide:`` ran it over ``draws`` draws."""
    judged = found.tuned
    return {
        "draws": draws,
        "A/B seeds, mean": float(found.seeds.mean()),
        "decided": float(np.mean(judged.words != "inconclusive")),
        "Δ CI covers": float(judged.covered.mean()),
        "Δ CI at the looks' level covers": float(judged.covered_at_level.mean()),
        "Δ CI covers Δ where trained": float(found.covers_target.mean()),
        "Δ mean": float(judged.mean.mean()),
        "different": float(np.mean(judged.words == "different")),
        "equivalent": float(np.mean(judged.words == "equivalent")),
        "different, cross-over holds": float(found.holds.mean()),
    }


TRUTH_SEEDS = 64  # simulated seeds whose median usable edge is a simulated truth's answer


def simulated_truth(
    section: dict[str, Any],
    base: RunConfig,
    lattice: Sequence[float],
    variants: Sequence[str],
    band: float,
) -> Truth:
    """The answers of the simulator at ``section``, on the reference's lattice: each norm's
    optimum (the lowest expected loss, excursions included), Δ there (seed effects cancel),
    and the median usable edge of :data:`TRUTH_SEEDS` simulated seeds walked from it."""
    sim = SimulateConfig(**section)
    expected = {v: np.array([mean_loss(sim.truth(v), lr) for lr in lattice]) for v in variants}
    optima = {v: float(lattice[int(np.argmin(e))]) for v, e in expected.items()}
    first, second = variants[:2]
    delta = float(expected[second].min() - expected[first].min())
    curves = {v: dict(zip(list(lattice), e.tolist(), strict=True)) for v, e in expected.items()}
    many = fit.simulated_curves(base, section, lattice, range(TRUTH_SEEDS), variants, seed=10**6)
    usable = {
        v: ref.median_found(
            [ref.usable_edge(c.lrs, c.loss_of(s), optima[v], band) for s in c.seeds]
        )
        for v, c in many.items()
    }
    exact = {v: (lr, lr) for v, lr in optima.items()}  # a stated truth: no sampling error
    return Truth(optima, delta, usable, curves, exact, curves)  # its test split is val


def simulated_scores(
    section: dict[str, Any],
    design: Experiment,
    base: RunConfig,
    lattice: Sequence[float],
    studies: Sequence[dict[str, ref.Curves]],
    band: float = ref.BAND,
    draws: int = STUDY_DRAWS,
    estimators: Mapping[str, tuple[str, OptimumEstimator]] = OPTIMA,
) -> list[Scores]:
    """:func:`score_rows` on each of ``studies``, reference-shaped studies drawn from the
    simulator at ``section`` (:func:`research.fit_reference.simulated_curves`; ``draws``
    disjoint draws of each), against its known truth."""
    truth = simulated_truth(section, base, lattice, list(design.variants), band)
    return [score_rows(study, design, band, truth, draws, estimators) for study in studies]


def mean_scores(found: Sequence[Scores]) -> Scores:
    """Each share of :func:`simulated_scores` averaged over the studies."""

    def mean(frames: list[pd.DataFrame], keys: list[str]) -> pd.DataFrame:
        if all(f.empty for f in frames):
            return pd.DataFrame()
        return pd.concat(frames).groupby(keys, sort=False).mean(numeric_only=True).reset_index()

    return Scores(
        mean([f.rows for f in found], ["estimator", "what", "variant"]),
        mean([f.decided for f in found], ["estimator", "what"]),
        mean([f.primary for f in found], ["estimator", "what"]),
    )


NORM_BARS = ("trained at in 2^(1/4)", "usable in 2^(1/4)")  # the shares the bars read per norm
PAIR_BARS = ("Δ CI covers", "different")  # and of the pair, at one look
DECIDED_BARS = ("Δ CI covers", "Δ CI at the looks' level covers", "different")  # decide: before
PRIMARY_BARS = ("CI covers", "CI at the primary's level covers", "differs from 0")  # and now


def spread_rows(found: Sequence[Scores], estimator: str = "bagged_argmin") -> pd.DataFrame:
    """How the shares the bars read move from one simulated study to the next, for
    ``estimator``: their mean over the studies, the SD over the studies (against the
    simulator's fixed truth: a rough guide to how far a share read on one reference of as many
    seeds, whose answer also moves with its seeds, can lie from its mean) and the standard
    error of the mean (the Monte Carlo error of the simulator's figure)."""
    one_look = pd.concat([f.rows[f.rows["estimator"] == estimator] for f in found])
    decided = [f.decided[f.decided["estimator"] == estimator] for f in found if len(f.decided)]
    norms = list(one_look["variant"].unique())
    parts = [
        ("one look", v, c, one_look.loc[one_look["variant"] == v, c])
        for v in norms
        for c in NORM_BARS
    ]
    parts += [
        ("one look", "both", c, one_look.loc[one_look["variant"] == norms[0], c]) for c in PAIR_BARS
    ]
    if decided:
        frame = pd.concat(decided)
        parts += [("tuned Δ, `decide:` before", "both", c, frame[c]) for c in DECIDED_BARS]
    primary = [f.primary[f.primary["estimator"] == estimator] for f in found if len(f.primary)]
    if primary:
        frame = pd.concat(primary)
        parts += [("the 2×2, `decide:` now", "both", c, frame[c]) for c in PRIMARY_BARS]
    return pd.DataFrame(
        [
            {
                "replay": replay,
                "variant": variant,
                "share": column,
                "mean": f"{shares.mean():.1%}",
                "SD over studies": f"{shares.std(ddof=1):.1%}",
                "SE of the mean": f"{shares.std(ddof=1) / math.sqrt(len(shares)):.1%}",
            }
            for replay, variant, column, shares in parts
        ]
    )


def truth_rows(curves: dict[str, ref.Curves], band: float = ref.BAND) -> pd.DataFrame:
    """The reference's answers: LRs with percentile bootstrap intervals over its seeds, the
    differences at fixed LRs with paired t intervals."""
    first, second = list(curves)
    seeds = curves[first].seeds
    rows = []
    for variant, c in curves.items():
        answers = {
            "LR optimum": ref.bootstrapped(lambda s, c=c: ref.optimum(c, s), seeds),
            f"usable-LR boundary (within {band:g})": ref.bootstrapped(
                lambda s, c=c: ref.usable_boundary(c, s, band), seeds
            ),
            "divergence edge": ref.bootstrapped(
                lambda s, c=c: ref.divergence_boundary(c, s), seeds
            ),
            "learned at all (unigram floor − 0.1)": ref.bootstrapped(
                lambda s, c=c: ref.learned_boundary(c, s), seeds
            ),
        }
        rows += [{"variant": variant, "answer": k, **vars(a)} for k, a in answers.items()]

    optima = {v: ref.optimum(c) for v, c in curves.items()}
    settings = {
        f"Δ {second} − {first}, each at its optimum (test, paired t)": (
            optima[first],
            optima[second],
        ),
        f"Δ at {first}'s optimum (paired t)": (optima[first], optima[first]),
        f"Δ at {second}'s optimum (paired t)": (optima[second], optima[second]),
    }
    for name, (first_lr, second_lr) in settings.items():
        diffs = ref.paired_test_delta(curves[first], curves[second], first_lr, second_lr, seeds)
        rows.append({"variant": "both", "answer": name, **vars(paired_t(diffs))})
    at_both = [
        ref.paired_test_delta(curves[first], curves[second], lr, lr, seeds)
        for lr in optima.values()
    ]
    rows.append(
        {
            "variant": "both",
            "answer": "Δ at matched settings: the 2×2 of the optima (paired t)",
            **vars(paired_t(np.mean(at_both, axis=0))),
        }
    )
    return pd.DataFrame(rows)


def split_optima(
    curves: ref.Curves, size: int, once: bool = False, block: int = 100_000
) -> tuple[np.ndarray, np.ndarray]:
    """For every way to take ``size`` of ``curves``' seeds (with ``once``, each split into two
    once: only the ways that hold the first seed), the lattice row of the lowest seed-mean
    selection loss of those seeds and of the rest, as :func:`research.reference.optimum`
    finds it (the lowest seed sum, the same argmin), by matrix products over ``block`` ways
    at a time: every split of 24 seeds in two is 1,352,078 of them."""
    n = len(curves.seeds)
    loss = curves.select.T  # seeds × lattice
    total = loss.sum(axis=0)
    ways = (
        ((0, *w) for w in itertools.combinations(range(1, n), size - 1))
        if once
        else itertools.combinations(range(n), size)
    )
    chosen, rest = [], []
    while batch := list(itertools.islice(ways, block)):
        mask = np.zeros((len(batch), n))
        mask[np.arange(len(batch))[:, None], np.array(batch)] = 1.0
        sums = mask @ loss
        chosen.append(np.argmin(sums, axis=1))
        rest.append(np.argmin(total - sums, axis=1))
    return np.concatenate(chosen), np.concatenate(rest)


def repeat_rows(curves: dict[str, ref.Curves], n_curve: int) -> pd.DataFrame:
    """How often the reference's own optimum (the plain argmin over its whole lattice) repeats
    within 2^(1/4), per norm: from one half of its seeds against the other half (every split),
    and from ``n_curve`` seeds against the rest and against all (every choice of them),
    :func:`split_optima`. It says what a curve on ``n_curve`` seeds can be asked: those rows
    run every lattice point, twice the curve's, though an estimator that knew the curve's
    shape could do better."""
    rows = []
    for variant, c in curves.items():
        n, log_lrs = len(c.seeds), np.log2(c.lrs)
        half, other = split_optima(c, n // 2, once=True)
        few, rest = split_optima(c, n_curve)
        full = np.full_like(few, c.row(ref.optimum(c)))
        checks = {
            f"{n // 2} seeds against the other {n - n // 2}": (half, other),
            f"{n_curve} seeds against the other {n - n_curve}": (few, rest),
            f"{n_curve} seeds against all {n}": (few, full),
        }
        for name, (found, answer) in checks.items():
            within = np.abs(log_lrs[found] - log_lrs[answer]) <= QUARTER
            rows.append(
                {
                    "variant": variant,
                    "optimum from": name,
                    "splits": len(found),
                    "within 2^(1/4)": f"{within.mean():.1%}",
                }
            )
    return pd.DataFrame(rows)


def curve_set_rows(curves: dict[str, ref.Curves], design: Experiment) -> pd.DataFrame:
    """How often the LR the curve stage trains at (:func:`bagged_argmin` on the protocol's
    grid, at its nearest 2^(1/4)) lies within 2^(1/4) of the reference's optimum, over every
    choice of the protocol's number of curve seeds (no Monte Carlo): against the answer of all
    the seeds, which holds the curve seeds, and against the answer of the rest, which does
    not; rows as in :func:`repeat_rows`."""
    n_curve = len(design.curve_seeds())
    rows = []
    for variant, c in curves.items():
        seeds = list(c.seeds)
        full, scores = ref.optimum(c), {"all": [], "rest": []}
        _, rests = split_optima(c, n_curve)  # in the order of itertools.combinations
        for chosen, rest in zip(itertools.combinations(seeds, n_curve), rests, strict=True):
            found = bagged_argmin(c, chosen, protocol_grid(c, chosen, design))
            at = trained_point(c, found.lr)
            scores["all"].append(within_quarter(at, full))
            scores["rest"].append(within_quarter(at, float(c.lrs[rest])))
        against = {"all": f"all {len(seeds)}", "rest": f"the other {len(seeds) - n_curve}"}
        for key, hits in scores.items():
            rows.append(
                {
                    "variant": variant,
                    "optimum from": f"the curve stage on {n_curve} seeds against {against[key]}",
                    "splits": len(hits),
                    "within 2^(1/4)": f"{np.mean(hits):.1%}",
                }
            )
    return pd.DataFrame(rows)


def repeat_markdown(curves: dict[str, ref.Curves], design: Experiment) -> str:
    """:func:`repeat_rows` and :func:`curve_set_rows`, each norm's rows together."""
    frame = pd.concat(
        [repeat_rows(curves, len(design.curve_seeds())), curve_set_rows(curves, design)]
    )
    order = frame["variant"].map(list(curves).index)
    return frame.iloc[order.argsort(kind="stable")].to_markdown(index=False)


def shape_rows(
    curves: dict[str, ref.Curves], simulated: Sequence[dict[str, ref.Curves]] = ()
) -> pd.DataFrame:
    """The reference's shape (:func:`research.fit_reference.shape_statistics`: noise
    below and above each optimum, the rise past it, non-monotone steps, the paired SD at the
    optima) with 95% percentile bootstrap intervals over its seeds, and, given studies drawn
    from the fitted simulator, their mean of each."""
    found = fit.shape_statistics(curves)
    intervals = fit.reference_intervals(curves)
    frame = pd.DataFrame(
        {
            "statistic": list(found),
            "reference": list(found.values()),
            "2.5%": [intervals[k][0] for k in found],
            "97.5%": [intervals[k][1] for k in found],
        }
    )
    if simulated:
        drawn = pd.DataFrame([fit.shape_statistics(s) for s in simulated]).mean()
        frame[f"fitted simulator ({len(simulated)} studies)"] = [drawn[k] for k in found]
    return frame


def paired_t(diffs: np.ndarray) -> ref.Answer:
    """The mean of matched differences with its 95% Student-t interval. The LRs stay where
    all seeds put them: a bootstrap that re-picked the optimum in each resample would pick
    the LRs where that resample's runs happened to land low, and narrow the interval."""
    from scipy.stats import ttest_1samp

    interval = ttest_1samp(diffs, 0.0).confidence_interval(0.95)
    return ref.Answer(float(diffs.mean()), float(interval.low), float(interval.high))


def percent_columns(frame: pd.DataFrame) -> list[str]:
    """The score columns that are shares of draws (printed as percentages)."""
    starts = (
        "trained at",
        "estimate in",
        "at an",
        "Δ CI",
        "different",
        "usable",
        "if bracketed",
        "decided",
        "equivalent",
        "CI ",
        "differs",
        "exceeds",
    )
    return [c for c in frame.columns if c.startswith(starts)]


def scores_markdown(scores: pd.DataFrame) -> str:
    """The scores as markdown: shares as percentages, seed counts to 2 decimals, the rest to
    4 decimals."""
    shown = scores.drop(columns=["what"]).copy()
    shares = percent_columns(shown)
    for column in shown.columns:
        if column in shares:
            shown[column] = shown[column].map(lambda x: f"{x:.1%}")
        elif column.startswith("A/B seeds"):
            shown[column] = shown[column].map(lambda x: f"{x:.2f}")
        elif shown[column].dtype == float and column != "draws":
            shown[column] = shown[column].map(lambda x: f"{x:+.4f}")
    shown["draws"] = shown["draws"].astype(int)
    return shown.to_markdown(index=False)


def scores_text(scores: Scores, design: Experiment) -> str:
    """The per-norm scores, and where replayed the tuned A/B with ``decide:``'s seeds under a
    line that says how it was judged."""
    text = scores_markdown(scores.rows)
    if scores.decided.empty:
        return text
    return (
        f"{text}\n\n{primary_caption(design)}\n\n{scores_markdown(scores.primary)}"
        f"\n\n{decide_caption(design)}\n\n{scores_markdown(scores.decided)}"
    )


def primary_caption(design: Experiment) -> str:
    """The line over the 2×2 replayed with ``decide:``'s seeds: how it was judged."""
    assert design.decide is not None
    counts = looks(len(design.seeds), design.decide)
    level = primary_level(len(counts))
    return (
        f"The 2×2 as `decide:` runs it: the norm's main effect (the mean of Δ at each norm's "
        f"trained LR, per seed), looks at {', '.join(map(str, counts))} A/B seeds, its t "
        f"interval at the primary's level ({level:.2%}: α {ALPHA:g} × the primary's share "
        f"{AnalysisConfig().primary_share:g} / {len(counts)} looks) read against "
        f"±{design.analysis.min_effect:g}, stopped once *exceeds*, *differs* or *equivalent*; "
        'scored against the reference\'s 2×2 at its optima ("CI covers", the unadjusted 95%) '
        'and at the LRs the draw trained at; "differs from 0" counts *differs* and *exceeds*:'
    )


def decide_caption(design: Experiment) -> str:
    """The line over the tuned A/B replayed as ``decide:`` ran it before 2026-12-07."""
    assert design.decide is not None
    counts = looks(len(design.seeds), design.decide)
    return (
        "The tuned A/B as `decide:` ran it before the analysis plan: looks at "
        f"{', '.join(map(str, counts))} A/B seeds, each at α {ALPHA:g}/{len(counts)}, judged as "
        "the report judged it beside the "
        f"shared-LR comparison on the first {len(design.seeds)} (at the reference's LR nearest "
        f"{design.base.train.lr:g}; p Holm-adjusted, TOST Bonferroni over the two), stopped "
        "once *different* or *equivalent*; its interval at the looks' level, the report's, at "
        f"1 − α/({len(counts)} looks × 2 comparisons); the cross-over judged on the seeds it "
        "stopped at:"
    )


def truth_markdown(truth: pd.DataFrame) -> str:
    """The reference's answers with their intervals as markdown: LRs to 3 significant digits,
    differences in nats to 4 decimals."""
    shown = truth.copy()
    delta = shown["answer"].str.startswith("Δ")
    for column in ("value", "low", "high"):
        shown[column] = [
            f"{x:+.4f}" if is_delta else f"{x:.3g}"
            for x, is_delta in zip(shown[column], delta, strict=True)
        ]
    shown = shown.rename(columns={"low": "2.5%", "high": "97.5%"})
    return shown.to_markdown(index=False, disable_numparse=True)


def main(argv: list[str] | None = None) -> None:
    """Score the estimators on the reference (and with ``--simulated``, on studies drawn from
    the fitted simulator) and print, or write into a doc's marked blocks, the tables."""
    parser = argparse.ArgumentParser(prog="python -m research.held_to_runs")
    parser.add_argument(
        "runs", type=Path, nargs="*", default=list(ref.REFERENCE_RUNS), help="runs.csv tables"
    )
    parser.add_argument("--protocol", type=Path, default=PROTOCOL, help="its curve: and analysis:")
    parser.add_argument("--band", type=float, default=ref.BAND, help="usable boundary's band")
    parser.add_argument(
        "--simulated", type=int, default=0, help="studies drawn from the fitted simulator"
    )
    parser.add_argument("--fitted", type=Path, default=fit.FITTED, help="its runtime.simulate")
    parser.add_argument(
        "--held-out",
        type=Path,
        nargs="+",
        default=[],
        help="runs.csv tables of seeds no estimator was chosen on: replayed against the truth",
    )
    parser.add_argument("--write", type=Path, default=None, help="a doc with the marked blocks")
    parser.add_argument("--out", type=Path, default=None, help="a markdown file for the tables")
    args = parser.parse_args(argv)
    design = load_experiment(args.protocol)
    curves = loaded(args.runs, design)
    fresh = loaded(args.held_out, design) if args.held_out else {}
    shared = set(seeds_of(fresh)) & set(seeds_of(curves)) if fresh else set()
    if shared:
        parser.error(f"--held-out: seeds {sorted(shared)} are the reference's too")
    truth = reference_truth(curves, args.band)
    tables = {
        "held-to-runs": truth_markdown(truth_rows(curves, args.band))
        + "\n\n"
        + scores_text(score_rows(curves, design, args.band, truth), design),
        "reference-repeat": repeat_markdown(curves, design),
    }
    if fresh:
        pooled = loaded([*args.runs, *args.held_out], design)
        tables["held-out"] = held_out_text(truth, fresh, pooled, design, args.band)
        pools = [*args.runs, *args.held_out]
        tables["rotation"] = rotation_markdown(rotation_rows(pools, design, args.band))
    drawn: list[dict[str, ref.Curves]] = []
    if args.simulated:
        section = yaml.safe_load(args.fitted.read_text(encoding="utf-8"))
        lattice = [float(lr) for lr in next(iter(curves.values())).lrs]
        base = load_experiment(REFERENCE_DESIGN).base
        n_seeds, variants = len(seeds_of(curves)), list(design.variants)
        drawn = [
            fit.simulated_curves(base, section, lattice, range(n_seeds), variants, k)
            for k in range(args.simulated)
        ]
        found = simulated_scores(section, design, base, lattice, drawn, args.band)
        tables["held-to-simulator"] = (
            scores_text(mean_scores(found), design)
            + f"\n\nThe shares the bars read for bagged_argmin, over the {args.simulated} "
            "studies:\n\n" + spread_rows(found).to_markdown(index=False, disable_numparse=True)
        )
    tables["reference-shape"] = shape_rows(curves, drawn).to_markdown(index=False, floatfmt=".4f")
    for block, text in tables.items():
        print(text, end="\n\n")
        if args.write is not None:
            write_block(args.write, block, text, command_line("research.held_to_runs", argv))
    if args.out is not None:
        args.out.write_text(report_text(args, tables), encoding="utf-8")


def loaded(paths: Path | Sequence[Path], design: Experiment) -> dict[str, ref.Curves]:
    """:func:`research.reference.load_reference` with the norms in the protocol's order
    (a table lists them in the order its runs happened to be written; Δ is second − first)."""
    curves = ref.load_reference(paths)
    if set(curves) != set(design.variants):
        raise ValueError(f"{paths}: norms {sorted(curves)}, the protocol's {list(design.variants)}")
    return {v: curves[v] for v in design.variants}


def seeds_of(curves: dict[str, ref.Curves]) -> tuple[int, ...]:
    """The seeds of a reference's curves."""
    return next(iter(curves.values())).seeds


@dataclass(frozen=True)
class HeldOut:
    """The held-out seeds replayed against the reference: the ``fresh`` (held-out) seeds, the
    ``answer_seeds`` their protocol is scored against (the pooled ones not held out), how many
    seeds there are in ``every``; their own answers (``fresh_truth``), every seed's
    (``pooled_truth``), the protocol's scores on the held-out seeds (``scores``) and on every
    seed (``pooled_scores``), and how often every seed's answer repeats (``repeats``)."""

    fresh_seeds: tuple[int, ...]
    answer_seeds: tuple[int, ...]
    every: int
    fresh_truth: pd.DataFrame
    pooled_truth: pd.DataFrame
    scores: Scores
    pooled_scores: Scores
    repeats: pd.DataFrame


def held_out(
    truth: Truth,
    fresh: dict[str, ref.Curves],
    pooled: dict[str, ref.Curves],
    design: Experiment,
    band: float = ref.BAND,
    estimators: Mapping[str, tuple[str, OptimumEstimator]] = OPTIMA,
) -> HeldOut:
    """The held-out seeds' own answers, the answers of every seed (``pooled``: the reference's
    and the held-out ones), and the protocol replayed on every disjoint draw of the held-out
    seeds (each of ``estimators``), scored against ``truth``: the reference's answers from its
    own seeds (:func:`reference_truth`; none of them held out). Then the protocol replayed on
    every seed, scored against the answers of them all, and how often those answers repeat
    (:func:`repeat_rows`): what more seeds in the answer change."""
    fresh_seeds = tuple(sorted(seeds_of(fresh)))
    return HeldOut(
        fresh_seeds=fresh_seeds,
        answer_seeds=tuple(sorted(set(seeds_of(pooled)) - set(fresh_seeds))),
        every=len(seeds_of(pooled)),
        fresh_truth=truth_rows(fresh, band),
        pooled_truth=truth_rows(pooled, band),
        scores=score_rows(fresh, design, band, truth, estimators=estimators),
        pooled_scores=score_rows(pooled, design, band, estimators=estimators),
        repeats=repeat_rows(pooled, len(design.curve_seeds())),
    )


def held_out_markdown(found: HeldOut, design: Experiment) -> str:
    """:class:`HeldOut` as captioned markdown tables."""
    fresh, every = span(found.fresh_seeds), found.every
    parts = {
        f"Seeds {fresh} alone": truth_markdown(found.fresh_truth),
        f"All {every} seeds": truth_markdown(found.pooled_truth),
        f"The protocol on seeds {fresh}, scored against the answers of seeds "
        f"{span(found.answer_seeds)}": scores_text(found.scores, design),
        f"The protocol on all {every} seeds, scored against their answers (the held-out seeds "
        "now in the answer too)": scores_text(found.pooled_scores, design),
        f"How often the answer of all {every} seeds repeats": found.repeats.to_markdown(
            index=False
        ),
    }
    return "\n\n".join(f"{caption}:\n\n{table}" for caption, table in parts.items())


def held_out_text(
    truth: Truth,
    fresh: dict[str, ref.Curves],
    pooled: dict[str, ref.Curves],
    design: Experiment,
    band: float = ref.BAND,
    estimators: Mapping[str, tuple[str, OptimumEstimator]] = OPTIMA,
) -> str:
    """:func:`held_out_markdown` of :func:`held_out`."""
    found = held_out(truth, fresh, pooled, design, band, estimators)
    return held_out_markdown(found, design)


ROTATED = (  # the score columns the rotation shows: shares of draws, then the regret
    "trained at in 2^(1/4)",
    "estimate in 2^(1/4)",
    "Δ CI covers",
    "different",
    "different, cross-over holds",
    "usable in 2^(1/4)",
    "regret (nats)",
)


def rotation_rows(
    pools: Sequence[Path],
    design: Experiment,
    band: float = ref.BAND,
    estimator: str = "bagged_argmin",
) -> pd.DataFrame:
    """The protocol replayed on each pool of seeds (a runs.csv table each) in turn, on every
    disjoint draw of its seeds, scored against the answers of all the other pools' seeds, so
    that no seed gives both the curve and the answer; one row per pool and norm, and per norm
    the mean over the pools (their draws are as many each)."""
    rows = []
    for i, pool in enumerate(pools):
        curves = loaded(pool, design)
        rest = loaded([p for j, p in enumerate(pools) if j != i], design)
        truth = reference_truth(rest, band)
        found = score_rows(curves, design, band, truth, estimators={estimator: OPTIMA[estimator]})
        for row in found.rows.to_dict("records"):
            rows.append(
                {
                    "curve and A/B seeds": span(seeds_of(curves)),
                    "answer from": span(seeds_of(rest)),
                    "variant": row["variant"],
                    "answer's optimum": f"{truth.optima[row['variant']]:.3g}",
                    "answer's Δ": f"{truth.delta:+.4f}",
                    "draws": row["draws"],
                    **{k: row[k] for k in ROTATED},
                }
            )
    frame = pd.DataFrame(rows)
    means = frame.groupby("variant", sort=False)[list(ROTATED)].mean().reset_index()
    means["curve and A/B seeds"] = "each pool in turn"
    means["answer from"] = "the others"
    means["draws"] = frame.groupby("variant", sort=False)["draws"].sum().to_numpy()
    return pd.concat([frame, means], ignore_index=True).fillna("")


def rotation_markdown(frame: pd.DataFrame) -> str:
    """The rotation's rows as markdown, shares as percentages, the regret to 4 decimals."""
    shown = frame.copy()
    for column in ROTATED:
        form = "{:.4f}" if column == "regret (nats)" else "{:.1%}"
        shown[column] = shown[column].map(form.format)
    return shown.to_markdown(index=False, disable_numparse=True)


def span(seeds: Sequence[int]) -> str:
    """Seeds as ranges where more than two run on without a gap ("0–7, 16–23"), the rest
    listed."""
    ordered = sorted(seeds)
    runs: list[list[int]] = []
    for seed in ordered:
        if runs and seed == runs[-1][-1] + 1:
            runs[-1].append(seed)
        else:
            runs.append([seed])
    parts = [[f"{r[0]}–{r[-1]}"] if len(r) > 2 else [str(s) for s in r] for r in runs]
    return ", ".join(part for group in parts for part in group)


def report_text(args: argparse.Namespace, tables: dict[str, str]) -> str:
    """The tables as one markdown page, with the command that made them."""
    runs = " ".join(map(str, args.runs))
    command = f"python -m research.held_to_runs {runs} --protocol {args.protocol}"
    if args.held_out:
        command += f" --held-out {' '.join(map(str, args.held_out))}"
    if args.simulated:
        command += f" --simulated {args.simulated}"
    titles = {
        "held-to-runs": "The reference's answers, and the protocol replayed on it",
        "reference-repeat": "How often the reference's own optimum repeats, and the curve stage's",
        "held-out": "The protocol replayed on seeds no choice saw",
        "rotation": "Each pool of seeds against the answers of the others",
        "held-to-simulator": "The protocol replayed on the fitted simulator",
        "reference-shape": "The reference's shape, and the fitted simulator's",
    }
    parts = [f"# The estimators held to real runs\n\n`{command} --out {args.out}`"]
    parts += [f"## {titles[block]}\n\n{text}" for block, text in tables.items()]
    return "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    main()
