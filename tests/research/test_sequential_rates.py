"""``decide:``'s sequential design against a known truth, 4000 seeded replications each, at
ln_vs_rms's calibrated run noise: how often an interval excludes a true Δ = 0 over every look,
its power at Δ = 2m, and that with room for seeds it reaches "equivalent" under Δ = 0; and
that its vectorised rule is the report's own (:func:`ablate.report.verdict.judge`)."""

from __future__ import annotations

import numpy as np
import pytest

from ablate.core.experiment import MIN_EFFECT
from ablate.core.sequential import ALPHA
from ablate.report.verdict import difference_estimate, judge
from research.sequential import (
    SCENARIOS,
    Scenario,
    fitted_differences,
    interval_words,
    outcome,
    sequential_words,
    stopped_coverage,
    table,
)

PRIMARY = ALPHA * 0.5  # the default plan's primary share of α

REPLICATIONS = 4000
BY_NAME = {s.name: s for s in SCENARIOS}


def test_each_look_judges_as_the_report_judges_the_primary() -> None:
    rng = np.random.default_rng(2)
    diffs = rng.normal(rng.choice([0.0, 0.015, 0.05], size=(80, 1, 2)), 0.012, size=(80, 5, 2))
    found, excludes = interval_words(diffs, 0.02, 0.99)
    for replication, row, out in zip(diffs, found, excludes, strict=True):
        verdicts = [judge(difference_estimate(replication[:, j], 0.99), 0.02) for j in range(2)]
        assert list(row) == [v.word.value for v in verdicts]
        assert list(out) == [v.differs for v in verdicts]
    assert set(found.ravel()) == {"exceeds", "differs", "equivalent", "inconclusive"}


def test_a_replication_stops_at_its_first_look_where_every_comparison_is_decided() -> None:
    big = np.full((1, 9, 1), 0.05) + np.array([0.001, -0.001] * 4 + [0.0])[None, :, None]
    noise = np.array([0.03, -0.03, 0.02, -0.02, 0.01, -0.01, 0.0, 0.005, -0.005])
    slow = 0.01 + noise[None, :, None]
    found, _, used = sequential_words(np.concatenate([big, slow]), [3, 5, 7, 9], 0.02, 0.99)
    assert list(found[:, 0]) == ["exceeds", "inconclusive"]
    assert list(used) == [3, 9]  # one decided at once, the other never: its last look


def test_under_no_difference_an_interval_excludes_it_at_most_its_share_of_alpha() -> None:
    for name in ("null_to_20", "two_nulls_to_20", "null_and_2m_to_40"):
        found = outcome(BY_NAME[name], REPLICATIONS, seed=1)
        assert found.any_false_differs <= PRIMARY + 0.005, name


def test_a_difference_of_twice_the_smallest_effect_is_found_to_differ() -> None:
    found = outcome(BY_NAME["gap_2m_to_20"], REPLICATIONS, seed=2)
    assert found.differs + found.exceeds >= 0.8
    assert found.mean_seeds < 20  # it stops early, not at its maximum


def test_with_room_for_seeds_no_difference_is_found_equivalent() -> None:
    found = outcome(BY_NAME["null_to_40"], REPLICATIONS, seed=3)
    assert found.equivalent >= 0.8


def test_a_design_too_small_stays_inconclusive_rather_than_guess() -> None:
    # 3 → 5 seeds at a run noise of 0.03: neither claim is in reach
    found = outcome(Scenario("tiny", (0.0,), 5, run_sd=0.03), REPLICATIONS, seed=4)
    assert found.inconclusive >= 0.9
    assert found.any_false_differs <= PRIMARY + 0.005  # 4000 draws: a Monte Carlo SE of 0.0025


def test_a_fixed_design_is_one_look_at_the_primarys_whole_share() -> None:
    # one look (max_seeds = the start) tests at the primary's share of α itself: ~2.5% of
    # intervals exclude a true 0, so the looks' Bonferroni split is what keeps it down
    found = outcome(Scenario("fixed", (0.0,), 3), 20_000, seed=5)
    assert found.any_false_differs == pytest.approx(PRIMARY, abs=0.005)


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
