"""The usable-LR boundary: per seed, the largest LR of a lattice walked upwards from the
variant's optimum whose final loss stays within a band (``max_lr.within`` nats) of the seed's
loss at the optimum; the walk stops at the first point above the band.

Held to the dense reference (docs/stability-and-search.md), a walk in 2^(1/4) steps from the
chosen optimum finds the reference's usable boundary within one step in every replay, where a
bracket of coarse moves (which assumes the loss crosses the band once) misses it in most: above
the optimum real runs excurse up and come back, so a point far above the band's edge can pass
it again. The seed's loss at the optimum is its own run there, not the variant's best over
seeds, so seed offsets cancel. A variant's answer is the geometric mean over seeds with their
range (as the max stable LR's and the Answer's ratio are); where every seed stops at the same
point, the boundary is known only to the lattice's step.

With ``max_lr.walk_step`` a walk point is held at that evaluation and decided there where its
val loss, paired with its seed's start at the same step, lies more than
``max_lr.walk_margin_within`` under the band's edge or ``max_lr.walk_margin_above`` over it
(:func:`held_inside`); the rest train to the end. The margin above is the wider: on the dense
reference's real curves a gap near the edge shrinks by the end of the run (by 0.008 and 0.018
nats on average at warmups 20 and 64), so a point decided above is the one a drift can
overturn (docs/early-stop.md, "The walks held").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

PER_OCTAVE = 4  # the walk's lattice: 2^(1/4), the reference's resolution through the basin


@dataclass(frozen=True)
class SeedWalk:
    """One seed's walk: the loss at the start, every (lr, loss) walked, and where it stopped."""

    seed: int
    start_loss: float
    edge: float  # the largest LR within the band (the start itself when the next fails)
    failed_at: float | None  # the first LR above the band; None where the walk ran out


def walk_lrs(start: float, lr_max: float, per_octave: int = PER_OCTAVE) -> list[float]:
    """The lattice LRs from ``start`` (snapped to the lattice) up to ``lr_max``."""
    first = round(math.log2(start) * per_octave)
    last = math.floor(math.log2(lr_max) * per_octave + 1e-9)
    return [2.0 ** (k / per_octave) for k in range(first, max(last, first) + 1)]


def held_inside(gap: float, within: float, below: float, above: float) -> bool | None:
    """A point held at the walk's hold step, by its ``gap`` over its seed's start there: True
    (within the band) more than ``below`` under the band's edge ``within``, False (above it)
    more than ``above`` over it, None in between or without a gap (it trains on)."""
    if gap < within - below:
        return True
    if gap > within + above:
        return False
    return None


def walk_seed(
    seed: int,
    losses: Mapping[float, float],
    lrs: list[float],
    within: float,
    held: Mapping[float, bool] | None = None,
) -> SeedWalk:
    """The seed's walk over ``lrs`` (ascending, ``lrs[0]`` the start) through the stored
    ``losses`` and the points ``held`` decided at the hold (True: within the band); a point
    neither stored nor decided ends the walk there (it has not been run yet)."""
    held = held or {}
    start = losses[lrs[0]]
    edge = lrs[0]
    for lr in lrs[1:]:
        if lr in held:
            inside = held[lr]
        elif lr in losses:
            inside = losses[lr] <= start + within  # NaN fails too
        else:
            return SeedWalk(seed, start, edge, None)
        if not inside:
            return SeedWalk(seed, start, edge, lr)
        edge = lr
    return SeedWalk(seed, start, edge, None)


def next_lr(walk: SeedWalk, lrs: list[float]) -> float | None:
    """The LR the walk needs next; None once it stopped (a point above the band, or the end)."""
    if walk.failed_at is not None:
        return None
    following = [lr for lr in lrs if lr > walk.edge]
    return following[0] if following else None


@dataclass(frozen=True)
class Usable:
    """A variant's usable boundary: the geometric mean of its seeds' edges, their range, the start
    (its optimum) and the number of seeds; ``resolved`` false where every seed stopped at one
    lattice point (the step bounds it)."""

    value: float
    low: float
    high: float
    start: float
    seeds: int

    @property
    def octaves(self) -> float:
        """The usable range's width above the optimum, in octaves."""
        return math.log2(self.value / self.start)

    @property
    def resolved(self) -> bool:
        return self.low < self.high


def usable_boundary(walks: list[SeedWalk], start: float) -> Usable | None:
    """The geometric mean of the seeds' edges with their range; None without a seed."""
    if not walks:
        return None
    edges = sorted(w.edge for w in walks)
    return Usable(statistics.geometric_mean(edges), edges[0], edges[-1], start, len(edges))


def usable_ratio(first: list[SeedWalk], second: list[SeedWalk]) -> tuple[float, float, float]:
    """second's edge over first's per seed both walked: (geometric mean, lowest, highest)."""
    mine = {w.seed: w.edge for w in first}
    ratios = sorted(w.edge / mine[w.seed] for w in second if w.seed in mine)
    if not ratios:
        return math.nan, math.nan, math.nan
    return statistics.geometric_mean(ratios), ratios[0], ratios[-1]
