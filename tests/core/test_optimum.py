"""The LR optimum from loss curves: the lowest one-octave running mean of the seed-mean curve,
edges flagged, the bootstrap interval over seeds and the paired ratio, on constructed curves
whose optimum is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ablate.core.optimum import (
    Optimum,
    curve_table,
    edge_sides,
    optimum_ratio,
    smoothed_argmins,
    variant_optimum,
    window_weights,
)

GRID = [2.0 ** (k / 2) for k in range(-20, -9)]  # 2^-10 ... 2^-5: √2 steps


def _valley(opt: float, curvature: float = 0.3, noise: dict[int, float] | None = None):  # noqa: ANN202
    """(lr, loss) on the grid of ℓ* + c·log10(lr/opt)², plus noise at chosen grid indices."""
    noise = noise or {}
    return [
        (lr, 1.7 + curvature * math.log10(lr / opt) ** 2 + noise.get(i, 0.0))
        for i, lr in enumerate(GRID)
    ]


@pytest.mark.parametrize("opt", [2**-8, 2**-7.5, 2**-6.5])
def test_the_optimum_of_an_exact_valley_on_a_grid_point_is_that_point(opt: float) -> None:
    found = variant_optimum({0: _valley(opt), 1: _valley(opt)})
    assert found.value == pytest.approx(opt) and found.inside and not found.resolved
    # every resample the same point: the interval is that point's half-step each side
    assert found.low == pytest.approx(opt / 2**0.25) and found.high == pytest.approx(opt * 2**0.25)


def test_a_curve_lowest_at_the_grids_edge_has_no_interior_optimum() -> None:
    found = variant_optimum({0: _valley(2**-4), 1: _valley(2**-4)})  # above the grid
    assert not found.inside and found.value == pytest.approx(GRID[-2])  # an end is no candidate


def test_an_end_of_the_grid_does_not_win_on_a_symmetric_valley_beside_it() -> None:
    curves = {0: _valley(GRID[-2]), 1: _valley(GRID[-2])}  # the last point is half a step off
    found = variant_optimum(curves)  # a half window at the end would average lower there
    assert found.value == pytest.approx(GRID[-2]) and found.inside


def test_one_lucky_point_beside_the_optimum_does_not_move_it() -> None:
    opt = 2**-8
    lucky = {0: _valley(opt, noise={5: -0.03}), 1: _valley(opt)}  # 2^-7.5 got lucky
    lowest = min(range(len(GRID)), key=lambda i: np.nanmean([c[i][1] for c in lucky.values()]))
    assert GRID[lowest] == pytest.approx(2**-7.5)  # the lowest mean point follows the luck
    assert variant_optimum(lucky).value == pytest.approx(opt)  # the running mean does not


def test_a_cliff_above_the_optimum_does_not_drag_it_below() -> None:
    cliff = {5: 0.25, 6: 0.4, 7: 0.5}  # from 2^-7.5 up: the loss jumps, as real runs do
    curves = {s: _valley(2**-8, noise=cliff) for s in range(4)}
    assert variant_optimum(curves).value == pytest.approx(2**-8.5)  # one grid step, not more


def test_the_running_mean_spans_one_octave_whatever_the_grid() -> None:
    quarter = np.array([2.0 ** (k / 4) for k in range(-40, -30)])
    assert window_weights(quarter)[4].sum() == 5  # 2^(1/4) lattice: the point, two each side
    decades = np.array([1e-3, 1e-2, 1e-1])
    assert np.array_equal(window_weights(decades), np.eye(3))  # decades: the point alone


def test_a_missing_point_is_left_out_of_the_mean_not_counted_as_zero() -> None:
    curves = {0: _valley(2**-8), 1: [p for p in _valley(2**-8) if p[0] != 2**-8]}
    table = curve_table(curves)
    assert np.isnan(table.losses).sum() == 1
    assert GRID[int(smoothed_argmins(table.losses, window_weights(table.grid)))] == 2**-8


def test_the_interval_is_a_bootstrap_over_seeds_on_grid_points() -> None:
    curves = {s: _valley(2.0**opt) for s, opt in enumerate([-8.5, -8, -8, -7.5, -8, -8])}
    found = variant_optimum(curves)
    assert found.seeds == 6 and found.value == pytest.approx(2**-8)
    assert 2**-8.75 <= found.low <= 2**-8.25 and 2**-7.75 <= found.high <= 2**-7.25
    assert found.resolved  # two seeds off the centre: resamples move it
    assert found == variant_optimum(curves)  # a fixed generator: the same interval again
    one = variant_optimum({0: _valley(2**-8)})
    assert one.low == 0 and math.isinf(one.high)  # one seed: no spread, no interval


def test_the_ratio_of_two_optima_draws_the_same_seeds_for_both() -> None:
    first = {s: _valley(2**-8) for s in range(3)}
    second = {0: _valley(2**-7), 1: _valley(2**-7), 2: _valley(2**-7), 9: _valley(2**-5)}
    found = optimum_ratio(first, second)  # seed 9 unpaired: left out
    assert found.seeds == 3 and found.value == pytest.approx(2.0) and found.shown
    assert found.low == pytest.approx(2**0.5) and found.high == pytest.approx(2**1.5)  # a step
    same = optimum_ratio(first, first)
    assert same.value == 1.0 and not same.shown and not same.resolved
    assert optimum_ratio(first, {7: _valley(2**-8)}) is None  # no seed in common


def test_a_lowest_point_at_the_grids_end_names_the_side_to_grow() -> None:
    assert edge_sides({0: _valley(2**-4)}, GRID) == {1}  # optimum above the grid
    assert edge_sides({0: _valley(2**-11)}, GRID) == {-1}
    assert edge_sides({0: _valley(2**-7.5), 1: _valley(2**-8)}, GRID) == set()


@pytest.mark.parametrize("value", [0.00214930569733557, 0.00311561206143147, 0.1, 3e-3])
def test_an_optimum_trains_at_an_lr_its_last_bit_does_not_move(value: float) -> None:
    a = Optimum(value, value / 2, value * 2, 2, True)
    b = Optimum(math.nextafter(value, 1.0), value / 2, value * 2, 2, True)  # one ulp up
    assert a.lr == b.lr and a.lr == pytest.approx(value, rel=1e-11)
