"""Per-seed stability boundaries on the shared lattice and their intervals, on synthetic probes
whose edges are known."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import pytest
from scipy import stats

from ablate.core.boundary import (
    Interval,
    SeedBoundary,
    boundary_ratio,
    bracket_seed,
    edge_of_points,
    half_width,
    lattice_index,
    lattice_lr,
    paired_log2_ratios,
    variant_boundary,
)

STEP = 2 ** (1 / 8)
RANGE = (1e-6, 100.0)


def _edge(edge: float) -> Callable[[float], bool]:
    return lambda lr: lr < edge


def _on_lattice(lr: float) -> bool:
    return math.isclose(lr, lattice_lr(lattice_index(lr)), rel_tol=1e-12)


@pytest.mark.parametrize("start", [1e-4, 0.003, 0.05, 0.9, 30.0])
@pytest.mark.parametrize("edge", [0.0123, 0.2, 0.5])
def test_a_seed_is_bracketed_to_one_lattice_step_around_its_edge(start: float, edge: float) -> None:
    found = bracket_seed(_edge(edge), 0, start, RANGE)
    assert found.last_stable < edge <= found.first_unstable
    assert found.first_unstable / found.last_stable == pytest.approx(STEP)
    assert all(_on_lattice(lr) for lr, _ in found.probes)
    assert found.estimate == pytest.approx(math.sqrt(found.last_stable * found.first_unstable))


def test_variants_from_different_starts_probe_the_same_lattice() -> None:
    first = bracket_seed(_edge(0.07), 0, 0.004, RANGE)
    second = bracket_seed(_edge(0.07), 0, 0.0131, RANGE)  # another start, the same edge
    assert (first.last_stable, first.first_unstable) == (second.last_stable, second.first_unstable)


def test_a_seed_that_fails_first_does_not_decide_another_seeds_bracket() -> None:
    edges = {0: 0.3, 1: 0.1}
    found = [bracket_seed(_edge(edges[s]), s, 0.004, RANGE) for s in (0, 1)]
    for bound in found:
        assert bound.last_stable < edges[bound.seed] <= bound.first_unstable


@pytest.mark.parametrize("edge", [0.061, 0.07, 0.09, 0.2])
def test_a_start_near_the_edge_with_doubling_moves_closes_in_few_probes(edge: float) -> None:
    far = bracket_seed(_edge(edge), 0, 0.004, RANGE)
    near = bracket_seed(_edge(edge), 1, 0.07, RANGE, first_step=1)  # another seed's boundary
    assert (near.last_stable, near.first_unstable) == (far.last_stable, far.first_unstable)
    steps_away = abs(lattice_index(edge) - lattice_index(0.07))
    assert len(near.probes) <= 2 + 2 * math.ceil(math.log2(steps_away + 1))  # moves + bisection
    if steps_away <= 3:  # seeds a few steps apart: fewer probes than from a far start
        assert len(near.probes) < len(far.probes)


def test_a_seed_stable_to_the_range_end_has_no_boundary() -> None:
    up = bracket_seed(lambda lr: True, 0, 0.01, (1e-3, 1.0))
    down = bracket_seed(lambda lr: False, 0, 0.01, (1e-3, 1.0))
    assert up.first_unstable is None and up.last_stable == lattice_lr(lattice_index(1.0))
    # the range's lowest lattice point: the first at or above 1e-3
    assert down.last_stable is None and down.first_unstable / STEP < 1e-3 <= down.first_unstable
    assert up.estimate is None and variant_boundary([up, down]) is None


def _bound(seed: int, index: int) -> SeedBoundary:
    return SeedBoundary(seed, lattice_lr(index), lattice_lr(index + 1))


def test_a_variants_boundary_is_the_seeds_geometric_mean_with_a_t_interval_and_lattice() -> None:
    bounds = [_bound(0, -30), _bound(1, -27), _bound(2, -25)]
    logs = [math.log2(b.estimate) for b in bounds]
    found = variant_boundary(bounds)
    half = stats.t.ppf(0.975, 2) * statistics.stdev(logs) / math.sqrt(3) + 1 / 16
    assert found == pytest.approx(
        Interval(
            2 ** statistics.fmean(logs),
            2 ** (statistics.fmean(logs) - half),
            2 ** (statistics.fmean(logs) + half),
            3,
        )
    )
    alike = variant_boundary([_bound(0, -30), _bound(1, -30)])  # no spread: the lattice's width
    assert alike.high / alike.low == pytest.approx(STEP)
    assert alike.low == pytest.approx(lattice_lr(-30)) and alike.seeds == 2


def test_a_ratio_is_paired_by_seed_and_shown_only_when_its_interval_excludes_one() -> None:
    first = [_bound(0, -30), _bound(1, -28), _bound(2, -29)]
    second = [_bound(0, -14), _bound(1, -13), _bound(2, -9), _bound(3, 0)]  # seed 3 unpaired
    differences = [16, 15, 20]  # lattice steps, seed by seed: mean 17, median 16
    assert paired_log2_ratios(first, second) == pytest.approx([d / 8 for d in differences])
    found = boundary_ratio(first, second)
    assert found.seeds == 3 and found.value == pytest.approx(2 ** (17 / 8))  # geometric mean
    half = stats.t.ppf(0.975, 2) * statistics.stdev(differences) / 8 / math.sqrt(3) + 1 / 8
    assert math.log2(found.high) == pytest.approx(17 / 8 + half) and found.shown
    same = boundary_ratio(first, first)
    assert same.value == 1.0 and not same.shown  # equal boundaries: one lattice step either way
    assert same.high == pytest.approx(STEP) and same.low == pytest.approx(1 / STEP)


def test_an_edge_from_scattered_runs_ignores_a_low_lr_that_did_not_learn_yet() -> None:
    points = [(1e-4, False), (1e-3, True), (0.01, True), (0.03, False), (0.1, False)]
    found = edge_of_points(0, points)  # 1e-4 did not learn in the budget: not the edge
    assert (found.last_stable, found.first_unstable) == (0.01, 0.03)
    assert edge_of_points(0, [(0.1, True), (1.0, True)]).first_unstable is None
    never = edge_of_points(0, [(0.1, False), (1.0, False)])
    assert never.last_stable is None and never.first_unstable == 0.1
    assert half_width([found]) == pytest.approx(math.log2(3) / 2)
