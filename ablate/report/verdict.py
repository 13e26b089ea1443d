"""What a paired comparison could have seen, and the one of three verdicts it supports.

For the matched differences of two variants (one per seed) and the experiment's smallest effect
of interest m (``analysis.min_effect``):

- **the design's reach**: the paired SD of the differences, the minimum detectable effect (the
  |Δ| a two-sided paired t-test at α detects with 80% power from this many pairs and this SD)
  and the pairs that detecting m would take (statsmodels' ``TTestPower``);
- **the verdict**: *different* where the test rejects Δ = 0 at α (on the Holm-adjusted p
  where the report makes several comparisons); else *equivalent within ±m* where both one-sided
  tests reject |Δ| ≥ m at α (TOST: the 1 − 2α interval lies inside ±m; Bonferroni-adjusted
  over the report's comparisons); else *inconclusive*, with about how many more seeds
  detecting m would take. "No difference" is never a verdict: an interval that spans zero is
  inconclusive until it is also inside ±m. With ``decide:`` α is the level of one look
  (:mod:`ablate.core.sequential`).

:func:`tost_p` and :func:`words` take arrays (many replications at once, for the sequential
design's tests); the TOST is scipy's one-sided ``ttest_1samp`` twice, which gives statsmodels'
``ttost_paired`` p (tests/report/test_verdict.py holds them together).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import ttest_1samp
from statsmodels.stats.power import TTestPower

from ablate.core.sequential import ALPHA, look_alpha
from ablate.report.analysis import holm_rows

POWER = 0.8
MAX_PAIRS = 10_000  # beyond this a design "cannot" detect the effect: reported as such


@dataclass(frozen=True)
class Reach:
    """What a paired design of ``pairs`` differences with SD ``sd`` can detect."""

    pairs: int
    sd: float  # paired SD of the differences (nats)
    mde: float  # minimum detectable |Δ| at POWER, two-sided α (nats)
    pairs_needed: int | None  # pairs to detect min_effect at POWER; None: over MAX_PAIRS

    def needed_text(self, min_effect: float) -> str:
        """What detecting ``min_effect`` takes, e.g. ``±0.02 needs 5 pairs``."""
        if self.pairs_needed is None:
            return f"±{min_effect:g} is out of reach"
        return f"±{min_effect:g} needs {self.pairs_needed} pairs"


@dataclass(frozen=True)
class Verdict:
    """A comparison's verdict: different, equivalent or inconclusive, and its numbers."""

    word: str  # "different", "equivalent" or "inconclusive"
    min_effect: float
    tost_p: float  # the larger one-sided p against ±min_effect (× the family, at most 1)
    reach: Reach
    more_seeds: int | None  # for an inconclusive one: pairs_needed − pairs (at least 1)

    def text(self) -> str:
        """The verdict in words, e.g. ``inconclusive — about 12 more seeds``."""
        if self.word == "different":
            return "different"
        if self.word == "equivalent":
            return f"equivalent within ±{self.min_effect:g}"
        if self.more_seeds is None:
            return f"inconclusive — ±{self.min_effect:g} is beyond what more seeds can reach"
        seeds = "seed" if self.more_seeds == 1 else "seeds"
        return f"inconclusive — about {self.more_seeds} more {seeds}"


def _power(effect_size: float, pairs: int, alpha: float) -> float:
    """The two-sided paired t-test's power at ``effect_size`` (Δ/SD): its upper tail at α/2
    (statsmodels' ``TTestPower``, ``alternative="larger"``). The lower tail it leaves out is
    below 1e-6 wherever the power is near 80%; statsmodels' own two-sided sum adds it through
    scipy's noncentral t, which returns NaN there at large noncentrality. Its upper tail
    returns NaN only where it is 1 to machine precision (effect sizes of 9 and more at 8-20
    pairs, on a grid of 0.01-50 by 2-10,000 pairs): read as 1."""
    power = float(TTestPower().power(effect_size, pairs, alpha / 2, alternative="larger"))
    return 1.0 if math.isnan(power) else power


def reach(diffs: np.ndarray, min_effect: float, alpha: float = ALPHA) -> Reach:
    """The paired SD, the minimum detectable effect and the pairs ``min_effect`` needs."""
    n = len(diffs)
    sd = float(np.std(diffs, ddof=1)) if n > 1 else math.nan
    if n < 2 or not math.isfinite(sd):
        return Reach(n, sd, math.nan, None)
    if sd == 0:
        return Reach(n, sd, 0.0, 2)
    effect = TTestPower().solve_power(nobs=n, alpha=alpha / 2, power=POWER, alternative="larger")
    return Reach(n, sd, float(effect) * sd, _pairs_for(min_effect / sd, alpha))


