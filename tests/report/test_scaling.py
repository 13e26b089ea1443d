"""The scaling report: its one verdict-bearing estimand per variant, the gap's slope against
size judged by the one rule, and the descriptive lines that state its numbers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ablate.report.estimands import Finding
from ablate.report.fits import power_law_fit
from ablate.report.plan import MATCHED, Estimand
from ablate.report.scaling import (
    EDGE_NOTE,
    Contradicted,
    baselines,
    contradicted,
    exponent_text,
    extrapolations,
    fit_quantities,
    ratio_lines,
)
from ablate.report.scaling_answer import SizeAnswer, slope_estimate
from ablate.report.verdict import Estimate, Word, judge

PARAMS = np.array([2e5, 5e5, 8e5, 2e6])
WIGGLE = np.array([0.001, -0.001, -0.001, 0.001])


def _sizes(gaps: np.ndarray, seeds: int = 5) -> list[SizeAnswer]:
    """Sizes whose primary estimates are ``gaps``."""
    found = []
    for params, gap in zip(PARAMS, gaps, strict=True):
        estimand = Estimand(
            MATCHED, "rms", "ln", "quality at matched settings", "difference", 0.02, True, 1
        )
        estimate = Estimate(float(gap), gap - 0.01, gap + 0.01, 0.95, seeds)
        found.append(
            SizeAnswer(f"{params:g}", int(params), Finding(estimand, judge(estimate, 0.02)))
        )
    return found


@pytest.mark.parametrize(
    ("gaps", "word"),
    [
        (0.01 + 0.05 * np.log10(PARAMS / 2e5) + WIGGLE, Word.EXCEEDS),  # 0.05 nats per decade
        (0.01 + 0.025 * np.log10(PARAMS / 2e5) + WIGGLE, Word.DIFFERS),
        (0.01 + WIGGLE, Word.EQUIVALENT),
        (0.01 + 30 * WIGGLE, Word.INCONCLUSIVE),
    ],
)
def test_the_gaps_slope_against_size_is_judged_by_the_one_rule(
    gaps: np.ndarray, word: Word
) -> None:
    sizes = _sizes(gaps)
    found = slope_estimate(sizes, 0.95)
    fit = stats.linregress(np.log10(PARAMS), gaps)
    half = stats.t.ppf(0.975, 2) * fit.stderr
    assert (found.value, found.low, found.high) == pytest.approx(
        (fit.slope, fit.slope - half, fit.slope + half)
    )
    assert judge(found, 0.02).word is word


def test_two_sizes_leave_the_slope_not_estimable() -> None:
    found = judge(slope_estimate(_sizes(np.array([0.0, 0.1, np.nan, np.nan])), 0.95), 0.02)
    assert found.word is Word.NOT_ESTIMABLE
    assert found.estimate.seeds == 2 and math.isnan(found.estimate.low)  # two sizes, no interval


def _table() -> pd.DataFrame:
    rows = []
    for size, n in (("d64", 2e5), ("d128", 8e5)):
        for variant, loss, lr in (("layernorm", 2.0, 0.1), ("rmsnorm", 2.1, 0.4)):
            rows.append(
                {
                    "size": size,
                    "variant": variant,
                    "n_params": n,
                    "final_loss": loss,
                    "final_loss_std": 0.01,
                    "max_stable_lr": lr,
                    "ratio_to_baseline": 4.0 if variant == "rmsnorm" else math.nan,
                    "ratio_low": 3.4 if variant == "rmsnorm" else math.nan,
                    "ratio_high": 4.7 if variant == "rmsnorm" else math.nan,
                    "max_lr_contradictions": 2 if (size, variant) == ("d128", "rmsnorm") else 0,
                    "unigram_loss": 3.25,
                    "vocab_size": 256,
                }
            )
    return pd.DataFrame(rows)


def test_losses_are_held_against_the_trivial_baselines_and_lrs_against_the_baseline() -> None:
    found = baselines(_table())
    assert found is not None and found.uniform == pytest.approx(math.log(256))
    assert (found.unigram, found.loss_min, found.loss_max) == (3.25, 2.0, 2.1) and found.all_below
    assert not baselines(_table().assign(final_loss=3.3)).all_below
    assert baselines(_table().assign(unigram_loss=math.nan)) is None
    assert contradicted(_table()) == [Contradicted("d128", "rmsnorm", 2)]
    ratio, _ = ratio_lines(_table(), ["layernorm", "rmsnorm"])
    # the rendering of the table's per-size ratios and intervals is what this checks
    assert "d64 4.00 [3.40, 4.70]; d128 4.00 [3.40, 4.70]" in ratio


def test_a_contradicted_bracket_is_not_fitted() -> None:
    table = _table().assign(
        final_loss_std=0.01, best_lr=0.01, lr_sensitivity=0.1, max_stable_lr_low=0.1
    )
    fits = fit_quantities(table, ["layernorm", "rmsnorm"])
    assert ("layernorm", "max_stable_lr") in fits and ("rmsnorm", "final_loss") in fits
    assert ("rmsnorm", "max_stable_lr") not in fits  # one size left: nothing to fit


SIZES = np.array([2.2e5, 4.8e5, 8.3e5, 1.8e6])


def test_an_exponent_is_its_interval_or_why_it_has_none() -> None:
    rng = np.random.default_rng(3)
    falling = power_law_fit(SIZES, SIZES**-0.4 * np.exp(rng.normal(0.0, 0.02, 4)))
    low, high = falling.interval
    assert exponent_text(falling) == f"{falling.exponent:+.3f} [{low:+.3f}, {high:+.3f}]"
    assert high < 0  # a falling exponent: its interval, no word (the line above)
    assert exponent_text(falling, edge=True) == exponent_text(falling) + EDGE_NOTE
    two = power_law_fit(SIZES[:2], SIZES[:2] ** 0.5)
    assert exponent_text(two) == "not estimable from 2 sizes over 0.34 decades"
    same = power_law_fit(SIZES, np.full(4, 0.0051))  # one search LR at every size
    assert exponent_text(same) == "not estimable: the same value at all 4 sizes over 0.91 decades"


def test_a_max_stable_lr_that_cannot_be_fitted_is_not_extrapolated() -> None:
    table = _table()
    fits = {
        ("layernorm", "max_stable_lr"): power_law_fit(SIZES[:2], np.array([0.2, 0.18])),
        ("rmsnorm", "max_stable_lr"): power_law_fit(SIZES, SIZES**-0.3),
    }
    target = 10 * float(table["n_params"].max())
    found = extrapolations(fits, ["layernorm", "rmsnorm"], target)
    assert found == {"rmsnorm": pytest.approx(fits[("rmsnorm", "max_stable_lr")].predict(target))}
    assert found["rmsnorm"][0] == pytest.approx(target**-0.3)
