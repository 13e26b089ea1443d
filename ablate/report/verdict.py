"""Every verdict word ablate prints, from one rule; and ``decide:``'s stopping rule.

**The report's rule.** A verdict-bearing estimand (:mod:`ablate.report.plan`) comes as an
:class:`Estimate`: its value and one interval at the level the analysis plan gives it (its
share of the report's family-wise α). :func:`judge` reads every claim off that one interval,
against the margin m (``analysis.min_effect`` nats for a loss, a factor for a ratio):

- *not estimable with n seeds*: under 2 seeds, every seed in one bracket (no spread
  measured), or a ratio's interval wider than ``analysis.not_estimable`` (100×): no number
  is printed in prose, only in the CSVs;
- *exceeds ±m*: the interval lies wholly beyond the margin (so it excludes no effect too);
- *equivalent within ±m*: it lies wholly inside the margin (where it also excludes no effect,
  the verdict says so: the two claims are separate);
- *differs from 0*: it excludes no effect but reaches past the margin;
- *inconclusive*: it holds no effect and reaches past the margin, with about how many more
  seeds would decide it were its estimate and spread to stay (:func:`seeds_to_decide`).

Each claim says the interval holds the truth, so an estimand makes a false claim with
probability at most 1 − level whatever the truth; Bonferroni over the family (the plan's shares
of α) keeps the report's at α (why not Holm: docs/report.md, the analysis plan).

**decide:'s stopping rule** is this rule too: it adds seeds until the primary estimand's
verdict, judged here at the level the plan gives each look, is decided
(:func:`ablate.report.estimands.primary_verdicts`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

import numpy as np
from scipy import stats
from statsmodels.stats.power import TTestPower

from ablate.core.sequential import ALPHA
from ablate.report.analysis import signed_rank

POWER = 0.8
MAX_PAIRS = 10_000  # beyond this a design "cannot" reach a verdict: reported as such
NOT_ESTIMABLE = 100.0  # a ratio's interval wider than this factor is no finding
CLOSE = 0.1  # a decided verdict whose deciding end is this share of its half-width from its edge
Scale = Literal["difference", "ratio"]


class Word(StrEnum):
    """The claims a verdict-bearing estimand can support."""

    EXCEEDS = "exceeds"
    EQUIVALENT = "equivalent"
    DIFFERS = "differs"
    INCONCLUSIVE = "inconclusive"
    NOT_ESTIMABLE = "not estimable"


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its interval at ``level``, from ``seeds`` seeds. A ratio is kept
    as the ratio (its interval from a t interval of per-seed log2 values); ``spread`` is the
    per-seed SD on the analysis scale (nats, or log2) and ``widen`` what the interval adds for
    a lattice's resolution (log2), both for :func:`seeds_to_decide`; ``resolved`` is false
    where every seed fell in one bracket; ``ranked``: by ranks, a run that diverged counted as
    the worst (its interval may have an infinite end)."""

    value: float
    low: float
    high: float
    level: float
    seeds: int
    scale: Scale = "difference"
    spread: float = math.nan
    widen: float = 0.0
    resolved: bool = True
    ranked: bool = False

    @property
    def null(self) -> float:
        """No effect on this scale: 0 for a difference, 1 for a ratio."""
        return 1.0 if self.scale == "ratio" else 0.0


