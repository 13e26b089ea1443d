"""Least-squares fits across model sizes: power laws on log axes and linear trends in log size.

:func:`power_law_fit` fits ``y = a · x^b`` as a straight line through (log10 x, log10 y) with
``scipy.stats.linregress``; the exponent's 95% interval uses Student's t with n − 2 degrees of
freedom, and :meth:`PowerLaw.predict` gives the fitted line's 95% confidence interval at any x
(wide away from the data: an extrapolation says so). :func:`trend_fit` fits ``y = c + s ·
log10 x`` (a difference between variants against size), the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ablate.report.analysis import CONFIDENCE


@dataclass(frozen=True)
class LineFit:
    """``y = intercept + slope · u`` over ``points`` (u, y) pairs, with 95% intervals."""

    slope: float
    slope_low: float
    slope_high: float
    intercept: float
    points: int
    residual_sd: float  # of y about the line (n − 2 degrees of freedom); nan for 2 points
    u_mean: float
    u_sxx: float  # sum of squared deviations of u
    u_span: float  # max u − min u (decades, for u = log10 parameters)

    def at(self, u: float) -> tuple[float, float, float]:
        """The line at ``u`` and its 95% confidence interval (nan without a residual)."""
        y = self.intercept + self.slope * u
        if not math.isfinite(self.residual_sd):
            return y, math.nan, math.nan
        half = (
            _t(self.points)
            * self.residual_sd
            * math.sqrt(1 / self.points + (u - self.u_mean) ** 2 / self.u_sxx)
        )
        return y, y - half, y + half


def _t(points: int) -> float:
    return float(stats.t.ppf((1 + CONFIDENCE) / 2, points - 2))


def line_fit(u: np.ndarray, y: np.ndarray) -> LineFit:
    """Ordinary least squares of y on u; needs at least two distinct u."""
    u, y = np.asarray(u, dtype=float), np.asarray(y, dtype=float)
    fit = stats.linregress(u, y)
    n = len(u)
    if n > 2:
        residuals = y - (fit.intercept + fit.slope * u)
        sd = float(np.sqrt((residuals**2).sum() / (n - 2)))
        half = _t(n) * float(fit.stderr)
    else:
        sd, half = math.nan, math.nan
    return LineFit(
        slope=float(fit.slope),
        slope_low=float(fit.slope) - half,
        slope_high=float(fit.slope) + half,
        intercept=float(fit.intercept),
        points=n,
        residual_sd=sd,
        u_mean=float(u.mean()),
        u_sxx=float(((u - u.mean()) ** 2).sum()),
        u_span=float(u.max() - u.min()),
    )


@dataclass(frozen=True)
class PowerLaw:
    """``y = prefactor · x^exponent``, fitted in log10–log10."""

    line: LineFit

    @property
    def exponent(self) -> float:
        return self.line.slope

    @property
    def interval(self) -> tuple[float, float]:
        """The exponent's 95% interval (nan for a fit through two points)."""
        return self.line.slope_low, self.line.slope_high

    @property
    def estimable(self) -> bool:
        """Whether the data size the exponent: three or more sizes whose values differ (two
        sizes leave no residual; equal values, no spread to fit)."""
        return all(math.isfinite(v) for v in self.interval)

    def not_estimable_text(self) -> str:
        """Why the exponent has no interval, with the sizes and decades it had."""
        over = f"{self.line.points} sizes over {self.line.u_span:.2f} decades"
        if self.line.points < 3:
            return f"not estimable from {over}"
        return f"not estimable: the same value at all {over}"

    @property
    def prefactor(self) -> float:
        return 10**self.line.intercept

    def predict(self, x: float) -> tuple[float, float, float]:
        """The fitted y at ``x`` and the 95% confidence interval of the fitted line there."""
        return tuple(10**v for v in self.line.at(math.log10(x)))  # type: ignore[return-value]


def power_law_fit(x: np.ndarray, y: np.ndarray) -> PowerLaw:
    """Fit ``y = a · x^b`` by least squares on log axes; x and y must be positive."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if (x <= 0).any() or (y <= 0).any():
        raise ValueError("a power law needs positive x and y")
    return PowerLaw(line_fit(np.log10(x), np.log10(y)))


def trend_fit(x: np.ndarray, y: np.ndarray) -> LineFit:
    """Fit ``y = c + s · log10 x``: s is the change in y per decade of x."""
    return line_fit(np.log10(np.asarray(x, dtype=float)), np.asarray(y, dtype=float))
