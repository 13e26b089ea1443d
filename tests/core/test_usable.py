"""The usable-LR walk: up from the optimum in 2^(1/4) steps to the first point above the band,
an excursion that comes back not walked past, and the median over seeds with its range."""

from __future__ import annotations

import math

import pytest

from ablate.core.usable import (
    held_inside,
    next_lr,
    usable_boundary,
    usable_ratio,
    walk_lrs,
    walk_seed,
)

LRS = walk_lrs(2**-8, 2**-5)  # 2^-8 ... 2^-5 in 2^(1/4) steps


def _losses(values: list[float]) -> dict[float, float]:
    return dict(zip(LRS, values, strict=False))


def test_the_walk_is_the_quarter_octave_lattice_from_the_start_up_to_lr_max() -> None:
    assert len(LRS) == 13 and LRS[0] == 2**-8 and LRS[-1] == pytest.approx(2**-5)
    assert walk_lrs(0.003, 0.01)[0] == pytest.approx(2**-8.5)  # snapped to the lattice


def test_the_walk_stops_at_the_first_point_above_the_band_not_after_a_return() -> None:
    # within 0.1 of 2.30 up to the third step; the fourth excurses; the fifth comes back
    walk = walk_seed(7, _losses([2.30, 2.31, 2.35, 2.39, 2.55, 2.32]), LRS, 0.1)
    assert walk.edge == LRS[3] and walk.failed_at == LRS[4] and walk.start_loss == 2.30
    assert next_lr(walk, LRS) is None  # stopped: nothing more to run


def test_a_walk_not_yet_stopped_asks_for_its_next_point() -> None:
    walk = walk_seed(0, _losses([2.30, 2.32]), LRS, 0.1)
    assert walk.edge == LRS[1] and walk.failed_at is None and next_lr(walk, LRS) == LRS[2]
    first = walk_seed(0, _losses([2.30, 2.45]), LRS, 0.1)  # the first step fails
    assert first.edge == LRS[0] and first.failed_at == LRS[1]
    nan = walk_seed(0, _losses([2.30, math.nan]), LRS, 0.1)  # no loss fails the band
    assert nan.failed_at == LRS[1]


def test_the_boundary_is_the_seeds_geometric_mean_with_the_range_and_width_in_octaves() -> None:
    walks = [
        walk_seed(s, _losses([2.3] * (k + 1) + [2.9]), LRS, 0.1) for s, k in enumerate([2, 4, 4])
    ]
    found = usable_boundary(walks, LRS[0])
    assert found.value == pytest.approx((LRS[2] * LRS[4] ** 2) ** (1 / 3))  # not the middle seed
    assert found.low == LRS[2] and found.high == LRS[4]
    assert found.octaves == pytest.approx((2 + 4 + 4) / 3 / 4) and found.resolved
    assert found.seeds == 3
    same = usable_boundary([walks[0], walks[0]], LRS[0])
    assert not same.resolved  # every seed at one point: the lattice's step bounds it


def test_the_ratio_pairs_seeds() -> None:
    first = [walk_seed(s, _losses([2.3, 2.3, 2.9]), LRS, 0.1) for s in (0, 1)]
    second = [walk_seed(s, _losses([2.3, 2.3, 2.3, 2.3, 2.9]), LRS, 0.1) for s in (0, 1, 5)]
    mean, low, high = usable_ratio(first, second)
    assert mean == pytest.approx(2**0.5) and low == high == pytest.approx(2**0.5)


def test_a_held_point_is_decided_only_beyond_a_margin_under_or_over_the_bands_edge() -> None:
    assert held_inside(0.04, 0.1, 0.05, 0.1) is True  # more than 0.05 under the edge 0.1
    assert held_inside(0.21, 0.1, 0.05, 0.1) is False  # more than 0.1 over it
    assert held_inside(0.06, 0.1, 0.05, 0.1) is None and held_inside(0.19, 0.1, 0.05, 0.1) is None
    assert held_inside(math.nan, 0.1, 0.05, 0.1) is None  # no gap: it trains on


def test_points_decided_at_the_hold_place_the_walk_as_their_final_losses_would() -> None:
    losses = _losses([2.30, 2.31])  # the start and one point trained whole
    held = {LRS[2]: True, LRS[3]: False}  # decided within, then above the band
    walk = walk_seed(0, losses, LRS, 0.1, held)
    assert (walk.edge, walk.failed_at, walk.start_loss) == (LRS[2], LRS[3], 2.30)
    assert walk_seed(0, losses, LRS, 0.1, {LRS[2]: True}).failed_at is None  # LRS[3] to run
