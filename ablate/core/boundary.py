"""Stability boundaries measured per seed on a lattice every variant shares, and the interval
estimates built on them (docs/stability-and-search.md).

A probe trains one seed at one LR. Probed LRs are points of one absolute lattice,
lr_k = 2^(k / per_octave) for integer k, so two variants probe the same LRs wherever their
searches meet, and a boundary is a measurement, not a count of steps from a variant's own
start. Each seed is bracketed on its own (:func:`bracket_seed`): a seed that fails first no
longer decides the others' bracket. A seed's boundary is the geometric midpoint of its last
stable and first unstable lattice point, which lie one lattice step apart.

A variant's boundary (:func:`variant_boundary`) is the geometric mean of its seeds' boundaries;
the ratio of two variants' (:func:`boundary_ratio`) is paired by seed, the geometric mean of the
seeds' ratios: the mean of their log values, over a few seeds less variable than their median,
and the centre of the interval each is given with. Both intervals are Student-t intervals over
seeds on log2 LR, widened by the brackets' resolution (each seed's boundary is known only to
within its bracket, so with no seed-to-seed spread the interval is still the width the brackets
allow; on the lattice half a step per variant): with two or three seeds a bootstrap over seeds
covers far less than its level (``python -m research.estimators`` measures both).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

PER_OCTAVE = 8  # lattice points per doubling of the LR: brackets 2^(1/8) ≈ 9% wide
COARSE = 16  # lattice steps per coarse move while bracketing: a factor 4 at PER_OCTAVE
T = TypeVar("T")


def lattice_lr(index: int, per_octave: int = PER_OCTAVE) -> float:
    """The lattice's LR number ``index``: 2^(index / per_octave)."""
    return 2.0 ** (index / per_octave)


def lattice_index(lr: float, per_octave: int = PER_OCTAVE) -> int:
    """The index of the lattice point nearest ``lr`` (in log)."""
    return round(math.log2(lr) * per_octave)


@dataclass
class SeedBoundary:
    """One seed's bracket on the lattice: its last stable and first unstable LR (None where
    the range's end was reached first) and every probe as (lr, stable)."""

    seed: int
    last_stable: float | None
    first_unstable: float | None
    probes: list[tuple[float, bool]] = field(default_factory=list)

    @property
    def estimate(self) -> float | None:
        """The boundary: the bracket's geometric midpoint (None without both ends)."""
        if self.last_stable is None or self.first_unstable is None:
            return None
        return math.sqrt(self.last_stable * self.first_unstable)


BracketSteps = Generator[float, bool, SeedBoundary]  # yields LRs, is sent their verdicts


def bracket_seed(
    probe: Callable[[float], bool],
    seed: int,
    start: float,
    lr_range: tuple[float, float],
    per_octave: int = PER_OCTAVE,
    coarse: int = COARSE,
    first_step: int | None = None,
) -> SeedBoundary:
    """Bracket one seed's boundary to one lattice step (:func:`bracket_steps`), each probe
    through ``probe(lr)``, which trains (or finds stored) the seed's run at ``lr`` and says
    whether it was stable."""
    return drive(bracket_steps(seed, start, lr_range, per_octave, coarse, first_step), probe)


def drive(steps: Generator[float, bool, T], probe: Callable[[float], bool]) -> T:
    """Run a bracketing (:func:`bracket_steps`) to its end, answering each LR it asks for with
    ``probe(lr)``; what it returns."""
    try:
        lr = next(steps)
        while True:
            lr = steps.send(probe(lr))
    except StopIteration as done:
        return done.value


def bracket_steps(
    seed: int,
    start: float,
    lr_range: tuple[float, float],
    per_octave: int = PER_OCTAVE,
    coarse: int = COARSE,
    first_step: int | None = None,
) -> BracketSteps:
    """One seed's bracketing as a generator, so that several seeds' can advance together (a
    round of probes, one per seed): it yields each LR to probe, is sent whether that run was
    stable, and returns the :class:`SeedBoundary`. From the lattice point nearest ``start``,
    move up while stable (down while unstable) until the verdict changes or ``lr_range``'s end
    is passed, then bisect the index interval. The first move is ``first_step`` steps (default
    ``coarse``), each next one twice the last, up to ``coarse``: from a start near the boundary
    (another seed's) it closes in a few probes."""
    low_k = math.ceil(math.log2(lr_range[0]) * per_octave - 1e-9)
    high_k = math.floor(math.log2(lr_range[1]) * per_octave + 1e-9)
    verdicts: dict[int, bool] = {}
    k = min(max(lattice_index(start, per_octave), low_k), high_k)
    verdicts[k] = yield lattice_lr(k, per_octave)
    stable_here = verdicts[k]
    step = min(first_step or coarse, coarse)
    last = first = None
    while (ahead := min(max(k + (step if stable_here else -step), low_k), high_k)) != k:
        if ahead not in verdicts:
            verdicts[ahead] = yield lattice_lr(ahead, per_octave)
        if verdicts[ahead] != stable_here:
            stable_k, unstable_k = (k, ahead) if stable_here else (ahead, k)
            while unstable_k - stable_k > 1:
                middle = (stable_k + unstable_k) // 2
                if middle not in verdicts:
                    verdicts[middle] = yield lattice_lr(middle, per_octave)
                if verdicts[middle]:
                    stable_k = middle
                else:
                    unstable_k = middle
            last, first = lattice_lr(stable_k, per_octave), lattice_lr(unstable_k, per_octave)
            break
        k, step = ahead, min(2 * step, coarse)
    else:  # the range's end, with the start's verdict all the way
        last, first = (
            (lattice_lr(k, per_octave), None) if stable_here else (None, lattice_lr(k, per_octave))
        )
    probes = [(lattice_lr(i, per_octave), verdicts[i]) for i in verdicts]
    return SeedBoundary(seed, last, first, probes)