@dataclass(frozen=True)
class Verdict:
    """What one estimand's interval supports (:func:`judge`)."""

    word: Word
    estimate: Estimate
    margin: float  # nats for a difference, a factor (> 1) for a ratio
    differs: bool  # the interval excludes no effect
    more_seeds: int | None  # inconclusive: seeds to add; None: out of reach
    why: str = ""  # not estimable: the reason

    @property
    def decided(self) -> bool:
        return self.word not in (Word.INCONCLUSIVE, Word.NOT_ESTIMABLE)

    @property
    def slack(self) -> float:
        """How far a decided verdict's deciding end lies past its edge (the margin, or no
        effect), as a share of the interval's half-width on the analysis scale: under
        :data:`CLOSE` a verdict rests on a close call; NaN where undecided."""
        if not self.decided:
            return math.nan
        e = self.estimate
        low, high, bound = e.low, e.high, self.margin
        if e.scale == "ratio":
            low, high, bound = math.log(low), math.log(high), math.log(bound)
        half = (high - low) / 2
        if not math.isfinite(half):  # an end at infinity (by ranks): no edge it could cross
            return math.inf
        if self.word is Word.EQUIVALENT:
            room = min(bound - high, low + bound)
        elif self.word is Word.EXCEEDS:
            room = low - bound if low > bound else -bound - high
        else:
            room = low if low > 0 else -high
        return room / half if half > 0 else math.inf

    def margin_text(self) -> str:
        """``±0.02`` for a difference, ``×/÷1.5`` for a ratio."""
        return f"×/÷{self.margin:g}" if self.estimate.scale == "ratio" else f"±{self.margin:g}"

    def text(self) -> str:
        """The verdict in words, e.g. ``equivalent within ±0.02``."""
        margin = self.margin_text()
        if self.word is Word.NOT_ESTIMABLE:
            return f"not estimable with {self.estimate.seeds} seed(s) ({self.why})"
        if self.word is Word.EXCEEDS:
            return f"exceeds {margin}"
        if self.word is Word.EQUIVALENT:
            return f"equivalent within {margin}" + (" (differs from no effect)" * self.differs)
        if self.word is Word.DIFFERS:
            return f"differs from {self.estimate.null:g}, not shown to exceed {margin}"
        if self.estimate.ranked:
            return "inconclusive (on ranks: no count of more seeds is projected)"
        if self.more_seeds is None:
            return f"inconclusive: {margin} is beyond what more seeds can settle"
        seeds = "seed" if self.more_seeds == 1 else "seeds"
        return f"inconclusive, about {self.more_seeds} more {seeds}"


def estimability(estimate: Estimate, limit: float = NOT_ESTIMABLE) -> str:
    """Why ``estimate`` is not a finding ("" when it is): too few seeds, one bracket, no
    finite interval (on ranks: neither end bounded), or a ratio's interval wider than
    ``limit``."""
    if estimate.seeds < 2:
        return "fewer than 2 seeds"
    if not estimate.resolved:
        return "every seed in one bracket: a finer lattice or more seeds resolve it"
    if math.isnan(estimate.low) or math.isnan(estimate.high):
        return "no interval"
    if not estimate.ranked and not (math.isfinite(estimate.low) and math.isfinite(estimate.high)):
        return "no finite interval"
    if estimate.ranked and estimate.low == -math.inf and estimate.high == math.inf:
        return (  # a signed-rank test of n seeds gives no p under 2 / 2^n
            f"on ranks {estimate.seeds} seeds bound neither end at this level: more seeds do"
        )
    if estimate.scale == "ratio" and wide(estimate.low, estimate.high, limit):
        if 2 * estimate.widen > math.log2(limit):  # the brackets alone: not the seeds' spread
            return f"its seeds' brackets alone span more than {limit:g}×: an edge is ambiguous"
        return f"its interval is wider than {limit:g}×: more seeds narrow it"
    return ""


def wide(low: float, high: float, limit: float = NOT_ESTIMABLE) -> bool:
    """Whether a positive interval spans more than ``limit``× (or is not positive)."""
    return not (low > 0 and high / low <= limit)


def judge(estimate: Estimate, margin: float, limit: float = NOT_ESTIMABLE) -> Verdict:
    """The verdict ``estimate``'s interval supports against ``margin`` (see the module)."""
    why = estimability(estimate, limit)
    if why:
        return Verdict(Word.NOT_ESTIMABLE, estimate, margin, False, None, why)
    low, high = estimate.low, estimate.high
    if estimate.scale == "ratio":
        low, high, bound = math.log(low), math.log(high), math.log(margin)
    else:
        bound = margin
    differs = low > 0 or high < 0
    if low > bound or high < -bound:
        word = Word.EXCEEDS
    elif -bound < low and high < bound:
        word = Word.EQUIVALENT
    elif differs:
        word = Word.DIFFERS
    else:
        word = Word.INCONCLUSIVE
    more = seeds_to_decide(estimate, margin) if word is Word.INCONCLUSIVE else None
    return Verdict(word, estimate, margin, differs, more)


