"""The divergence criterion on constructed losses."""

from __future__ import annotations

import math

from ablate.probes import DivergenceMonitor


def test_non_finite_loss_diverges_at_any_step() -> None:
    monitor = DivergenceMonitor(threshold=5.0, warmup_steps=10)
    assert monitor.check(2, math.nan).reason.startswith("non-finite")
    assert monitor.check(3, math.inf).step == 3


def test_threshold_applies_only_after_warmup() -> None:
    monitor = DivergenceMonitor(threshold=5.0, warmup_steps=10)
    assert monitor.check(10, 9.0) is None
    found = monitor.check(11, 9.0)
    assert found is not None and found.step == 11 and "> threshold 5" in found.reason
    assert monitor.check(50, 4.9) is None


def test_threshold_from_the_first_step_when_after_warmup_is_off() -> None:
    monitor = DivergenceMonitor(threshold=5.0, warmup_steps=10, after_warmup=False)
    assert monitor.check(1, 6.0) is not None
