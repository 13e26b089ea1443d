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


def test_windowed_threshold_ignores_a_one_batch_spike_but_not_a_blow_up() -> None:
    monitor = DivergenceMonitor(threshold=5.0, warmup_steps=2, window=5)
    for step, loss in enumerate([5.5, 4.0, 3.5, 3.4, 3.3], start=1):
        assert monitor.check(step, loss) is None
    assert monitor.check(6, 10.0) is None  # mean of the last 5: (3.5+3.4+3.3+10+...)/5 < 5
    assert monitor.check(7, 3.2) is None
    blow_up = DivergenceMonitor(threshold=5.0, warmup_steps=2, window=5)
    losses = [5.5, 4.0, 3.5, 6.0, 8.0]  # the mean of these five is 5.4
    stops = [blow_up.check(step, loss) for step, loss in enumerate(losses, start=1)]
    assert stops[:4] == [None] * 4
    assert stops[4] is not None and stops[4].step == 5 and "mean loss of 5 steps" in stops[4].reason
