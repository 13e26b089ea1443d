"""A variant's LR optimum from its own loss curve, with an interval, and the difference of two
variants' optima (docs/stability-and-search.md; scored on the simulator by
``python -m ablate.bench.estimators``).

A curve is one seed's final val losses at LRs of a log grid. Each seed's optimum is the vertex
of a quadratic in log2 LR fitted to the points around its lowest one (:data:`FIT_POINTS` of
them, so the fit averages run noise instead of picking the luckiest point); a curve whose
lowest point is the grid's first or last has no interior optimum (``inside`` false: the grid
must be extended there). A variant's optimum is the mean of its seeds' vertices in log2 LR
with a Student-t interval over seeds; two variants' difference is paired by seed (matched
initial weights and batches make a seed's two curves move together).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

FIT_POINTS = 5  # grid points the quadratic is fitted to: the lowest and two on each side
LR_DIGITS = 12  # significant digits of an optimum trained at (Optimum.lr)

Curve = Sequence[tuple[float, float]]  # (lr, final val loss) of one seed


@dataclass(frozen=True)
class SeedOptimum:
    """One seed's optimum: the vertex's LR, the fitted loss there, and whether the curve's
    lowest point is inside its grid (at an edge the vertex is an extrapolation)."""

    seed: int
    lr: float
    loss: float
    inside: bool


def fit_vertex(curve: Curve) -> tuple[float, float, bool]:
    """(lr, loss, inside) of the quadratic in log2 LR through the :data:`FIT_POINTS` points
    around the curve's lowest one; the lowest point itself where the fit opens downwards."""
    points = sorted((math.log2(lr), loss) for lr, loss in curve if math.isfinite(loss))
    if not points:
        return math.nan, math.nan, False
    xs = np.array([x for x, _ in points])
    ys = np.array([y for _, y in points])
    low = int(np.argmin(ys))
    inside = 0 < low < len(points) - 1
    half = FIT_POINTS // 2
    start = min(max(low - half, 0), max(len(points) - FIT_POINTS, 0))
    window = slice(start, start + FIT_POINTS)
    if len(points) < 3:
        return 2.0 ** xs[low], float(ys[low]), inside
    a, b, c = np.polyfit(xs[window], ys[window], 2)
    if a <= 0:
        return 2.0 ** xs[low], float(ys[low]), inside
    vertex = float(np.clip(-b / (2 * a), xs[window][0], xs[window][-1]))
    return 2.0**vertex, float(a * vertex**2 + b * vertex + c), inside


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


def seed_optima(curves: Mapping[int, Curve]) -> list[SeedOptimum]:
    """Every seed's fitted optimum."""
    return [SeedOptimum(seed, *fit_vertex(curve)) for seed, curve in curves.items()]


@dataclass(frozen=True)
class Optimum:
    """An optimum (or a ratio of two) in LR: the mean over seeds in log2 LR, its t interval,
    the seeds, and whether every seed's lowest point was inside its grid."""

    value: float
    low: float
    high: float
    seeds: int
    inside: bool

    @property
    def shown(self) -> bool:
        """For a ratio of optima: whether the interval excludes 1 (they differ)."""
        return not self.low <= 1.0 <= self.high

    @property
    def lr(self) -> float:
        """The optimum as the LR runs train at: :data:`LR_DIGITS` significant digits, so that
        the fit's last bit, which differs between machines (numpy's vector code depends on the
        CPU), does not change their run ids (ln_vs_rms's tuned runs got new ids on an
        AVX-512 machine for an LR 1 ulp off, with bit-identical losses)."""
        return float(f"{self.value:.{LR_DIGITS}g}")


def _t_interval(logs: Sequence[float], inside: bool, level: float) -> Optimum:
    """2^(mean of ``logs``) with the t interval of the mean (none with one value)."""
    from scipy import stats  # only where an interval is computed

    n, centre = len(logs), statistics.fmean(logs)
    spread = math.inf
    if n > 1:
        spread = stats.t.ppf(0.5 + level / 2, n - 1) * statistics.stdev(logs) / math.sqrt(n)
    return Optimum(2.0**centre, 2.0 ** (centre - spread), 2.0 ** (centre + spread), n, inside)


def variant_optimum(curves: Mapping[int, Curve], level: float = 0.95) -> Optimum | None:
    """The variant's optimum over its seeds' curves (None without a finite curve)."""
    found = [o for o in seed_optima(curves) if math.isfinite(o.lr)]
    if not found:
        return None
    return _t_interval([math.log2(o.lr) for o in found], all(o.inside for o in found), level)


def optimum_ratio(
    first: Mapping[int, Curve], second: Mapping[int, Curve], level: float = 0.95
) -> Optimum | None:
    """second's optimum over first's, paired by the seeds both have (None: no pair)."""
    mine = {o.seed: o for o in seed_optima(first) if math.isfinite(o.lr)}
    pairs = [
        (mine[o.seed], o) for o in seed_optima(second) if o.seed in mine and math.isfinite(o.lr)
    ]
    if not pairs:
        return None
    logs = [math.log2(b.lr / a.lr) for a, b in pairs]
    return _t_interval(logs, all(a.inside and b.inside for a, b in pairs), level)
