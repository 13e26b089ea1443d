"""``decide:``'s sequential design against a known truth, 4000 seeded replications each, at
ln_vs_rms's calibrated run noise: its false "different" under Δ = 0 over every look, its power
at Δ = 2m, and that with room for seeds it reaches "equivalent" under Δ = 0."""

from __future__ import annotations

import pytest

from ablate.core.experiment import MIN_EFFECT
from ablate.core.sequential import ALPHA
from research.sequential import (
    SCENARIOS,
    Scenario,
    fitted_differences,
    outcome,
    stopped_coverage,
    table,
)

REPLICATIONS = 4000
BY_NAME = {s.name: s for s in SCENARIOS}


def test_under_no_difference_it_says_different_at_most_alpha_over_all_its_looks() -> None:
    for name in ("null_to_20", "two_nulls_to_20", "null_and_2m_to_40"):
        found = outcome(BY_NAME[name], REPLICATIONS, seed=1)
        assert found.any_false_different <= ALPHA + 0.01, name


def test_a_difference_of_twice_the_smallest_effect_is_found_different() -> None:
    found = outcome(BY_NAME["gap_2m_to_20"], REPLICATIONS, seed=2)
    assert found.different >= 0.8
    assert found.mean_seeds < 20  # it stops early, not at its maximum


def test_with_room_for_seeds_no_difference_is_found_equivalent() -> None:
    found = outcome(BY_NAME["null_to_40"], REPLICATIONS, seed=3)
    assert found.equivalent >= 0.8


def test_a_design_too_small_stays_inconclusive_rather_than_guess() -> None:
    # 3 → 5 seeds at a run noise of 0.03: neither claim is in reach
    found = outcome(Scenario("tiny", (0.0,), 5, run_sd=0.03), REPLICATIONS, seed=4)
    assert found.inconclusive >= 0.9
    assert found.any_false_different <= ALPHA


def test_a_fixed_design_is_one_look_at_the_full_alpha() -> None:
    # one look (max_seeds = the start) tests at α itself: ~5% false "different", so the
    # looks' Bonferroni split is what keeps the sequential design's error down
    found = outcome(Scenario("fixed", (0.0,), 3), 20_000, seed=5)
    assert found.any_false_different == pytest.approx(ALPHA, abs=0.01)


def test_the_table_names_every_scenario() -> None:
    text = table(200)
    assert all(f"`{s.name}`" in text for s in SCENARIOS)
    assert f"{2 * MIN_EFFECT:+g}" in text


def test_on_the_fitted_simulator_the_interval_at_the_looks_level_covers_where_95_does_not() -> None:
    counts = [3, 5, 7, 9]  # ln_vs_rms's looks
    diffs, delta = fitted_differences(600, 9)
    assert diffs.shape == (600, 9, 1) and delta == pytest.approx(-0.0038, abs=5e-4)
    found = stopped_coverage(diffs, delta, counts)
    assert found.at_looks >= 0.95 and found.unadjusted < found.at_looks - 0.02
    assert 3 <= found.mean_seeds <= 9
