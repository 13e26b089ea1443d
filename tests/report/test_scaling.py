"""The scaling report's verdicts: whether a gap grows, shrinks or is flat with size, and the
lines that state it with its numbers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ablate.report.fits import power_law_fit, trend_fit
from ablate.report.scaling import (
    baseline_lines,
    exponent_text,
    fit_quantities,
    ratio_lines,
    summary_lines,
    trend_verdict,
)

PARAMS = np.array([2e5, 5e5, 8e5, 2e6])
WIGGLE = np.array([0.001, -0.001, -0.001, 0.001])


@pytest.mark.parametrize(
    ("gaps", "verdict"),
    [
        (0.01 + 0.02 * np.log10(PARAMS / 2e5) + WIGGLE, "grows with size"),
        (-0.01 - 0.02 * np.log10(PARAMS / 2e5) + WIGGLE, "grows with size"),
        (0.05 - 0.02 * np.log10(PARAMS / 2e5) + WIGGLE, "shrinks with size"),
        (0.01 + 10 * WIGGLE, "is flat with size within its uncertainty"),
    ],
)
def test_the_gap_grows_shrinks_or_is_flat(gaps: np.ndarray, verdict: str) -> None:
    assert trend_verdict(trend_fit(PARAMS, gaps)).startswith(verdict)


def test_two_sizes_cannot_judge_a_trend() -> None:
    assert "cannot be judged from two sizes" in trend_verdict(
        trend_fit(PARAMS[:2], np.array([0.0, 0.1]))
    )


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
    (line,) = baseline_lines(_table())
    assert "uniform guess 5.545 nats, unigram frequencies 3.2500" in line
    assert "final losses 2.0000–2.1000, all below it" in line
    ratio, against = ratio_lines(_table(), ["layernorm", "rmsnorm"])
    assert "rmsnorm / layernorm (paired by seed, 95% interval" in ratio
    assert "d64 4.00 [3.40, 4.70]; d128 4.00 [3.40, 4.70]" in ratio
    assert "left out of the max-stable-LR fit: d128 rmsnorm (2 run(s))" in against


def test_a_contradicted_bracket_is_not_fitted() -> None:
    table = _table().assign(
        final_loss_std=0.01, best_lr=0.01, lr_sensitivity=0.1, max_stable_lr_low=0.1
    )
    fits = fit_quantities(table, ["layernorm", "rmsnorm"])
    assert ("layernorm", "max_stable_lr") in fits and ("rmsnorm", "final_loss") in fits
    assert ("rmsnorm", "max_stable_lr") not in fits  # one size left: nothing to fit


SIZES = np.array([2.2e5, 4.8e5, 8.3e5, 1.8e6])


def test_an_exponent_is_worded_only_where_its_interval_supports_it() -> None:
    rng = np.random.default_rng(3)
    falling = power_law_fit(SIZES, SIZES**-0.4 * np.exp(rng.normal(0.0, 0.02, 4)))
    assert exponent_text(falling).endswith(": falls with size")
    flat = power_law_fit(SIZES, 2.0 * np.exp(rng.normal(0.0, 0.05, 4)))
    assert exponent_text(flat).endswith(": no trend shown (the interval holds 0)")
    assert "not read as a trend" in exponent_text(falling, edge=True)
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
    text = "\n".join(summary_lines(table, fits, {}, ["layernorm", "rmsnorm"]))
    assert "No extrapolation of layernorm's max stable LR: its exponent is not estimable" in text
    assert "**Extrapolation**, not a measurement: rmsnorm's max stable LR" in text
    assert "**Extrapolation**, not a measurement: layernorm's" not in text