def edge_of_points(seed: int, points: Sequence[tuple[float, bool]]) -> SeedBoundary:
    """One seed's upper edge from scattered (lr, stable) runs: its first unstable LR above its
    lowest stable one (LRs below that, which did not learn yet, bound nothing above), and its
    largest stable LR below that. No stable run: no lower end; none unstable above: no
    upper."""
    stable = sorted(lr for lr, ok in points if ok)
    if not stable:
        return SeedBoundary(seed, None, min((lr for lr, _ in points), default=None), list(points))
    above = [lr for lr, ok in points if not ok and lr > stable[0]]
    first = min(above, default=None)
    last = max(lr for lr in stable if first is None or lr < first)
    return SeedBoundary(seed, last, first, list(points))


def probes_per_seed(start: float, lr_max: float, per_octave: int, coarse: int) -> int:
    """An upper bound on :func:`bracket_seed`'s probes from a stable ``start``: the start, a
    move every ``coarse`` steps up to ``lr_max``, the shorter first moves, the bisection."""
    moves = math.ceil(max(0.0, math.log2(lr_max / start)) * per_octave / coarse)
    return 1 + moves + 2 * math.ceil(math.log2(coarse))


@dataclass(frozen=True)
class Interval:
    """A point estimate and its interval (``low``, ``high``), from ``seeds`` seeds."""

    value: float
    low: float
    high: float
    seeds: int

    def text(self) -> str:
        """``value [low, high]`` to three significant digits."""
        return f"{self.value:#.3g} [{self.low:#.3g}, {self.high:#.3g}]"

    @property
    def shown(self) -> bool:
        """For a ratio: whether the interval excludes 1 (a difference is shown)."""
        return not self.low <= 1.0 <= self.high


def _t_interval_log2(
    point: float, values: Sequence[float], half_width: float, level: float
) -> Interval:
    """2^point; the t interval of the values' mean widened by ``half_width`` (log2)."""
    from scipy import stats  # only where an interval is computed: the stage's processes

    n = len(values)
    centre = statistics.fmean(values)
    spread = 0.0
    if n > 1:
        spread = stats.t.ppf(0.5 + level / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return Interval(
        2.0**point,
        2.0 ** (centre - spread - half_width),
        2.0 ** (centre + spread + half_width),
        n,
    )


def half_width(bounds: Sequence[SeedBoundary]) -> float:
    """Half the widest bracket of the seeds that have both ends, in log2 (on the lattice:
    half a step, 0.5 / per_octave); 0 for none."""
    widths = [
        math.log2(b.first_unstable / b.last_stable) / 2
        for b in bounds
        if b.last_stable is not None and b.first_unstable is not None
    ]
    return max(widths, default=0.0)


def variant_boundary(bounds: Sequence[SeedBoundary], level: float = 0.95) -> Interval | None:
    """The geometric mean over seeds of their boundaries, with the t interval over seeds
    widened by half the widest seed's bracket (None when no seed has both ends). With one
    seed the interval is its bracket: the spread between seeds is then unknown."""
    logs = [math.log2(b.estimate) for b in bounds if b.estimate is not None]
    if not logs:
        return None
    return _t_interval_log2(statistics.fmean(logs), logs, half_width(bounds), level)


def paired_log2_ratios(
    first: Sequence[SeedBoundary], second: Sequence[SeedBoundary]
) -> list[float]:
    """log2(second / first) of every seed both variants bracketed, in ``second``'s order."""
    mine = {b.seed: b.estimate for b in first if b.estimate is not None}
    return [
        math.log2(b.estimate / mine[b.seed])
        for b in second
        if b.estimate is not None and b.seed in mine
    ]


def boundary_ratio(
    first: Sequence[SeedBoundary], second: Sequence[SeedBoundary], level: float = 0.95
) -> Interval | None:
    """second / first, paired by seed: the geometric mean over the seeds both variants
    bracketed of their boundaries' ratio, with the t interval over those seeds widened by both
    variants' bracket half-widths (one lattice step in all). None when no seed pairs."""
    logs = paired_log2_ratios(first, second)
    if not logs:
        return None
    widen = half_width(first) + half_width(second)
    return _t_interval_log2(statistics.fmean(logs), logs, widen, level)