def seeds_to_decide(estimate: Estimate, margin: float) -> int | None:
    """About how many more seeds decide an inconclusive estimand, were its estimate and its
    seeds' spread to stay as they are: the first count whose interval at its level, centred
    there, excludes no effect or lies inside the margin. None when no count under
    :data:`MAX_PAIRS` does (an estimate at no effect's distance from the margin's edge, or a
    lattice's resolution alone wider than the room it has)."""
    if estimate.scale == "ratio":
        centre, bound = abs(math.log2(estimate.value)), math.log2(margin)
    else:
        centre, bound = abs(estimate.value), margin
    room = max(centre, bound - centre) - estimate.widen
    if not math.isfinite(estimate.spread) or not math.isfinite(room) or room <= 0:
        return None
    if estimate.spread == 0:
        return 1
    tail = 0.5 + estimate.level / 2

    def decided(n: int) -> bool:
        return stats.t.ppf(tail, n - 1) * estimate.spread / math.sqrt(n) < room

    if not decided(MAX_PAIRS):
        return None
    low, high = max(estimate.seeds, 2), MAX_PAIRS  # not decided at low (it is inconclusive)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if decided(middle) else (middle, high)
    return max(1, high - estimate.seeds)


def difference_estimate(values: np.ndarray, level: float) -> Estimate:
    """The mean of per-seed differences (nats) and its t interval at ``level``."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    n = len(values)
    mean = float(values.mean()) if n else math.nan
    if n < 2:
        return Estimate(mean, math.nan, math.nan, level, n)
    sd = float(values.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return Estimate(mean, mean - half, mean + half, level, n, "difference", sd)


def rank_estimate(values: np.ndarray, level: float) -> Estimate:
    """Per-seed differences that may hold +inf or -inf (a run that diverged, the worst) by
    ranks: the Hodges–Lehmann estimate and its exact signed-rank interval at ``level``
    (:func:`ablate.report.analysis.signed_rank`)."""
    found = signed_rank(np.asarray(values, dtype=float), level)
    return Estimate(
        found.mean, found.ci_low, found.ci_high, level, found.n_pairs, "difference", ranked=True
    )


LATTICE_SD = 1 / math.sqrt(6)  # the least spread of a ratio of lattice edges, per ``widen``


def ratio_estimate(
    log2_values: np.ndarray, level: float, widen: float = 0.0, resolved: bool = True
) -> Estimate:
    """The geometric mean of per-seed ratios (given as log2) and its t interval at ``level``,
    widened by ``widen`` (log2: the half-widths of the two brackets each ratio is read off).

    Values read off a lattice can agree exactly while the edges they stand for do not: two
    seeds whose edges both moved one step give a spread of 0. So the spread used is at least
    the lattice's own (Sheppard's: an edge uniform over its bracket of width 2h has an SD of
    2h/√12, a ratio of two such edges (2h each) one of ``widen``/√6), never the 0 a grid can
    show (:data:`LATTICE_SD`)."""
    logs = np.asarray(log2_values, dtype=float)
    logs = logs[np.isfinite(logs)]
    n = len(logs)
    centre = float(logs.mean()) if n else math.nan
    if n < 2:
        return Estimate(2.0**centre, math.nan, math.nan, level, n, "ratio", resolved=resolved)
    sd = max(float(logs.std(ddof=1)), widen * LATTICE_SD)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n) + widen
    return Estimate(
        2.0**centre,
        2.0 ** (centre - half),
        2.0 ** (centre + half),
        level,
        n,
        "ratio",
        sd,
        widen,
        resolved,
    )


def claim_word(p: float, above: bool, predicted_above: bool, alpha: float = ALPHA) -> str:
    """A published claim's verdict from its test of no effect (``p``, adjusted over the
    evidence family): *agrees* where it passes with the estimate on the predicted side
    (``above`` no effect, as ``predicted_above``), *disagrees* on the other, else
    *inconclusive*."""
    if not p < alpha:
        return "inconclusive"
    return "agrees" if above == predicted_above else "disagrees"


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
