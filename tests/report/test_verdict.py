"""The one verdict rule (every claim read off one interval, against the margin) on constructed
intervals and on draws whose truth is known; and ``decide:``'s stopping rule against
statsmodels, a textbook's sample sizes and the interval a TOST is equivalent to."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.power import TTestPower

from ablate.report.verdict import (
    Estimate,
    Word,
    difference_estimate,
    judge,
    rank_estimate,
    ratio_estimate,
    reach,
    seeds_to_decide,
)


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


def _difference(low: float, high: float, seeds: int = 7) -> Estimate:
    return Estimate((low + high) / 2, low, high, 0.99, seeds, "difference", 0.01)


@pytest.mark.parametrize(
    ("low", "high", "word", "differs"),
    [
        (-0.0195, +0.0185, Word.EQUIVALENT, False),  # issue 72's matched-settings estimate
        (-0.008, -0.002, Word.EQUIVALENT, True),  # inside the margin, and not 0
        (-0.0455, +0.0025, Word.INCONCLUSIVE, False),  # holds 0, reaches past -0.02
        (-0.0395, -0.0035, Word.DIFFERS, True),  # excludes 0, crosses -0.02
        (-0.06, -0.025, Word.EXCEEDS, True),  # wholly beyond -0.02
        (+0.021, +0.05, Word.EXCEEDS, True),
    ],
)
def test_every_word_is_where_the_interval_lies_against_the_margin(
    low: float, high: float, word: Word, differs: bool
) -> None:
    found = judge(_difference(low, high), 0.02)
    assert (found.word, found.differs) == (word, differs)
    assert found.decided == (word is not Word.INCONCLUSIVE)


def test_a_ratio_is_judged_on_its_log_against_a_factor() -> None:
    ratio = Estimate(1.3, 0.9, 1.4, 0.99, 5, "ratio", 0.1)
    assert judge(ratio, 1.5).word is Word.EQUIVALENT  # inside [1/1.5, 1.5]
    assert judge(Estimate(2.1, 1.6, 3.3, 0.99, 5, "ratio", 0.1), 1.5).word is Word.EXCEEDS
    assert judge(Estimate(2.1, 1.35, 3.3, 0.99, 5, "ratio", 0.1), 1.5).word is Word.DIFFERS
    assert judge(Estimate(1.0, 0.5, 2.0, 0.99, 5, "ratio", 0.1), 1.5).word is Word.INCONCLUSIVE


@pytest.mark.parametrize(
    ("estimate", "why"),
    [
        (Estimate(4.21, 0.023, 772.0, 0.95, 5, "ratio", 1.0), "wider than 100×"),
        (Estimate(1.0, float("nan"), float("nan"), 0.95, 1, "ratio"), "fewer than 2 seeds"),
        (Estimate(1.19, 1.0, 1.41, 0.95, 5, "ratio", 0.0, resolved=False), "one bracket"),
    ],
)
def test_an_interval_the_data_cannot_support_is_not_estimable(estimate: Estimate, why: str) -> None:
    found = judge(estimate, 1.5)
    assert found.word is Word.NOT_ESTIMABLE and why in found.why
    assert str(estimate.high) not in found.text() and str(estimate.seeds) in found.text()


def test_on_ranks_an_interval_bounded_at_neither_end_is_not_estimable() -> None:
    # three seeds, each run of the variant diverged (the worst): a signed-rank test of 3 seeds
    # gives no p under 0.25, so at 99% neither end is bounded
    unbounded = rank_estimate(np.array([np.inf, np.inf, np.inf]), 0.99)
    assert (unbounded.low, unbounded.high) == (-np.inf, np.inf)
    assert judge(unbounded, 0.02).word is Word.NOT_ESTIMABLE
    # eight seeds, one diverged: one end bounded, a finding on ranks
    one_sided = rank_estimate(np.array([np.inf, 0.01, -0.03, 0.02, -0.01, 0.0, 0.04, -0.02]), 0.975)
    assert math.isfinite(one_sided.low) or math.isfinite(one_sided.high)
    assert judge(one_sided, 0.02).word is not Word.NOT_ESTIMABLE


def test_the_estimates_are_t_intervals_of_the_seeds() -> None:
    diffs = np.array([0.012, -0.004, 0.021, 0.003, 0.009])
    found = difference_estimate(diffs, 0.99)
    low, high = stats.ttest_1samp(diffs, 0.0).confidence_interval(0.99)
    assert (found.low, found.high) == (pytest.approx(low), pytest.approx(high))
    logs = np.log2([1.2, 1.1, 1.4, 0.9])
    ratio = ratio_estimate(logs, 0.95, widen=0.125)
    low, high = stats.ttest_1samp(logs, 0.0).confidence_interval(0.95)
    assert ratio.value == pytest.approx(2 ** logs.mean())  # the centre of its interval
    assert ratio.low == pytest.approx(2 ** (low - 0.125))
    assert ratio.high == pytest.approx(2 ** (high + 0.125))


def test_more_seeds_decide_at_the_projected_count() -> None:
    rng = np.random.default_rng(3)
    base = rng.normal(0.008, 0.012, size=5)
    found = judge(difference_estimate(base, 0.99), 0.02)
    assert found.word is Word.INCONCLUSIVE and found.more_seeds is not None
    n = 5 + found.more_seeds
    half = stats.t.ppf(0.995, n - 1) * base.std(ddof=1) / np.sqrt(n)
    before = stats.t.ppf(0.995, n - 2) * base.std(ddof=1) / np.sqrt(n - 1)
    room = max(abs(base.mean()), 0.02 - abs(base.mean()))
    assert half < room <= before
    # a lattice's resolution wider than the room leaves it to a finer lattice
    coarse = Estimate(1.0, 0.5, 2.0, 0.99, 5, "ratio", 0.2, widen=0.6)
    assert seeds_to_decide(coarse, 1.5) is None


@pytest.mark.parametrize("truth", [0.0, 0.01, 0.02, 0.03])
def test_a_false_claim_is_no_likelier_than_one_minus_the_level(truth: float) -> None:
    # at no effect and at the margin's edge, where the rule is most at risk: a claim is false
    # only where the interval misses the truth, so at most 1 − level of the draws
    rng = np.random.default_rng(int(truth * 1000))
    draws = rng.normal(truth, 0.015, size=(5000, 6))
    false = 0
    for row in draws:
        found = judge(difference_estimate(row, 0.9), 0.02)
        wrong = {
            Word.DIFFERS: truth == 0,
            Word.EXCEEDS: truth <= 0.02,
            Word.EQUIVALENT: truth >= 0.02 or (found.differs and truth == 0),
        }.get(found.word, False)
        if wrong:
            assert not found.estimate.low <= truth <= found.estimate.high
        false += bool(wrong)
    assert false / len(draws) <= 0.10 + 0.013  # three standard errors over 5,000


def test_a_verdict_decided_at_its_edge_is_a_close_call() -> None:
    equivalent = judge(_difference(-0.0194, +0.0185), 0.02)  # ln_vs_rms's primary
    assert equivalent.slack == pytest.approx(0.0006 / 0.01895)
    differs = judge(Estimate(1.49, 1.0028, 2.213, 0.99, 5, "ratio", 0.1), 1.5)  # llama's edge
    assert differs.word is Word.DIFFERS and 0 < differs.slack < 0.01
    wide_margin = judge(_difference(-0.008, -0.002), 0.02)
    assert wide_margin.slack == pytest.approx(0.012 / 0.003)
    assert math.isnan(judge(_difference(-0.04, 0.01), 0.02).slack)  # undecided: no edge


def test_ratios_read_off_a_lattice_never_claim_less_spread_than_the_lattice_has() -> None:
    # both seeds' edges moved one 2^(1/4) step: a spread of 0 is the grid's, not the runs'
    two = ratio_estimate(np.array([0.25, 0.25]), 0.99375, widen=0.25)
    assert two.spread == pytest.approx(0.25 / math.sqrt(6))
    assert judge(two, 1.5, 100.0).word is Word.NOT_ESTIMABLE  # not "exceeds" on 2 seeds
    five = ratio_estimate(np.full(5, 0.25), 0.99375, widen=0.25)
    half = math.log2(five.high) - 0.25
    assert half == pytest.approx(0.25 + stats.t.ppf(0.996875, 4) * 0.25 / math.sqrt(6 * 5))
    spread = ratio_estimate(np.array([0.0, 0.5, 1.0, 0.25, 0.75]), 0.95, widen=0.25)
    assert spread.spread == pytest.approx(np.std([0.0, 0.5, 1.0, 0.25, 0.75], ddof=1))  # above
