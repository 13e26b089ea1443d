"""The LR optimum from loss curves: the seed-mean curve's argmin bagged over bootstrap
resamples of the seeds, edges flagged, the bootstrap interval over seeds and the paired ratio,
on constructed curves whose optimum is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ablate.core.optimum import (
    Optimum,
    curve_table,
    edge_sides,
    mean_argmins,
    optimum_ratio,
    resampled_rows,
    trained_lr,
    variant_optimum,
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
    assert not found.inside and found.value == pytest.approx(GRID[-1])  # the end, flagged


def test_seeds_that_disagree_give_an_lr_between_their_points() -> None:
    # two seeds lowest at 2^-8, two at 2^-7.5: the seed mean picks one, resamples both
    curves = {s: _valley(2.0**opt) for s, opt in enumerate([-8.0, -8.0, -7.5, -7.5])}
    found = variant_optimum(curves)
    assert 2**-8 < found.value < 2**-7.5 and found.resolved and found.inside
    table = curve_table(curves)
    drawn = mean_argmins(table.losses[resampled_rows(4)])
    assert math.log2(found.value) == pytest.approx(np.log2(table.grid[drawn]).mean())


def test_one_lucky_seed_moves_the_optimum_less_than_the_plain_argmin() -> None:
    opt = 2**-8
    lucky = {s: _valley(opt) for s in range(5)} | {5: _valley(opt, noise={5: -0.2})}
    table = curve_table(lucky)
    assert GRID[int(mean_argmins(table.losses))] == pytest.approx(2**-7.5)  # follows the luck
    found = variant_optimum(lucky)
    assert 2**-8 < found.value < 2**-7.5  # the resamples without seed 5 find 2^-8


def test_a_cliff_above_the_optimum_does_not_drag_it_below() -> None:
    cliff = {5: 0.25, 6: 0.4, 7: 0.5}  # from 2^-7.5 up: the loss jumps, as real runs do
    curves = {s: _valley(2**-8, noise=cliff) for s in range(4)}
    assert variant_optimum(curves).value == pytest.approx(2**-8)  # the lowest point stays


def test_a_missing_point_is_left_out_of_the_mean_not_counted_as_zero() -> None:
    curves = {0: _valley(2**-8), 1: [p for p in _valley(2**-8) if p[0] != 2**-8]}
    table = curve_table(curves)
    assert np.isnan(table.losses).sum() == 1
    assert GRID[int(mean_argmins(table.losses))] == 2**-8
    assert int(mean_argmins(np.full((2, 3), np.nan))) == -1  # no finite point: none


def test_the_interval_is_a_bootstrap_over_seeds_on_grid_points() -> None:
    curves = {s: _valley(2.0**opt) for s, opt in enumerate([-8.5, -8, -8, -7.5, -8, -8])}
    found = variant_optimum(curves)
    assert found.seeds == 6 and found.value == pytest.approx(2**-8, rel=0.05)
    assert 2**-8.75 <= found.low <= 2**-8.25 and 2**-7.75 <= found.high <= 2**-7.25
    assert found.resolved  # two seeds off the centre: resamples move it
    assert found == variant_optimum(curves)  # a fixed generator: the same interval again
    one = variant_optimum({0: _valley(2**-8)})
    assert one.value == 2**-8 and one.low == 0 and math.isinf(one.high)  # one seed: no interval


def test_the_ratio_of_two_optima_draws_the_same_seeds_for_both() -> None:
    first = {s: _valley(2**-8) for s in range(3)}
    second = {0: _valley(2**-7), 1: _valley(2**-7), 2: _valley(2**-7), 9: _valley(2**-5)}
    found = optimum_ratio(first, second)  # seed 9 unpaired: left out
    assert found.seeds == 3 and found.value == pytest.approx(2.0) and found.shown
    assert found.low == pytest.approx(2**0.5) and found.high == pytest.approx(2**1.5)  # a step
    same = optimum_ratio(first, first)
    assert same.value == 1.0 and not same.shown and not same.resolved
    assert optimum_ratio(first, {7: _valley(2**-8)}) is None  # no seed in common


def test_the_bagged_ratio_is_the_ratio_of_the_bagged_optima() -> None:
    first = {s: _valley(2.0**opt) for s, opt in enumerate([-8.0, -8.0, -7.5, -7.5])}
    second = {s: _valley(2.0**opt) for s, opt in enumerate([-7.0, -6.5, -7.0, -6.5])}
    ratio = optimum_ratio(first, second)
    own = variant_optimum(second).value / variant_optimum(first).value
    assert ratio.value == pytest.approx(own) and ratio.resolved


def test_a_lowest_point_at_the_grids_end_names_the_side_to_grow() -> None:
    assert edge_sides({0: _valley(2**-4)}, GRID) == {1}  # optimum above the grid
    assert edge_sides({0: _valley(2**-11)}, GRID) == {-1}
    assert edge_sides({0: _valley(2**-7.5), 1: _valley(2**-8)}, GRID) == set()


@pytest.mark.parametrize("value", [0.00214930569733557, 0.00311561206143147, 0.1, 3e-3])
def test_an_optimum_trains_at_the_nearest_quarter_octave_its_last_bit_does_not_move(
    value: float,
) -> None:
    a = Optimum(value, value / 2, value * 2, 2, True)
    b = Optimum(math.nextafter(value, 1.0), value / 2, value * 2, 2, True)  # one ulp up
    assert a.lr == b.lr and abs(math.log2(a.lr / value)) <= 1 / 8
    assert round(math.log2(a.lr) * 4, 9) == round(math.log2(a.lr) * 4)  # a 2^(k/4) point


def test_a_value_between_two_lattice_points_trains_at_the_even_one() -> None:
    def point(k: int) -> float:
        return 2.0 ** (k / 4)  # lattice point k, as the curve and the walk train at it

    assert trained_lr(2.0**-8.125) == point(-32)  # index -32.5: the even one, a √2 point
    assert trained_lr(2.0**-8.375) == point(-34)  # index -33.5: the even one again
    assert trained_lr(2.0**-8.2) == point(-33)  # otherwise the nearest
