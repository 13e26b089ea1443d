"""The LR optimum from a loss curve: the quadratic's vertex, edges flagged, the t interval over
seeds and the paired ratio, on constructed curves whose optimum is known."""

from __future__ import annotations

import math
import statistics

import pytest
from scipy import stats

from ablate.core.optimum import (
    Optimum,
    edge_sides,
    fit_vertex,
    optimum_ratio,
    seed_optima,
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


@pytest.mark.parametrize("opt", [2**-8.3, 2**-7.5, 0.0061])
def test_the_vertex_of_an_exact_valley_is_its_optimum_between_grid_points(opt: float) -> None:
    lr, loss, inside = fit_vertex(_valley(opt))
    assert lr == pytest.approx(opt, rel=1e-9) and loss == pytest.approx(1.7) and inside


def test_a_curve_lowest_at_the_grids_edge_has_no_interior_optimum() -> None:
    lr, _, inside = fit_vertex(_valley(2**-4))  # the optimum lies above the grid
    assert not inside and lr <= GRID[-1]


def test_noise_on_one_point_moves_the_fit_less_than_picking_the_lowest_point() -> None:
    opt = 2**-7.5
    lucky = _valley(opt, noise={6: -0.01})  # 2^-7, half a step from the optimum, got lucky
    lr, _, _ = fit_vertex(lucky)
    assert abs(math.log2(lr / opt)) < 0.5  # the lowest point alone would say exactly 0.5


def test_a_variants_optimum_is_the_seeds_mean_in_log_with_a_t_interval() -> None:
    curves = {0: _valley(2**-8), 1: _valley(2**-7.5), 2: _valley(2**-7.8)}
    found = variant_optimum(curves)
    logs = [-8.0, -7.5, -7.8]
    half = stats.t.ppf(0.975, 2) * statistics.stdev(logs) / math.sqrt(3)
    assert math.log2(found.value) == pytest.approx(statistics.fmean(logs))
    assert math.log2(found.low) == pytest.approx(statistics.fmean(logs) - half)
    assert found.seeds == 3 and found.inside
    assert [o.seed for o in seed_optima(curves)] == [0, 1, 2]
    one = variant_optimum({0: _valley(2**-8)})
    assert one.low == 0 and math.isinf(one.high)  # one seed: no spread, no interval


def test_the_ratio_of_two_optima_is_paired_by_seed() -> None:
    first = {0: _valley(2**-8), 1: _valley(2**-7.5)}
    second = {0: _valley(2**-7), 1: _valley(2**-6.6), 9: _valley(2**-6)}  # seed 9 unpaired
    found = optimum_ratio(first, second)
    assert found.seeds == 2 and math.log2(found.value) == pytest.approx((1.0 + 0.9) / 2)
    same = optimum_ratio(first, first)
    assert same.value == pytest.approx(1.0) and same.low == pytest.approx(1.0)


def test_a_lowest_point_at_the_grids_end_names_the_side_to_grow() -> None:
    assert edge_sides({0: _valley(2**-4)}, GRID) == {1}  # optimum above the grid
    assert edge_sides({0: _valley(2**-11)}, GRID) == {-1}
    assert edge_sides({0: _valley(2**-7.5), 1: _valley(2**-8)}, GRID) == set()


@pytest.mark.parametrize("value", [0.00214930569733557, 0.00311561206143147, 0.1, 3e-3])
def test_an_optimum_trains_at_an_lr_its_last_bit_does_not_move(value: float) -> None:
    a = Optimum(value, value / 2, value * 2, 2, True)
    b = Optimum(math.nextafter(value, 1.0), value / 2, value * 2, 2, True)  # one ulp up
    assert a.lr == b.lr and a.lr == pytest.approx(value, rel=1e-11)
