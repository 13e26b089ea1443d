"""A variant's LR optimum from its loss curves, with an interval over seeds, and the ratio of
two variants' optima (docs/stability-and-search.md, "The estimators against real runs"; held
to the dense reference by ``python -m research.held_to_runs``).

A curve is one seed's final val losses at the LRs of a grid (the curve stage's lattice, or a
sweep's LRs). The optimum is the grid argmin of the seeds' mean curve, bagged: the mean of its
log2 LR over bootstrap resamples of the seeds, an LR between grid points where the resamples
disagree (Breiman's bagging, applied to an estimator that jumps from point to point). Held to
real runs it is the estimator whose tuned Δ keeps its 95% interval's coverage and its false
"different" rate at their bars on the dense reference and on the simulator fitted to it
(docs). The quadratic vertex before it was dragged by the cliff above the optimum and clipped
at its window's edge; the one-octave running mean after that followed the cliff into the
basin's low side on real runs. A grid's end can be the argmin; where the seed mean's lowest
point is an end, the optimum is not inside the grid (``inside`` false: it must grow).

Its interval is a percentile bootstrap over seeds (the argmin of each resample of the seeds),
fixed by :data:`RESAMPLE_SEED`, widened by half a grid step on each side: a grid point stands
for the optimum to within half a step, as a max-LR bracket does. Two variants' ratio is
bootstrapped with the same seeds drawn for both (matched initial weights and batches make a
seed's two curves move together), bagged alike and widened by a step; where every resample
gives the same points the ratio is not ``resolved`` (a difference finer than the grid is not
measured). With one seed the optimum is the plain argmin and there is no interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ablate.core.boundary import lattice_index, lattice_lr
from ablate.core.usable import PER_OCTAVE

RESAMPLES = 2000  # bootstrap resamples of the seeds
RESAMPLE_SEED = 0  # the bootstrap's generator: the same curves give the same interval

Curve = Sequence[tuple[float, float]]  # (lr, final val loss) of one seed


@dataclass(frozen=True)
class Optimum:
    """An optimum (or a ratio of two) in LR: the bagged argmin (a grid point where every
    resample agrees), its bootstrap interval over seeds, the seeds, and whether it is inside
    its grid (the seed mean's lowest point not its first or last)."""

    value: float
    low: float
    high: float
    seeds: int
    inside: bool
    resolved: bool = True  # False: every bootstrap resample gave the same grid point(s)

    @property
    def shown(self) -> bool:
        """For a ratio of optima: whether the interval excludes 1 (they differ)."""
        return not self.low <= 1.0 <= self.high

    @property
    def lr(self) -> float:
        """The optimum as runs train at it (:func:`trained_lr`)."""
        return trained_lr(self.value)


def trained_lr(value: float) -> float:
    """The LR runs train at for an optimum ``value``: the nearest point of the usable walk's
    2^(1/4) lattice (:data:`ablate.core.usable.PER_OCTAVE`, the resolution ``held_to_runs``
    scores it at), the very float the walk and the curve train at there, so that a tuned run
    at one of their points is their run (one run id), and a value's last bit, which can
    differ between machines, does not move it. A value exactly between two points (a bagged
    mean of 3 resamples in 4 at one √2 point, 1 in 4 at the next) goes to the even index,
    Python's rounding: the √2 point."""
    return lattice_lr(lattice_index(value, PER_OCTAVE), PER_OCTAVE)


@dataclass(frozen=True)
class CurveTable:
    """Curves as one table: the grid (ascending), the seeds, and a seed × grid array of final
    losses, NaN where a seed has no finite point."""

    grid: np.ndarray
    seeds: tuple[int, ...]
    losses: np.ndarray


def curve_table(curves: Mapping[int, Curve]) -> CurveTable:
    """The curves' union grid and their losses on it."""
    grid = np.array(sorted({lr for curve in curves.values() for lr, _ in curve}), dtype=float)
    where = {lr: i for i, lr in enumerate(grid.tolist())}
    losses = np.full((len(curves), len(grid)), np.nan)
    for row, curve in enumerate(curves.values()):
        for lr, loss in curve:
            if math.isfinite(loss):
                losses[row, where[lr]] = loss
    return CurveTable(grid, tuple(curves), losses)


def mean_argmins(losses: np.ndarray) -> np.ndarray:
    """Per row of ``losses`` (..., seeds, grid): the grid index of the lowest seed-mean loss
    (a missing point left out of its mean; -1 where no point is finite)."""
    present = ~np.isnan(losses)
    counts = present.sum(axis=-2)
    means = np.where(counts > 0, np.nansum(losses, axis=-2) / np.maximum(counts, 1), np.inf)
    found = np.argmin(means, axis=-1)
    return np.where(np.isfinite(means.min(axis=-1)), found, -1)


def at_end(index: int, grid: np.ndarray) -> bool:
    """Whether grid point ``index`` (the seed mean's lowest) is the grid's first or last: the
    optimum may lie beyond the grid."""
    return index in (0, len(grid) - 1)


def resampled_rows(seeds: int) -> np.ndarray:
    """(:data:`RESAMPLES` × seeds) row indices of the seeds drawn with replacement."""
    rng = np.random.default_rng(RESAMPLE_SEED)
    return rng.integers(0, seeds, size=(RESAMPLES, seeds))


def half_step(grid: np.ndarray) -> float:
    """Half the grid's (median) step in log2 LR; 0 for a grid of one point."""
    return float(np.median(np.diff(np.log2(grid)))) / 2 if len(grid) > 1 else 0.0


def _percentiles(logs: np.ndarray, level: float, widen: float) -> tuple[float, float]:
    """The ``level`` percentile interval of ``logs`` (ends on values drawn), widened by
    ``widen`` in log2 on each side, as LRs."""
    tail = (1 - level) / 2
    low = np.quantile(logs, tail, method="lower")
    high = np.quantile(logs, 1 - tail, method="higher")
    return float(2.0 ** (low - widen)), float(2.0 ** (high + widen))


def variant_optimum(curves: Mapping[int, Curve], level: float = 0.95) -> Optimum | None:
    """The variant's optimum over its seeds' curves (None without a finite point)."""
    table = curve_table(curves)
    found = int(mean_argmins(table.losses))
    if found < 0:
        return None
    n = len(table.seeds)
    inside = not at_end(found, table.grid)
    if n < 2:
        return Optimum(float(table.grid[found]), 0.0, math.inf, n, inside)
    drawn = mean_argmins(table.losses[resampled_rows(n)])
    logs = np.log2(table.grid[drawn[drawn >= 0]])
    interval = _percentiles(logs, level, half_step(table.grid))
    return Optimum(float(2.0 ** logs.mean()), *interval, n, inside, bool(np.ptp(logs) > 0))


def optimum_ratio(
    first: Mapping[int, Curve], second: Mapping[int, Curve], level: float = 0.95
) -> Optimum | None:
    """second's optimum over first's on the seeds both have, bootstrapped drawing the same
    seeds for both and bagged (None: no seed in common, or no finite point)."""
    shared = [seed for seed in first if seed in second]
    if not shared:
        return None
    a = curve_table({s: first[s] for s in shared})
    b = curve_table({s: second[s] for s in shared})
    ia, ib = int(mean_argmins(a.losses)), int(mean_argmins(b.losses))
    if ia < 0 or ib < 0:
        return None
    inside = not (at_end(ia, a.grid) or at_end(ib, b.grid))
    if len(shared) < 2:
        return Optimum(float(b.grid[ib] / a.grid[ia]), 0.0, math.inf, 1, inside)
    rows = resampled_rows(len(shared))
    da, db = mean_argmins(a.losses[rows]), mean_argmins(b.losses[rows])
    both = (da >= 0) & (db >= 0)
    logs = np.log2(b.grid[db[both]] / a.grid[da[both]])
    widen = half_step(a.grid) + half_step(b.grid)
    resolved = bool(np.ptp(da[both]) > 0 or np.ptp(db[both]) > 0)
    value = float(2.0 ** logs.mean())
    return Optimum(value, *_percentiles(logs, level, widen), len(shared), inside, resolved)


def edge_sides(curves: Mapping[int, Curve], grid: Sequence[float]) -> set[int]:
    """Where the curves' lowest points lie at an end of ``grid``: -1 its first LR, +1 its
    last (where growing the grid can move the optimum); empty when every one is inside."""
    sides = set()
    for curve in curves.values():
        finite = [(lr, loss) for lr, loss in curve if math.isfinite(loss)]
        if finite and grid:
            lowest = min(finite, key=lambda point: point[1])[0]
            if math.isclose(lowest, min(grid), rel_tol=1e-9):
                sides.add(-1)
            elif math.isclose(lowest, max(grid), rel_tol=1e-9):
                sides.add(1)
    return sides
