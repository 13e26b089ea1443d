"""Power-law and trend fits across sizes: known exponents recovered, intervals that hold them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ablate.report.fits import line_fit, power_law_fit, trend_fit

SIZES = np.array([2.2e5, 4.8e5, 8.3e5, 1.8e6])


def test_a_noiseless_power_law_gives_its_exponent_and_prefactor_exactly() -> None:
    fit = power_law_fit(SIZES, 3.0 * SIZES**-0.35)
    assert fit.exponent == pytest.approx(-0.35, abs=1e-12)
    assert fit.prefactor == pytest.approx(3.0, rel=1e-9)
    assert fit.interval == pytest.approx((-0.35, -0.35), abs=1e-6)
    assert fit.predict(1.8e7)[0] == pytest.approx(3.0 * 1.8e7**-0.35, rel=1e-9)


def test_with_noise_the_interval_holds_the_true_exponent_about_95_in_100_times() -> None:
    rng = np.random.default_rng(0)
    held = 0
    for _ in range(400):
        y = 0.5 * SIZES**0.25 * np.exp(rng.normal(0.0, 0.05, len(SIZES)))
        low, high = power_law_fit(SIZES, y).interval
        held += low <= 0.25 <= high
    assert 0.91 <= held / 400 <= 0.99


def test_the_extrapolated_interval_widens_away_from_the_data() -> None:
    rng = np.random.default_rng(1)
    fit = power_law_fit(SIZES, SIZES**-0.5 * np.exp(rng.normal(0.0, 0.1, len(SIZES))))
    _, low_in, high_in = fit.predict(6e5)
    _, low_out, high_out = fit.predict(1.8e7)
    assert high_out / low_out > high_in / low_in > 1


def test_two_points_fit_exactly_with_no_interval() -> None:
    fit = power_law_fit(SIZES[:2], SIZES[:2] ** 2.0)
    assert fit.exponent == pytest.approx(2.0)
    assert all(math.isnan(v) for v in fit.interval)
    assert math.isnan(fit.predict(1e6)[1])


def test_a_power_law_needs_positive_values() -> None:
    with pytest.raises(ValueError, match="positive"):
        power_law_fit(SIZES, -SIZES)


def test_the_trend_is_per_decade_of_x() -> None:
    fit = trend_fit(SIZES, 0.01 + 0.02 * np.log10(SIZES))
    assert fit.slope == pytest.approx(0.02) and fit.intercept == pytest.approx(0.01)
    assert line_fit(np.array([0.0, 1.0, 2.0]), np.array([1.0, 3.0, 5.0])).at(3.0)[0] == 7.0
