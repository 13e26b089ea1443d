"""The stability criterion, LR sensitivity, and the bracketing search on synthetic functions."""

from __future__ import annotations

import math

import pytest

from ablate.config import StabilityConfig
from ablate.probes import DivergenceMonitor
from ablate.stability import (
    bracket_max_stable,
    clipped_loss,
    criterion_text,
    final_loss_verdict,
    lr_sensitivity,
)

L0 = math.log(256)


def _judge(curve: list[float], final_val: float, warmup: int = 5) -> tuple[bool, str | None]:
    """Apply the whole criterion to a constructed train-loss curve and final val loss."""
    monitor = DivergenceMonitor(threshold=L0, warmup_steps=warmup, window=2)
    for step, loss in enumerate(curve, start=1):
        stop = monitor.check(step, loss)
        if stop is not None:
            return False, stop.reason
    verdict = final_loss_verdict(final_val, L0, 0.1, len(curve))
    return verdict.stable, verdict.reason


def test_criterion_on_constructed_loss_curves() -> None:
    healthy = [5.5, 5.0, 4.2, 3.6, 3.1, 2.8, 2.6, 2.5]
    assert _judge(healthy, 2.55) == (True, None)
    nan = [5.5, 5.0, math.nan, 3.0]
    stable, reason = _judge(nan, 3.0)
    assert not stable and "non-finite" in reason
    explosion = [5.5, 4.0, 3.5, 3.2, 3.0, 2.9, 7.5, 40.0]
    stable, reason = _judge(explosion, 2.9)
    assert not stable and "threshold" in reason
    plateau = [5.55, 5.54, 5.53, 5.52, 5.50, 5.49, 5.48, 5.48]
    stable, reason = _judge(plateau, 5.47)
    assert not stable and "final val loss" in reason
    spike_in_warmup = [5.5, 9.0, 4.0, 3.5, 3.2, 3.0, 2.9, 2.8]  # tolerated during warmup
    assert _judge(spike_in_warmup, 2.8) == (True, None)
    one_batch_spike = [5.5, 4.0, 3.5, 3.2, 3.0, 2.9, 6.5, 2.9]  # above ℓ0 once, recovered
    assert _judge(one_batch_spike, 2.9) == (True, None)


def test_clipped_loss_and_sensitivity() -> None:
    assert clipped_loss(None, L0) == L0 and clipped_loss(math.nan, L0) == L0
    assert clipped_loss(9.0, L0) == L0 and clipped_loss(2.0, L0) == 2.0
    losses = [3.0, 2.0, 2.5, math.nan]
    assert lr_sensitivity(losses, L0) == pytest.approx((3.0 + 2.0 + 2.5 + L0) / 4 - 2.0)
    assert lr_sensitivity([2.0, 2.0], L0) == 0.0


def test_criterion_text_names_the_settings() -> None:
    text = criterion_text(StabilityConfig(final_margin=0.25))
    assert "non-finite" in text and "ℓ0 = ln(vocab) after warmup" in text and "0.25" in text
    assert "mean train loss of 5 steps" in text
    one = criterion_text(StabilityConfig(threshold=7, after_warmup=False, window=1))
    assert "the train loss exceeds 7 at any step" in one


@pytest.mark.parametrize("boundary", [3e-4, 0.0123, 0.7, 5.0])
@pytest.mark.parametrize("start", [1e-3, 0.05])
def test_bracketing_reaches_the_requested_precision(boundary: float, start: float) -> None:
    calls: list[float] = []

    def stable(lr: float) -> bool:
        calls.append(lr)
        return lr <= boundary

    found = bracket_max_stable(
        stable, start, factor=4.0, precision=2**0.25, lr_min=1e-6, lr_max=100
    )
    assert found.largest_stable <= boundary < found.smallest_unstable
    assert found.ratio <= 2**0.25 * (1 + 1e-12)
    assert [lr for lr, _ in found.probes] == calls and len(set(calls)) == len(calls)
    assert len(calls) <= 12  # coarse x4 steps over at most 7 decades, then 3 bisections


def test_bracketing_stops_at_the_range_limits() -> None:
    always = bracket_max_stable(lambda lr: True, 0.1, factor=4, lr_max=2.0)
    assert always.largest_stable == 2.0 and always.smallest_unstable is None
    never = bracket_max_stable(lambda lr: False, 0.1, factor=4, lr_min=1e-3)
    assert never.largest_stable is None and never.smallest_unstable == 1e-3
    with pytest.raises(ValueError):
        bracket_max_stable(lambda lr: True, 0.1, factor=1.0)


def test_bracketing_counts_a_ratio_equal_to_the_precision_as_reached() -> None:
    probes: list[float] = []

    def stable(lr: float) -> bool:
        probes.append(lr)
        return lr <= 0.3

    found = bracket_max_stable(stable, 0.003, factor=4.0, precision=2**0.25)
    # 3e-3 x4 -> 0.768 brackets the boundary with ratio 4; three bisections reach 4^(1/8)
    assert len(probes) == 5 + 3
    assert found.ratio == pytest.approx(2**0.25)