def _pairs_for(effect_size: float, alpha: float) -> int | None:
    """The smallest number of pairs (≥ 2) whose paired t-test detects ``effect_size`` with
    POWER: doubling from 2 until it is enough, then bisecting over whole pairs; None when it
    is over MAX_PAIRS."""

    def enough(n: int) -> bool:
        return _power(effect_size, n, alpha) >= POWER

    low, high = 1, 2
    while not enough(high):
        if high >= MAX_PAIRS:
            return None
        low, high = high, min(2 * high, MAX_PAIRS)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


def tost_p(diffs: np.ndarray, min_effect: float) -> np.ndarray:
    """The TOST p of |Δ| ≥ ``min_effect`` for matched differences along the last axis: the
    larger of the two one-sided t-tests' p."""
    above = ttest_1samp(diffs, -min_effect, axis=-1, alternative="greater").pvalue
    below = ttest_1samp(diffs, min_effect, axis=-1, alternative="less").pvalue
    return np.maximum(above, below)


def words(p_value: np.ndarray, tost: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """The verdict's word for each (p of Δ = 0, TOST p), both already adjusted for the family:
    ``different`` below α, else ``equivalent`` where the TOST is below α, else
    ``inconclusive``."""
    p_value, tost = np.asarray(p_value), np.asarray(tost)
    equivalent = np.where(tost < alpha, "equivalent", "inconclusive")
    return np.where(p_value < alpha, "different", equivalent)


def verdict(
    diffs: np.ndarray, min_effect: float, p_value: float, family: int = 1, alpha: float = ALPHA
) -> Verdict | None:
    """The verdict of the matched ``diffs`` (variant − baseline) whose test of Δ = 0 gave
    ``p_value`` (Holm-adjusted where there are several comparisons); in a ``family`` of
    comparisons the TOST's p is Bonferroni-adjusted (× family, at most 1), so that claims of
    equivalence keep the family-wise error at α too. None below 2 pairs."""
    diffs = np.asarray(diffs, dtype=float)
    found = reach(diffs, min_effect, alpha)
    if found.pairs < 2 or not math.isfinite(found.sd):
        return None
    if found.sd == 0:
        tost = 0.0 if abs(diffs[0]) < min_effect else 1.0
    else:
        tost = float(tost_p(diffs, min_effect))
    tost = min(1.0, tost * family)
    word = str(words(p_value if math.isfinite(p_value) else 1.0, tost, alpha))
    more = None
    if word == "inconclusive" and found.pairs_needed is not None:
        more = max(1, found.pairs_needed - found.pairs)
    return Verdict(word, min_effect, tost, found, more)


def look_words(diffs: np.ndarray, min_effect: float, level: float) -> np.ndarray:
    """The words of one look at ``diffs`` (replication, seed, comparison): every comparison
    judged as :func:`verdict` judges it (Holm over the comparisons, the TOST
    Bonferroni-adjusted) at ``level``; (replication, comparison)."""
    family = diffs.shape[-1]
    p = holm_rows(ttest_1samp(diffs, 0.0, axis=1).pvalue)
    tost = np.minimum(1.0, tost_p(np.moveaxis(diffs, 1, -1), min_effect) * family)
    return words(p, tost, level)


def sequential_words(
    diffs: np.ndarray, counts: list[int], min_effect: float, alpha: float = ALPHA
) -> tuple[np.ndarray, np.ndarray]:
    """``decide:``'s rule over replications: ``diffs`` (replication, seed, comparison) are
    matched differences to the baseline; at each look (the first ``counts[k]`` seeds) every
    comparison is judged (:func:`look_words`) at α / len(counts), and a replication stops at
    the first look where all of them are decided. Returns the words where each stopped
    (replication, comparison) and the seeds each used."""
    level = look_alpha(len(counts), alpha)
    final = np.full(diffs.shape[::2], "inconclusive", dtype=object)
    used = np.full(len(diffs), counts[-1])
    open_ = np.ones(len(diffs), dtype=bool)
    for count in counts:
        found = look_words(diffs[open_, :count, :], min_effect, level)
        decided = (found != "inconclusive").all(axis=1)
        rows = np.flatnonzero(open_)
        final[rows] = found
        used[rows[decided]] = count
        open_[rows[decided]] = False
        if not open_.any():
            break
    return final, used
