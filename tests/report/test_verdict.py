"""A paired comparison's reach and verdict against statsmodels, a textbook's sample sizes and
the interval a TOST is equivalent to, on constructed differences."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import ttost_paired

from ablate.report.analysis import holm
from ablate.report.verdict import look_words, reach, sequential_words, tost_p, verdict


@pytest.mark.parametrize(("effect_size", "pairs"), [(0.5, 34), (0.8, 15), (1.0, 10)])
def test_pairs_needed_are_the_textbook_sample_sizes(effect_size: float, pairs: int) -> None:
    # two-sided paired t at α 0.05 and 80% power (Cohen 1988; G*Power gives the same)
    diffs = np.array([-1.0, 0.0, 1.0])  # sd 1
    assert reach(diffs, effect_size).pairs_needed == pairs


def test_the_reach_is_statsmodels_paired_t_power() -> None:
    diffs = np.array([0.012, -0.004, 0.021, 0.003, 0.009])
    found = reach(diffs, 0.02)
    sd = diffs.std(ddof=1)
    power = TTestPower()
    assert found.sd == pytest.approx(sd)
    two_sided = power.solve_power(nobs=5, alpha=0.05, power=0.8)  # both tails
    assert found.mde == pytest.approx(two_sided * sd, rel=1e-4)  # the lower tail is ~1e-6
    n = found.pairs_needed
    assert power.power(0.02 / sd, n, 0.05) >= 0.8 > power.power(0.02 / sd, n - 1, 0.05)
    # where scipy's noncentral t fails (NaN at large noncentrality) a few pairs still suffice
    assert reach(np.array([-0.0038, 0.0, 0.0038]), 0.02).pairs_needed == 3
    assert reach(diffs, 1e-6).pairs_needed is None  # beyond any number of seeds


def test_equivalence_is_a_ninety_percent_interval_inside_the_margin() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        diffs = rng.normal(rng.uniform(-0.02, 0.02), 0.01, size=6)
        found = verdict(diffs, 0.02, p_value=1.0)
        assert found is not None
        p_tost = ttost_paired(diffs, np.zeros_like(diffs), -0.02, 0.02)[0]
        assert found.tost_p == pytest.approx(p_tost)
        low, high = stats.ttest_1samp(diffs, 0.0).confidence_interval(0.90)
        inside = -0.02 < low and high < 0.02
        assert (found.word == "equivalent") == inside


def test_three_verdicts_and_the_seeds_an_inconclusive_one_needs() -> None:
    different = verdict(np.array([-0.10, -0.11, -0.09]), 0.02, p_value=0.001)
    assert different is not None and different.text() == "different"
    same = verdict(np.array([0.001, -0.002, 0.0015, 0.0005, -0.001]), 0.02, p_value=0.6)
    assert same is not None and same.text() == "equivalent within ±0.02"
    unsure = verdict(np.array([0.01, -0.02, 0.04]), 0.02, p_value=0.6)
    assert unsure is not None and unsure.word == "inconclusive"
    assert unsure.more_seeds == unsure.reach.pairs_needed - 3 > 0
    assert unsure.text() == f"inconclusive — about {unsure.more_seeds} more seeds"
    held = verdict(np.array([-0.10, -0.11, -0.09]), 0.02, p_value=0.07)  # Holm-adjusted
    assert held is not None and held.word == "inconclusive"
    assert verdict(np.array([0.03]), 0.02, p_value=float("nan")) is None


def test_in_a_family_equivalence_is_bonferroni_adjusted() -> None:
    diffs = np.array([-0.006, 0.0014, 0.0088])  # TOST p about 0.025 alone
    alone = verdict(diffs, 0.02, p_value=0.8)
    among_six = verdict(diffs, 0.02, p_value=0.8, family=6)
    assert alone is not None and among_six is not None
    assert among_six.tost_p == pytest.approx(min(1.0, 6 * alone.tost_p))
    assert (alone.word, among_six.word) == ("equivalent", "inconclusive")


def test_the_tost_is_statsmodels_ttost_paired_row_by_row() -> None:
    rng = np.random.default_rng(1)
    rows = rng.normal(rng.uniform(-0.03, 0.03, size=(40, 1)), 0.012, size=(40, 7))
    ours = tost_p(rows, 0.02)
    for row, p in zip(rows, ours, strict=True):
        assert p == pytest.approx(ttost_paired(row, np.zeros_like(row), -0.02, 0.02)[0], rel=1e-9)


def test_one_look_judges_each_replication_as_the_report_judges_one_comparison() -> None:
    rng = np.random.default_rng(2)
    diffs = rng.normal(rng.choice([0.0, 0.01, 0.04], size=(60, 1, 2)), 0.015, size=(60, 5, 2))
    found = look_words(diffs, 0.02, 0.01)
    for replication, row in zip(diffs, found, strict=True):
        p = holm([stats.ttest_1samp(replication[:, j], 0.0).pvalue for j in range(2)])
        expected = [verdict(replication[:, j], 0.02, p[j], 2, 0.01).word for j in range(2)]
        assert list(row) == expected
    assert set(found.ravel()) == {"different", "equivalent", "inconclusive"}


def test_a_replication_stops_at_its_first_look_where_every_comparison_is_decided() -> None:
    big = np.full((1, 9, 1), 0.05) + np.array([0.001, -0.001] * 4 + [0.0])[None, :, None]
    noise = np.array([0.03, -0.03, 0.02, -0.02, 0.01, -0.01, 0.0, 0.005, -0.005])
    slow = 0.01 + noise[None, :, None]
    found, used = sequential_words(np.concatenate([big, slow]), [3, 5, 7, 9], 0.02)
    assert list(found[:, 0]) == ["different", "inconclusive"]
    assert list(used) == [3, 9]  # one decided at once, the other never: its last look
